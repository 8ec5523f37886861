package pgstartup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// startup builds a protocol 3.minor StartupMessage of the pairs given.
func startup(minor uint16, kv ...string) []byte {
	var body []byte
	for _, s := range kv {
		body = append(append(body, s...), 0)
	}
	body = append(body, 0)
	out := binary.BigEndian.AppendUint32(nil, uint32(header+len(body)))
	out = binary.BigEndian.AppendUint32(out, 3<<16|uint32(minor))
	return append(out, body...)
}

// request builds an 8- or 16-byte request packet.
func request(code uint32, extra int) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(header+extra))
	out = binary.BigEndian.AppendUint32(out, code)
	return append(out, make([]byte, extra)...)
}

func TestParse(t *testing.T) {
	huge := binary.BigEndian.AppendUint32(nil, MaxStartup+1)
	for _, c := range []struct {
		name     string
		in       []byte
		kind     Kind
		db, user string
		err      error
	}{
		{"database and user", startup(0, "user", "alice", "database", "app", "application_name", "psql"), Startup, "app", "alice", nil},
		{"no database: the user's", startup(0, "user", "bob"), Startup, "bob", "bob", nil},
		{"empty database: the user's", startup(0, "database", "", "user", "bob"), Startup, "bob", "bob", nil},
		{"last value counts", startup(0, "user", "a", "database", "x", "database", "y"), Startup, "y", "a", nil},
		{"protocol 3.2", startup(2, "user", "u", "database", "d", "_pq_.x", "1"), Startup, "d", "u", nil},
		{"no parameters", startup(0), Startup, "", "", nil},
		{"ssl request", request(codeSSL, 0), SSL, "", "", nil},
		{"gssenc request", request(codeGSSENC, 0), GSSENC, "", "", nil},
		{"cancel request", request(codeCancel, 8), Cancel, "", "", nil},
		{"cancel request too short", request(codeCancel, 0), 0, "", "", ErrMalformed},
		{"ssl request too long", request(codeSSL, 4), 0, "", "", ErrMalformed},
		{"protocol 2", request(2<<16, 4), 0, "", "", ErrMalformed},
		{"TLS record", []byte{0x16, 3, 1, 0, 200, 1, 0, 0, 196}, 0, "", "", ErrTooLarge},
		{"HTTP", []byte("GET / HTTP/1.1\r\n"), 0, "", "", ErrTooLarge},
		{"length below the header", []byte{0, 0, 0, 4}, 0, "", "", ErrMalformed},
		{"over the cap", huge, 0, "", "", ErrTooLarge},
		{"value without its NUL", append(startup(0, "user")[:13:13], 'x'), 0, "", "", ErrMalformed},
		{"bytes after the terminator", fixLen(append(startup(0, "user", "u"), 'x')), 0, "", "", ErrMalformed},
		{"no terminator", fixLen(startup(0, "user", "u")[:15]), 0, "", "", ErrMalformed},
	} {
		m, more, err := Parse(c.in)
		if more || !errors.Is(err, c.err) || m.Kind != c.kind || string(m.Database) != c.db || string(m.User) != c.user {
			t.Errorf("%s: got %+v more %v err %v; want kind %d db %q user %q err %v", c.name, m, more, err, c.kind, c.db, c.user, c.err)
		}
	}
}

// fixLen rewrites a packet's length word to its length.
func fixLen(b []byte) []byte {
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	return b
}

// TestParseWaitsForTheWholePacket: every strict prefix of a packet asks
// for more; an oversized length is refused from its first four bytes.
func TestParseWaitsForTheWholePacket(t *testing.T) {
	for _, p := range [][]byte{startup(0, "user", "alice", "database", "app"), request(codeSSL, 0), request(codeCancel, 8)} {
		for i := range len(p) {
			if m, more, err := Parse(p[:i]); !more || err != nil || m.Kind != 0 {
				t.Fatalf("%d of %d bytes: %+v more %v err %v", i, len(p), m, more, err)
			}
		}
	}
	if _, more, err := Parse([]byte{0, 0, 0x27, 0x11}); more || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("length 10001: more %v err %v", more, err)
	}
}

func TestParseAllocatesNothing(t *testing.T) {
	p := startup(0, "user", "alice", "database", "app")
	if n := testing.AllocsPerRun(100, func() { _, _, _ = Parse(p) }); n != 0 {
		t.Fatalf("%v allocations per parse", n)
	}
}

// FuzzParse: any input parses without panic, within the packet, and a
// prefix never contradicts the whole: it asks for more or gives the same
// answer.
func FuzzParse(f *testing.F) {
	f.Add(startup(0, "user", "alice", "database", "app"))
	f.Add(request(codeSSL, 0))
	f.Add(request(codeCancel, 8))
	f.Add([]byte{0x16, 3, 1, 0, 5})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, more, err := Parse(data)
		if more && err != nil {
			t.Fatalf("more with an error: %v", err)
		}
		if err == nil && !more {
			n := int(binary.BigEndian.Uint32(data))
			for _, v := range [][]byte{m.Database, m.User} {
				if len(v) > 0 && !within(v, data[:n]) {
					t.Fatalf("value %q outside the packet", v)
				}
			}
			if m.Kind == 0 {
				t.Fatal("no kind and no error")
			}
		}
		for i := range len(data) {
			pm, pmore, perr := Parse(data[:i])
			if pmore {
				continue
			}
			if perr != err || pm.Kind != m.Kind || !bytes.Equal(pm.Database, m.Database) || !bytes.Equal(pm.User, m.User) {
				t.Fatalf("prefix of %d: %+v %v; whole: %+v %v", i, pm, perr, m, err)
			}
		}
	})
}

// within reports whether v is a sub-slice of b.
func within(v, b []byte) bool {
	for i := range b {
		if &b[i] == &v[0] {
			return i+len(v) <= len(b)
		}
	}
	return false
}
