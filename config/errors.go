// Problems found in a config file, collected so that all are reported at once.

package config

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a config file.
type Problem struct {
	File string
	Line int    // 1-based; 0 when the line is not known
	VIP  string // name of the VIP concerned, if any
	Key  string // full key path such as vip[1].health.interval, if any
	Msg  string
}

// String formats the problem as `file:line: vip "name": key: message`,
// leaving out the parts that are empty or unknown (a problem about the
// file as a whole, or a key it does not set, has no line).
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.VIP != "" {
		fmt.Fprintf(&b, "vip %q: ", p.VIP)
	}
	if p.Key != "" {
		b.WriteString(p.Key + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// lineString prints a line number, or "?" when it is not known.
func lineString(line int) string {
	if line <= 0 {
		return "?"
	}
	return strconv.Itoa(line)
}

// Error is every problem found in one file. Parse and Load return it (as
// *Error) whenever the file is not a valid config.
type Error struct {
	Problems []Problem // sorted by line; problems without a line come last
}

// Error returns one problem per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// problems collects Problems while a file is checked.
type problems struct {
	file     string
	lines    *lineIndex
	list     []Problem
	seen     map[Problem]bool
	warnings []Problem
}

func newProblems(file string, lines *lineIndex) *problems {
	return &problems{file: file, lines: lines, seen: map[Problem]bool{}}
}

// add records a problem about key (a full key path, or "") at the key's
// line. The same problem is kept once: a bad value in [defaults] is
// reported for the first VIP it reaches, not for every one.
func (p *problems) add(vip, key, format string, args ...any) {
	p.addAt(p.lines.line(key), vip, key, fmt.Sprintf(format, args...))
}

// addAt records a problem at a given line.
func (p *problems) addAt(line int, vip, key, msg string) {
	pr := Problem{File: p.file, Line: line, VIP: vip, Key: key, Msg: msg}
	dedup := pr
	dedup.VIP = ""
	if p.seen[dedup] {
		return
	}
	p.seen[dedup] = true
	p.list = append(p.list, pr)
}

// warn records a warning about key: legal, but probably not what was meant.
func (p *problems) warn(vip, key, format string, args ...any) {
	p.warnAt(p.lines.line(key), vip, key, format, args...)
}

// warnAt records a warning at a given line.
func (p *problems) warnAt(line int, vip, key, format string, args ...any) {
	p.warnings = append(p.warnings, Problem{File: p.file, Line: line, VIP: vip, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// sortProblems orders problems by line, unknown lines last.
func sortProblems(list []Problem) {
	slices.SortStableFunc(list, func(a, b Problem) int {
		return cmp.Compare(sortLine(a.Line), sortLine(b.Line))
	})
}

// err returns the problems as an *Error, or nil when there are none.
func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	list := slices.Clone(p.list)
	sortProblems(list)
	return &Error{Problems: list}
}

// sortLine orders unknown lines after known ones.
func sortLine(l int) int {
	if l <= 0 {
		return int(^uint(0) >> 1)
	}
	return l
}
