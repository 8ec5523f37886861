// Run-time backend changes (l4.BackendChange) laid over a file's Config,
// checked by the same code and in the same words as the file.

package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/l4lb/l4lb/l4"
)

// changesSource names the config a run-time change is checked in, in
// problems that have no better place.
const changesSource = "run-time change"

// ErrNoFileBackend: a set or remove names a backend that the file does
// not have with an address (a backend of a DNS name is changed in the
// file).
var ErrNoFileBackend = errors.New("no such backend in the file")

// BackendText is a backend's keys as Format writes them, on one line:
// what a run-time change remembers of the file's backend (l4.BackendChange.File),
// to tell whether a reload changed it.
func BackendText(b *Backend) string {
	w := &tomlWriter{}
	writeKeys(w, backendKeys, b)
	return strings.Join(strings.Fields(strings.ReplaceAll(w.b.String(), "\n", "; ")), " ")
}

// FileBackend returns the backend of file's VIP vipName whose identity is
// id, written with an address (not a DNS name), or nil.
func FileBackend(file *Config, vipName, id string) *Backend {
	v := file.VIP(vipName)
	if v == nil {
		return nil
	}
	for i := range v.Backends {
		if b := &v.Backends[i]; b.ID() == id && b.Address.IsValid() && b.Host == "" && b.SRV == "" {
			return b
		}
	}
	return nil
}

// WithBackendChanges returns file with changes laid over it, checked as
// a file is: a change that makes the config invalid (a bad address, a
// self-loop, a weight out of range, a VIP left without backends) gives an
// *Error with the problems in the words `l4lb check` uses, without line
// numbers. Warnings are the file's.
func WithBackendChanges(file *Config, changes []l4.BackendChange) (*Config, error) {
	if len(changes) == 0 {
		return file, nil
	}
	data := Format(file, FormatOptions{ShowSecrets: true})
	var tree map[string]any
	if _, err := toml.Decode(string(data), &tree); err != nil {
		return nil, fmt.Errorf("%s: the running config does not read back: %w", changesSource, err)
	}
	if err := layChanges(file, tree, changes); err != nil {
		return nil, err
	}
	p := newProblems(changesSource, indexLines(data))
	c := build(p, tree)
	if err := p.err(); err != nil {
		var ce *Error
		if errors.As(err, &ce) {
			for i := range ce.Problems {
				ce.Problems[i].File, ce.Problems[i].Line = changesSource, 0
			}
		}
		return nil, err
	}
	c.Path, c.lines, c.Warnings = file.Path, file.lines, file.Warnings
	keepLines(file, c)
	return c, nil
}

// keepLines gives c's VIPs and backends the lines the file has them on
// (an added backend has none).
func keepLines(file, c *Config) {
	for i := range c.VIPs {
		v := &c.VIPs[i]
		fv := file.VIP(v.Name)
		if fv == nil {
			continue
		}
		v.Line = fv.Line
		for j := range v.Backends {
			b := &v.Backends[j]
			b.Line = 0
			for _, fb := range fv.Backends {
				if fb.ID() == b.ID() && fb.Address == b.Address {
					b.Line = fb.Line
				}
			}
		}
	}
}

// layChanges edits the decoded tree of file: sets and removals find the
// file's backends by identity, additions go after them.
func layChanges(file *Config, tree map[string]any, changes []l4.BackendChange) error {
	vips, _ := tree["vip"].([]map[string]any)
	for i := range changes {
		c := &changes[i]
		vi := slices.IndexFunc(file.VIPs, func(v VIP) bool { return v.Name == c.VIP })
		if vi < 0 || vi >= len(vips) {
			return fmt.Errorf("vip %q: no such VIP", c.VIP)
		}
		if c.Added {
			continue
		}
		if FileBackend(file, c.VIP, c.Backend) == nil {
			return fmt.Errorf("vip %q: %w: %q", c.VIP, ErrNoFileBackend, c.Backend)
		}
		raws, _ := vips[vi]["backend"].([]map[string]any)
		for _, raw := range raws {
			if rawBackendID(raw) != c.Backend {
				continue
			}
			switch {
			case c.Removed:
				raw[removedMark] = true
			default:
				setInt(raw, "weight", c.Weight)
				setInt(raw, "max_conns", c.MaxConns)
			}
		}
	}
	for vi := range vips {
		raws, _ := vips[vi]["backend"].([]map[string]any)
		raws = slices.DeleteFunc(raws, func(raw map[string]any) bool { return raw[removedMark] == true })
		for i := range changes {
			if c := &changes[i]; c.Added && c.VIP == file.VIPs[vi].Name {
				raws = append(raws, addedRaw(c))
			}
		}
		vips[vi]["backend"] = raws
	}
	return nil
}

// removedMark marks a backend table a change removes (no key of the file
// can have this name: it has a space).
const removedMark = "removed by a run-time change"

// rawBackendID is the identity of a decoded backend table as Format wrote it.
func rawBackendID(raw map[string]any) string {
	if n, ok := raw["name"].(string); ok && n != "" {
		return n
	}
	a, _ := raw["address"].(string)
	return a
}

// setInt sets key to *v, when v is set.
func setInt(raw map[string]any, key string, v *int) {
	if v != nil {
		raw[key] = int64(*v)
	}
}

// addedRaw is an added backend as a [[vip.backend]] table: the address as
// the operator wrote it, so that a bad one is refused as the file's is.
func addedRaw(c *l4.BackendChange) map[string]any {
	raw := map[string]any{"address": c.Address}
	if c.Name != "" {
		raw["name"] = c.Name
	}
	if c.Backup {
		raw["backup"] = true
	}
	setInt(raw, "weight", c.Weight)
	setInt(raw, "max_conns", c.MaxConns)
	return raw
}

// DroppedChange is a run-time change a new file ends, and why.
type DroppedChange struct {
	Change l4.BackendChange
	Why    string
}

// RebaseBackendChanges lays changes over a new file (a reload, or the
// file at start for changes a state file kept): a change whose backend
// the file now has otherwise than when it was made, or whose VIP is
// gone, is dropped, as is one that no longer checks (its added address
// now taken by the file); the rest are kept, in order. cfg is file with
// the kept changes.
func RebaseBackendChanges(file *Config, changes []l4.BackendChange) (cfg *Config, kept []l4.BackendChange, dropped []DroppedChange) {
	for _, c := range changes {
		if why := staleChange(file, &c); why != "" {
			dropped = append(dropped, DroppedChange{c, why})
			continue
		}
		if _, err := WithBackendChanges(file, append(slices.Clone(kept), c)); err != nil {
			dropped = append(dropped, DroppedChange{c, "it no longer checks: " + ProblemsText(err)})
			continue
		}
		kept = append(kept, c)
	}
	cfg, err := WithBackendChanges(file, kept)
	if err != nil { // each was checked with those before it
		for _, c := range kept {
			dropped = append(dropped, DroppedChange{c, "the changes no longer check together: " + ProblemsText(err)})
		}
		return file, nil, dropped
	}
	return cfg, kept, dropped
}

// staleChange says why c no longer applies to file ("": it does).
func staleChange(file *Config, c *l4.BackendChange) string {
	v := file.VIP(c.VIP)
	switch {
	case v == nil:
		return "the file has no VIP " + c.VIP + " any more"
	case c.Added:
		if slices.ContainsFunc(v.Backends, func(b Backend) bool { return b.ID() == c.Backend }) {
			return "the file has a backend " + c.Backend + " now"
		}
		return ""
	}
	fb := FileBackend(file, c.VIP, c.Backend)
	switch {
	case fb == nil:
		return "the file has no backend " + c.Backend + " any more"
	case BackendText(fb) != c.File:
		return "the file changed the backend (now " + BackendText(fb) + ")"
	}
	return ""
}

// ProblemsText is err's problems on one line, each without its file, or
// err's text.
func ProblemsText(err error) string {
	var ce *Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	parts := make([]string, len(ce.Problems))
	for i, p := range ce.Problems {
		p.File, p.Line = "", 0
		parts[i] = strings.TrimPrefix(p.String(), ": ")
	}
	return strings.Join(parts, "; ")
}
