// Strictness: keys the schema does not know, and values that do not fit it.

package config

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// checkUnknown reports every key the schema does not know, with its full
// path and line. Undecoded gives unknown keys without array indexes
// (vip.health.intervall); the line index has every key with its indexes
// (vip[1].health.intervall), so each unknown key is looked up there. A key
// the index missed is still reported, without a line.
func checkUnknown(p *problems, md *toml.MetaData, file rawTable) {
	vips := file.tables("vip")
	unknown := unknownKeys(md)
	found := map[string]bool{}
	for _, e := range p.lines.entries {
		k := toml.Key(e.path.names())
		if _, ok := unknown[k.String()]; !ok {
			continue
		}
		found[k.String()] = true
		path := slices.Clone(e.path)
		path[len(path)-1].idx = -1 // vip[0].backends, not vip[0].backends[2]
		p.addAt(e.line, vipName(e.path, vips), path.String(), unknownMsg(md, k))
	}
	for _, k := range md.Keys() {
		if _, ok := unknown[k.String()]; ok && !found[k.String()] {
			found[k.String()] = true
			p.addAt(0, "", k.String(), unknownMsg(md, k))
		}
	}
}

// unknownKeys returns the outermost keys that no key table has (the
// decoder of the file's shape leaves every key undecoded), and keys that
// are not lower case (the decoder matches field names without regard to
// case, the schema does not), by Key.String().
func unknownKeys(md *toml.MetaData) map[string]toml.Key {
	bad := map[string]bool{}
	known := schema{}
	for _, k := range md.Undecoded() {
		if !known.has(k) {
			bad[k.String()] = true
		}
	}
	for _, k := range md.Keys() {
		if slices.ContainsFunc(k, notSchemaKey) {
			bad[k.String()] = true
		}
	}
	out := map[string]toml.Key{}
	for _, k := range md.Keys() {
		if bad[k.String()] && !hasBadParent(bad, k) {
			out[k.String()] = k
		}
	}
	return out
}

// hasBadParent reports whether a parent of k is in bad.
func hasBadParent(bad map[string]bool, k toml.Key) bool {
	for n := 1; n < len(k); n++ {
		if bad[k[:n].String()] {
			return true
		}
	}
	return false
}

// notSchemaKey reports whether s cannot be a key of the schema, whose
// keys are all lower-case snake_case.
func notSchemaKey(s string) bool {
	return s == "" || strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
	}) >= 0
}

// unknownMsg explains why k is not accepted.
func unknownMsg(md *toml.MetaData, k toml.Key) string {
	what := "key"
	if t := md.Type(k...); t == "Hash" || t == "ArrayHash" {
		what = "table"
	}
	last := k[len(k)-1]
	switch {
	case len(k) == 2 && k[0] == "defaults" && slices.Contains([]string{"name", "listen", "protocol", "backend"}, last):
		return last + " cannot be set in [defaults]"
	case strings.ToLower(last) != last:
		return "unknown " + what + " (keys are lower case)"
	}
	return "unknown " + what
}

// vipName returns the name of the VIP a path is in, if any.
func vipName(path keyPath, vips []rawTable) string {
	if len(path) > 0 && path[0].name == "vip" && path[0].idx >= 0 && path[0].idx < len(vips) {
		return get[string](vips[path[0].idx], "name").val
	}
	return ""
}

// schema holds the keys of each table of the file, by path (tableKeys),
// as far as they were asked for.
type schema map[string]map[string]bool

// keys returns the keys of the table at path.
func (s schema) keys(path string) map[string]bool {
	keys, ok := s[path]
	if !ok {
		keys = tableKeys(path)
		s[path] = keys
	}
	return keys
}

// has reports whether a key table has k (a path without array indexes),
// or k is under a key that holds a value (its problem is the value's
// type).
func (s schema) has(k toml.Key) bool {
	for n := 1; n < len(k); n++ {
		if isTable, ok := s.keys(strings.Join(k[:n-1], "."))[k[n-1]]; ok && !isTable {
			return true
		}
	}
	_, ok := s.keys(strings.Join(k[:len(k)-1], "."))[k[len(k)-1]]
	return ok
}

// decodeError turns an error of toml.Decode into an *Error: a syntax error
// (a toml.ParseError, which has a position), or a value whose shape does
// not fit the schema, such as vip = "x" (its message holds the line).
func decodeError(file string, data []byte, err error) error {
	if pr, ok := misplacedVIPTable(file, data); ok && strings.Contains(err.Error(), "vip") {
		return &Error{Problems: []Problem{pr}}
	}
	pr := Problem{File: file, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
	var pe toml.ParseError
	if errors.As(err, &pe) {
		pr.Line, pr.Msg = pe.Position.Line, pe.Message
	} else if m := regexp.MustCompile(`(?s)^toml: line (\d+) \(last key "(.*?)"\): (.*)$`).FindStringSubmatch(err.Error()); m != nil {
		pr.Line, _ = strconv.Atoi(m[1])
		pr.Key, pr.Msg = m[2], shapeMsg(m[3])
	}
	return &Error{Problems: []Problem{pr}}
}

// shapeMsg rewords the decoder's messages about tables, which name Go types.
func shapeMsg(msg string) string {
	switch {
	case strings.Contains(msg, "destination has type slice"):
		return "must be an array of tables, [[...]]"
	case strings.Contains(msg, "expected table"):
		return "must be a table"
	}
	return msg
}

// misplacedVIPTable finds a VIP's table ([vip.health], [[vip.backend]],
// [vip.route]...) that comes before the first [[vip]]: it makes "vip" a
// table, and the decoder then says only that the key "was already
// created and cannot be used as an array" (or names Go types). The
// problem says where the table should go instead.
func misplacedVIPTable(file string, data []byte) (Problem, bool) {
	for _, e := range indexLines(data).entries {
		if len(e.path) < 2 || e.path[0].name != "vip" || e.path[0].idx >= 0 {
			continue // not a table under vip, or inside a [[vip]] element
		}
		what := strings.TrimSpace(sourceLine(data, e.line))
		if i := strings.IndexByte(what, '#'); i > 0 {
			what = strings.TrimSpace(what[:i])
		}
		if !strings.HasPrefix(what, "[") {
			continue // a key, such as name under a [vip] header
		}
		msg := fmt.Sprintf("%s comes before any [[vip]], which makes vip a table instead of the list of VIPs: "+
			"a VIP's own tables ([vip.health], [[vip.backend]], [[vip.route]]) go below its [[vip]] header; move it there", what)
		if e.path[1].name == "health" {
			msg += ", or make it [defaults.health] for every VIP"
		}
		return Problem{File: file, Line: e.line, Msg: msg}, true
	}
	return Problem{}, false
}

// sourceLine returns line n (1-based) of data, or "".
func sourceLine(data []byte, n int) string {
	lines := strings.SplitN(string(data), "\n", n+1)
	if n < 1 || n > len(lines) {
		return ""
	}
	return lines[n-1]
}
