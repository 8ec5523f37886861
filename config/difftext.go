// Changes as text, like a plan: `+` added, `-` removed, `~` changed.

package config

import (
	"fmt"
	"strings"
)

// Text renders c one change per line, each saying when it takes effect,
// and a summary line; "no changes" when a reload would change nothing.
func (c *Changes) Text() string {
	if c.Empty() {
		return "no changes\n"
	}
	var b strings.Builder
	for _, ch := range c.Global {
		fmt.Fprintf(&b, "~ %s\n", changeLine(ch, ""))
	}
	for i := range c.VIPs {
		writeVIP(&b, &c.VIPs[i])
	}
	b.WriteString(c.summary())
	return b.String()
}

// changeLine is `key: old -> new (when)`.
func changeLine(ch Change, flows string) string {
	return fmt.Sprintf("%s: %s -> %s (%s)", ch.Key, ch.Old, ch.New, effectText(ch.Effect, ch.Note, flows))
}

// effectText says when a change applies and what else happens; flows
// names what a VIP carries (connections, sessions, flows).
func effectText(e Effect, note, flows string) string {
	s := string(e)
	switch e {
	case EffectNow:
		s = "at once"
	case EffectNewFlows:
		s = "new " + flows + " only"
	case EffectVIPRestart:
		s = "the VIP restarts on the other plane: its established flows stay on the old one until they end or drain_timeout"
	case EffectNextBind:
		s = "when the VIP's socket is next opened"
	case EffectRestart:
		s = "needs a restart: a reload keeps the running value"
	}
	if note != "" {
		s += "; " + note
	}
	return s
}

// flowWord names what a VIP carries.
func flowWord(c *VIPChange) string {
	switch {
	case c.Mode == "xdp":
		return "flows"
	case c.Protocol == "udp":
		return "sessions"
	}
	return "connections"
}

func writeVIP(b *strings.Builder, c *VIPChange) {
	head := fmt.Sprintf("vip %q %s/%s", c.Name, c.Protocol, c.Listen)
	switch c.Op {
	case OpAdd:
		fmt.Fprintf(b, "+ %s: %s, %s, %s; %s\n", head, c.Mode, c.Algorithm, Plural(c.Backends, "backend"), c.Note)
	case OpRemove:
		fmt.Fprintf(b, "- %s: %s\n", head, c.Note)
	default:
		fmt.Fprintf(b, "~ %s\n", head)
		flows := flowWord(c)
		for _, s := range c.Settings {
			fmt.Fprintf(b, "    ~ %s\n", changeLine(s, flows))
		}
		for i := range c.Members {
			writeBackend(b, &c.Members[i], flows)
		}
	}
}

func writeBackend(b *strings.Builder, m *BackendChange, flows string) {
	who := m.Address.String()
	if m.ID != who {
		who = fmt.Sprintf("%q %s", m.ID, who)
	}
	switch m.Op {
	case OpAdd:
		fmt.Fprintf(b, "    + backend %s weight %d (%s)\n", who, m.Weight, effectText(m.Effect, m.Note, flows))
	case OpRemove:
		when := effectText(m.Effect, m.Note, flows)
		if m.Effect == EffectNewFlows {
			when = "no new " + flows + "; " + m.Note
		}
		fmt.Fprintf(b, "    - backend %s (%s)\n", who, when)
	default:
		parts := make([]string, len(m.Changes))
		for i, ch := range m.Changes {
			parts[i] = ch.Key + " " + ch.Old + " -> " + ch.New
		}
		fmt.Fprintf(b, "    ~ backend %s: %s (%s)\n", who, strings.Join(parts, ", "), effectText(m.Effect, m.Note, flows))
	}
}

// summary counts the changes.
func (c *Changes) summary() string {
	ops := map[Op]int{}
	for _, v := range c.VIPs {
		ops[v.Op]++
	}
	s := fmt.Sprintf("reload: %s to add, %d to remove, %d to change", Plural(ops[OpAdd], "VIP"), ops[OpRemove], ops[OpChange])
	if n := len(c.Global); n > 0 {
		s += fmt.Sprintf("; %s", Plural(n, "global setting"))
	}
	if n := len(c.NeedRestart()); n > 0 {
		s += fmt.Sprintf("; %d only by a restart", n)
	}
	return s + "\n"
}

// NeedRestart lists the changes that only a restart of l4lb applies.
func (c *Changes) NeedRestart() []Change {
	var out []Change
	for _, ch := range c.Global {
		if ch.Effect == EffectRestart {
			out = append(out, ch)
		}
	}
	return out
}

// Plural writes a count and its noun, in the plural unless the count is
// 1: "1 VIP", "2 VIPs", "0 warnings". Every message that counts uses it.
func Plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
