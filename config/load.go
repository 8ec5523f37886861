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
	var raw rawFile
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		return nil, decodeError(path, data, err)
	}
	p := newProblems(path, indexLines(data))
	checkUnknown(p, &md, raw.VIPs)
	c := build(p, &raw)
	if err := p.err(); err != nil {
		return nil, err
	}
	c.Path, c.lines = path, p.lines
	sortProblems(p.warnings)
	c.Warnings = p.warnings
	return c, nil
}

// build resolves and checks the whole file.
func build(p *problems, raw *rawFile) *Config {
	c := &Config{
		Global: buildGlobal(p, &raw.Global),
		XDP:    buildXDP(p, raw.XDP),
		BGP:    buildBGP(p, raw.BGP),
	}
	if len(raw.VIPs) == 0 {
		p.add("", "vip", "no [[vip]] table: at least one VIP is required")
	}
	for i := range raw.VIPs {
		c.VIPs = append(c.VIPs, buildVIP(p, i, &raw.VIPs[i], &raw.Defaults, c))
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
