// Bounds on the input, checked before the TOML decoder sees it.

package config

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// A config file is small. The TOML decoder's time and memory grow much
// faster than the input with deep nesting and long dotted keys (32 KB of
// nested inline tables took 22 s and 3.8 GB; BurntSushi/toml issue #496), so
// the input is bounded first and refused with a clear problem.
const (
	MaxFileSize = 1 << 20 // bytes
	maxDepth    = 16      // nested inline tables and arrays
	maxKeyParts = 8       // parts of one dotted key or table header
	maxKeyLen   = 256     // bytes of one key part
)

// readFile reads a config file: a regular file (not a device, pipe or
// directory, which could be endless or block) of at most MaxFileSize bytes.
// check, if not nil, vets the opened file (its fstat) before it is read.
func readFile(path string, check func(fi os.FileInfo) error) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer (the check
	// below then refuses it); it changes nothing for a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, fileKind(fi.Mode()))
	}
	if fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("%s is %d bytes; a config file may have at most %d", path, fi.Size(), MaxFileSize)
	}
	if check != nil {
		if err := check(fi); err != nil {
			return nil, err
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s grew past %d bytes while being read", path, MaxFileSize)
	}
	return data, nil
}

// fileKind names what a non-regular file is.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

// checkShape refuses input the decoder would spend too long on: more than
// MaxFileSize bytes, nesting deeper than maxDepth, a key of more than
// maxKeyParts parts or a part longer than maxKeyLen. It is a small lexer
// that knows only strings, comments, brackets and keys; whatever it does not
// understand it leaves to the decoder, which reports it.
func checkShape(path string, data []byte) *Problem {
	if len(data) > MaxFileSize {
		return &Problem{File: path, Msg: fmt.Sprintf("%d bytes; a config file may have at most %d", len(data), MaxFileSize)}
	}
	s := shapeScan{src: string(data), line: 1, keyPos: true}
	if msg := s.run(); msg != "" {
		return &Problem{File: path, Line: s.line, Msg: msg}
	}
	return nil
}

// shapeScan is the state of one checkShape run.
type shapeScan struct {
	src    string
	pos    int
	line   int
	stack  []byte // open '{' and '['
	keyPos bool   // a key may start here
}

func (s *shapeScan) more() bool { return s.pos < len(s.src) }
func (s *shapeScan) peek() byte { return s.src[s.pos] }

func (s *shapeScan) next() {
	if s.src[s.pos] == '\n' {
		s.line++
	}
	s.pos++
}

// run scans the whole input and returns the first problem, or "".
func (s *shapeScan) run() string {
	for s.more() {
		c := s.peek()
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			s.next()
		case c == '#':
			s.skipComment()
		case c == '\n':
			s.next()
			s.keyPos = len(s.stack) == 0
		case c == '"' || c == '\'':
			if msg := s.stringOrKey(); msg != "" {
				return msg
			}
		case s.keyPos && c == '[' && len(s.stack) == 0:
			if msg := s.header(); msg != "" {
				return msg
			}
		case s.keyPos && isBareKeyChar(rune(c)):
			if msg := s.key(); msg != "" {
				return msg
			}
		default:
			if msg := s.punct(c); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// punct handles brackets and commas of values; anything else is skipped.
func (s *shapeScan) punct(c byte) string {
	s.next()
	s.keyPos = false
	switch c {
	case '{', '[':
		if len(s.stack) >= maxDepth {
			return fmt.Sprintf("values nested more than %d deep", maxDepth)
		}
		s.stack = append(s.stack, c)
		s.keyPos = c == '{'
	case '}', ']':
		if len(s.stack) > 0 {
			s.stack = s.stack[:len(s.stack)-1]
		}
	case ',':
		s.keyPos = len(s.stack) > 0 && s.stack[len(s.stack)-1] == '{'
	}
	return ""
}

func (s *shapeScan) skipComment() {
	for s.more() && s.peek() != '\n' {
		s.next()
	}
}

// stringOrKey reads a string; where a key may start, a quoted key.
func (s *shapeScan) stringOrKey() string {
	if s.keyPos {
		return s.key()
	}
	s.str()
	return ""
}

// header reads a [table] or [[array]] header's key.
func (s *shapeScan) header() string {
	s.next()
	if s.more() && s.peek() == '[' {
		s.next()
	}
	return s.key()
}

// key reads a dotted key and checks its parts.
func (s *shapeScan) key() string {
	s.keyPos = false
	for parts := 1; ; parts++ {
		if parts > maxKeyParts {
			return fmt.Sprintf("a key of more than %d dotted parts", maxKeyParts)
		}
		s.skipBlanks()
		if n := s.keyPart(); n > maxKeyLen {
			return fmt.Sprintf("a key part of %d bytes (at most %d)", n, maxKeyLen)
		}
		s.skipBlanks()
		if !s.more() || s.peek() != '.' {
			return ""
		}
		s.next()
	}
}

func (s *shapeScan) skipBlanks() {
	for s.more() && (s.peek() == ' ' || s.peek() == '\t') {
		s.next()
	}
}

// keyPart reads one bare or quoted key part and returns its length.
func (s *shapeScan) keyPart() int {
	start := s.pos
	if s.more() && (s.peek() == '"' || s.peek() == '\'') {
		s.str()
		return s.pos - start
	}
	for s.more() && isBareKeyChar(rune(s.peek())) {
		s.next()
	}
	return s.pos - start
}

// str skips a basic or literal string, single- or multi-line.
func (s *shapeScan) str() {
	q := s.peek()
	delim := string(q)
	if strings.HasPrefix(s.src[s.pos:], strings.Repeat(delim, 3)) {
		delim = strings.Repeat(delim, 3)
	}
	for range delim {
		s.next()
	}
	for s.more() {
		switch {
		case s.peek() == '\\' && q == '"':
			s.next()
			if s.more() {
				s.next()
			}
		case strings.HasPrefix(s.src[s.pos:], delim):
			for range delim {
				s.next()
			}
			return
		case s.peek() == '\n' && len(delim) == 1:
			return // unterminated: the decoder reports it
		default:
			s.next()
		}
	}
}
