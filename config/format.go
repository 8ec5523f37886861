// Format: a Config back to TOML, every value resolved, for
// `l4lb status --show-config` and for comparing a file with what runs.

package config

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Redacted replaces secrets (health check passwords) in Format's output.
const Redacted = "<redacted>"

// FormatOptions tune Format. The zero value redacts secrets.
type FormatOptions struct {
	// ShowSecrets prints passwords instead of Redacted.
	ShowSecrets bool
}

// Format writes c as TOML with every key that applies spelled out: what
// each VIP runs with after [defaults] and the built-in defaults. Parse of
// the result gives c back (with secrets shown).
func Format(c *Config, opts FormatOptions) []byte {
	w := &tomlWriter{}
	w.comment("l4lb configuration in force, every default resolved (from %s)", c.Path)
	w.table("global")
	writeKeys(w, globalKeys, &c.Global)
	if c.XDP != nil {
		w.table("xdp")
		writeKeys(w, xdpKeys, c.XDP)
	}
	formatBGP(w, c.BGP, opts)
	formatFlowSync(w, c.FlowSync, opts)
	for i := range c.VIPs {
		formatVIP(w, &c.VIPs[i], opts)
	}
	return []byte(w.b.String())
}

func formatVIP(w *tomlWriter, v *VIP, opts FormatOptions) {
	w.array("vip")
	writeKeys(w, vipKeys, v)
	formatHealth(w, "vip.health", &v.Health, opts)
	formatBackends(w, "vip.backend", v.Backends)
	for i := range v.Routes {
		r := &v.Routes[i]
		w.array("vip.route")
		writeKeys(w, routeKeys, r)
		formatHealth(w, "vip.route.health", &r.Health, opts)
		formatBackends(w, "vip.route.backend", r.Backends)
	}
}

// formatBackends writes bs as the array of tables name.
func formatBackends(w *tomlWriter, name string, bs []Backend) {
	for i := range bs {
		w.array(name)
		writeKeys(w, backendKeys, &bs[i])
	}
}

// stringList is a TOML array of strings.
func stringList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quoteTOML(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// formatHealth writes h as the table name; its password is redacted
// unless opts.ShowSecrets.
func formatHealth(w *tomlWriter, table string, h *Health, opts FormatOptions) {
	shown := *h
	if shown.Password != "" && !opts.ShowSecrets {
		shown.Password = Redacted
	}
	w.table(table)
	writeKeys(w, healthKeys, &shown)
}

// tomlWriter writes TOML text.
type tomlWriter struct{ b strings.Builder }

func (w *tomlWriter) comment(format string, args ...any) {
	fmt.Fprintf(&w.b, "# "+format+"\n", args...)
}

func (w *tomlWriter) table(name string) { fmt.Fprintf(&w.b, "\n[%s]\n", name) }
func (w *tomlWriter) array(name string) { fmt.Fprintf(&w.b, "\n[[%s]]\n", name) }
func (w *tomlWriter) raw(key, v string) { fmt.Fprintf(&w.b, "%s = %s\n", key, v) }

// quoteTOML quotes s as a TOML basic string.
func quoteTOML(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
