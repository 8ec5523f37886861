// Line index: the line where each table and key of a TOML file is defined.

package config

import (
	"slices"
	"strconv"
	"strings"
)

// BurntSushi/toml does not export key positions, so a small scanner walks
// the (already parsed, hence valid) file once: it follows [table] and
// [[array]] headers, counting array elements, and records every key,
// including keys of inline tables and elements of inline arrays of tables.
// It skips strings (multi-line ones too), comments and array values. On
// input it does not understand it resynchronises at the next line; it never
// fails, so a key it missed simply has no line.

// pathSeg is one step of a key path: a key and, for an element of an array
// of tables, its index (-1 otherwise).
type pathSeg struct {
	name string
	idx  int
}

// keyPath is a key path such as vip[1].health.interval.
type keyPath []pathSeg

// String formats the path; keys that are not bare TOML keys are quoted.
func (k keyPath) String() string {
	var b strings.Builder
	for i, s := range k {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(quoteKey(s.name))
		if s.idx >= 0 {
			b.WriteString("[" + strconv.Itoa(s.idx) + "]")
		}
	}
	return b.String()
}

// names returns the keys of the path without array indexes.
func (k keyPath) names() []string {
	out := make([]string, len(k))
	for i, s := range k {
		out[i] = s.name
	}
	return out
}

// quoteKey quotes a key unless it is a non-empty bare key.
func quoteKey(s string) string {
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return !isBareKeyChar(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func isBareKeyChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// indexEntry is one table or key definition.
type indexEntry struct {
	path keyPath
	line int
}

// lineIndex maps key paths to the line that defines them.
type lineIndex struct {
	entries []indexEntry   // in file order
	byPath  map[string]int // keyPath.String() -> line of its first definition
}

// line returns the line of path, else of its nearest ancestor that has
// one (vip[1].backend -> vip[1]), else 0.
func (x *lineIndex) line(path string) int {
	for x != nil && path != "" {
		if l, ok := x.byPath[path]; ok {
			return l
		}
		path = parentPath(path)
	}
	return 0
}

// has reports whether the file defines path itself.
func (x *lineIndex) has(path string) bool {
	if x == nil {
		return false
	}
	_, ok := x.byPath[path]
	return ok
}

// parentPath drops the last step of a path: "a.b[2]" -> "a.b" -> "a".
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	i := strings.LastIndexByte(path, '.')
	if i < 0 {
		return ""
	}
	return path[:i]
}

// indexLines scans src and returns its line index.
func indexLines(src []byte) *lineIndex {
	text := string(src)
	for _, bom := range []string{"\xef\xbb\xbf", "\xff\xfe", "\xfe\xff"} { // as BurntSushi/toml does
		text = strings.TrimPrefix(text, bom)
	}
	s := &scanner{
		src:    text,
		line:   1,
		arrays: map[string]int{},
		out:    &lineIndex{byPath: map[string]int{}},
	}
	for s.more() {
		s.skipBlank()
		switch {
		case !s.more():
		case s.peek() == '[':
			s.header()
		default:
			s.keyValue(s.table)
		}
		s.skipLine()
	}
	return s.out
}

// scanner is the state of one indexLines run.
type scanner struct {
	src    string
	pos    int
	line   int
	table  keyPath        // the table the last header opened
	arrays map[string]int // array of tables (path without last index) -> elements seen
	out    *lineIndex
}

func (s *scanner) more() bool { return s.pos < len(s.src) }

// peek returns the next byte, or 0 at the end.
func (s *scanner) peek() byte {
	if s.more() {
		return s.src[s.pos]
	}
	return 0
}

// next consumes one byte, counting lines.
func (s *scanner) next() {
	if !s.more() {
		return
	}
	if s.src[s.pos] == '\n' {
		s.line++
	}
	s.pos++
}

func (s *scanner) skip(n int) {
	for range n {
		s.next()
	}
}

// skipSpace skips spaces and tabs on the current line.
func (s *scanner) skipSpace() {
	for c := s.peek(); c == ' ' || c == '\t' || c == '\r'; c = s.peek() {
		s.next()
	}
}

// skipBlank skips whitespace, newlines and comments.
func (s *scanner) skipBlank() {
	for {
		s.skipSpace()
		switch s.peek() {
		case '\n':
			s.next()
		case '#':
			s.skipLine()
		default:
			return
		}
	}
}

// skipLine skips to the end of the line, leaving the newline.
func (s *scanner) skipLine() {
	for s.more() && s.peek() != '\n' {
		s.next()
	}
}

// record adds an entry for path at line.
func (s *scanner) record(path keyPath, line int) {
	path = slices.Clone(path)
	s.out.entries = append(s.out.entries, indexEntry{path: path, line: line})
	k := path.String()
	if _, ok := s.out.byPath[k]; !ok {
		s.out.byPath[k] = line
	}
}

// header handles a [table] or [[array]] header.
func (s *scanner) header() {
	line := s.line
	s.next()
	array := s.peek() == '['
	if array {
		s.next()
	}
	path := s.resolve(s.key())
	if len(path) == 0 {
		return
	}
	if array {
		last := &path[len(path)-1]
		last.idx = -1
		k := path.String()
		last.idx = s.arrays[k]
		s.arrays[k]++
	}
	s.table = path
	s.record(path, line)
}

// resolve turns header keys into a path whose arrays of tables point at
// their current (last) element.
func (s *scanner) resolve(names []string) keyPath {
	path := make(keyPath, 0, len(names))
	for _, n := range names {
		path = append(path, pathSeg{name: n, idx: -1})
		if c, ok := s.arrays[path.String()]; ok {
			path[len(path)-1].idx = c - 1
		}
	}
	return path
}

// keyValue handles `key = value` inside the table at prefix. Each step of a
// dotted key is recorded, so a.b.c = 1 gives lines to a, a.b and a.b.c.
func (s *scanner) keyValue(prefix keyPath) {
	line := s.line
	names := s.key()
	if len(names) == 0 || s.peek() != '=' {
		return
	}
	s.next()
	path := slices.Clone(prefix)
	for _, n := range names {
		path = append(path, pathSeg{name: n, idx: -1})
		s.record(path, line)
	}
	s.value(path)
}

// key reads a possibly dotted key; it stops before '=' or ']'.
func (s *scanner) key() []string {
	var names []string
	for {
		s.skipSpace()
		name, ok := s.keyPart()
		if !ok {
			return names
		}
		names = append(names, name)
		s.skipSpace()
		if s.peek() != '.' {
			return names
		}
		s.next()
	}
}

// keyPart reads one bare or quoted key.
func (s *scanner) keyPart() (string, bool) {
	switch s.peek() {
	case '"':
		raw := s.str()
		if v, err := strconv.Unquote(raw); err == nil {
			return v, true
		}
		return strings.Trim(raw, `"`), true
	case '\'':
		return strings.Trim(s.str(), "'"), true
	}
	start := s.pos
	for s.more() && isBareKeyChar(rune(s.peek())) {
		s.next()
	}
	return s.src[start:s.pos], s.pos > start
}

// value skips one value, indexing the keys of inline tables in it.
func (s *scanner) value(path keyPath) {
	s.skipSpace()
	switch s.peek() {
	case '"', '\'':
		s.str()
	case '{':
		s.inlineTable(path)
	case '[':
		s.array(path)
	default:
		for s.more() && !strings.ContainsRune(",]}#\n", rune(s.peek())) {
			s.next()
		}
	}
}

// str reads a basic or literal string, single- or multi-line, and returns
// its raw text including the quotes.
func (s *scanner) str() string {
	start, q := s.pos, s.peek()
	delim := string(q)
	if strings.HasPrefix(s.src[s.pos:], strings.Repeat(delim, 3)) {
		delim = strings.Repeat(delim, 3)
	}
	s.skip(len(delim))
	for s.more() {
		c := s.peek()
		switch {
		case c == '\\' && q == '"':
			s.skip(2)
		case strings.HasPrefix(s.src[s.pos:], delim):
			s.skip(len(delim))
			for i := 0; len(delim) == 3 && i < 2 && s.peek() == q; i++ {
				s.next() // """a"""" ends with a quote inside the string
			}
			return s.src[start:s.pos]
		case c == '\n' && len(delim) == 1:
			return s.src[start:s.pos] // unterminated; resynchronise
		default:
			s.next()
		}
	}
	return s.src[start:s.pos]
}

// inlineTable reads { k = v, ... } whose keys live under path.
func (s *scanner) inlineTable(path keyPath) {
	s.next()
	for s.more() {
		s.skipBlank()
		switch s.peek() {
		case '}':
			s.next()
			return
		case ',':
			s.next()
			continue
		}
		start := s.pos
		s.keyValue(path)
		if s.pos == start {
			s.next()
		}
	}
}

// array reads [ v, ... ]; an inline table in it is element i of path.
func (s *scanner) array(path keyPath) {
	s.next()
	for i := 0; s.more(); {
		s.skipBlank()
		switch s.peek() {
		case ']':
			s.next()
			return
		case ',':
			s.next()
			i++
			continue
		}
		start := s.pos
		elem := slices.Clone(path)
		if len(elem) > 0 {
			elem[len(elem)-1].idx = i
			if s.peek() == '{' {
				s.record(elem, s.line)
			}
		}
		s.value(elem)
		if s.pos == start {
			s.next()
		}
	}
}
