// Load and Parse: file -> strict decode -> layered, checked Config.

package config

import (
	"fmt"

	"github.com/BurntSushi/toml"
)

// Load reads and parses the config file at path. A file that is not a
// valid config gives an *Error listing every problem.
func Load(path string) (*Config, error) {
	data, err := readFile(path, nil)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a config file's contents; path is used only in messages and
// as Config.Path. Any problem gives an *Error listing every problem found.
func Parse(path string, data []byte) (*Config, error) {
	if p := checkShape(path, data); p != nil {
		return nil, &Error{Problems: []Problem{*p}}
	}
	var shape rawFile
	md, err := toml.Decode(string(data), &shape)
	if err != nil {
		return nil, decodeError(path, data, err)
	}
	var tree map[string]any
	if _, err := toml.Decode(string(data), &tree); err != nil {
		return nil, decodeError(path, data, err)
	}
	p := newProblems(path, indexLines(data))
	checkUnknown(p, &md, tree)
	c := build(p, tree)
	if err := p.err(); err != nil {
		return nil, err
	}
	c.Path, c.lines = path, p.lines
	sortProblems(p.warnings)
	c.Warnings = p.warnings
	return c, nil
}

// build resolves and checks the whole file.
func build(p *problems, file rawTable) *Config {
	c := &Config{
		Global:   buildGlobal(p, file.table("global")),
		XDP:      buildXDP(p, file),
		BGP:      buildBGP(p, file),
		FlowSync: buildFlowSync(p, file),
	}
	vips := file.tables("vip")
	if len(vips) == 0 {
		p.add("", "vip", "no [[vip]] table: at least one VIP is required")
	}
	for i, v := range vips {
		c.VIPs = append(c.VIPs, buildVIP(p, i, v, file.table("defaults"), c))
	}
	checkUnique(p, c.VIPs)
	checkBindConflicts(p, c)
	checkLoops(p, c.VIPs)
	warnFile(p, c)
	return c
}

// checkUnique reports VIPs that share a name, or a listen address and protocol.
func checkUnique(p *problems, vips []VIP) {
	names := map[string]int{}
	listens := map[string]int{}
	for i, v := range vips {
		if j, dup := names[v.Name]; dup && v.Name != "" {
			p.add(v.Name, fmt.Sprintf("vip[%d].name", i), "%q is already the name of vip[%d] (line %s)", v.Name, j, lineString(vips[j].Line))
		} else if !dup {
			names[v.Name] = i
		}
		if !v.Listen.IsValid() {
			continue
		}
		key := v.Key().String()
		if j, dup := listens[key]; dup {
			p.add(v.Name, fmt.Sprintf("vip[%d].listen", i), "%s is already served by vip %q (line %s)", key, vips[j].Name, lineString(vips[j].Line))
		} else {
			listens[key] = i
		}
	}
}
