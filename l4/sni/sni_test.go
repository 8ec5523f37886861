package sni

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// capture is a net.Conn that keeps what a TLS client writes and ends its
// reads: the handshake stops after the ClientHello.
type capture struct{ bytes.Buffer }

func (c *capture) Read([]byte) (int, error)         { return 0, io.EOF }
func (c *capture) Close() error                     { return nil }
func (c *capture) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *capture) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *capture) SetDeadline(time.Time) error      { return nil }
func (c *capture) SetReadDeadline(time.Time) error  { return nil }
func (c *capture) SetWriteDeadline(time.Time) error { return nil }

// clientHello returns the bytes crypto/tls sends first for cfg.
func clientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	var c capture
	_ = tls.Client(&c, cfg).Handshake()
	if c.Len() == 0 {
		t.Fatal("the TLS client wrote nothing")
	}
	return c.Bytes()
}

// refragment cuts the handshake message of a one-record hello into
// records of at most size bytes.
func refragment(t testing.TB, hello []byte, size int) []byte {
	t.Helper()
	n := int(hello[3])<<8 | int(hello[4])
	msg := hello[5 : 5+n]
	var out []byte
	for len(msg) > 0 {
		k := min(size, len(msg))
		out = append(out, 0x16, 3, 1, byte(k>>8), byte(k))
		out = append(out, msg[:k]...)
		msg = msg[k:]
	}
	return out
}

func TestParse(t *testing.T) {
	plain := clientHello(t, &tls.Config{ServerName: "api.example.com"})
	tls12 := clientHello(t, &tls.Config{ServerName: "db.example.org", MaxVersion: tls.VersionTLS12})
	alpn := clientHello(t, &tls.Config{ServerName: "WS.Example.COM", NextProtos: []string{"h2", "http/1.1"}})
	noName := clientHello(t, &tls.Config{InsecureSkipVerify: true})
	ipName := clientHello(t, &tls.Config{ServerName: "198.18.0.1"}) // an IP is never sent as SNI
	cases := []struct {
		name string
		in   []byte
		want string
		err  error
	}{
		{"tls13", plain, "api.example.com", nil},
		{"tls12", tls12, "db.example.org", nil},
		{"case kept", alpn, "WS.Example.COM", nil},
		{"no sni", noName, "", ErrNoName},
		{"ip server name", ipName, "", ErrNoName},
		{"records of 64", refragment(t, plain, 64), "api.example.com", nil},
		{"records of 100", refragment(t, plain, 100), "api.example.com", nil},
		{"header split over records", refragment(t, plain, 2), "", ErrMalformed},
		{"trailing bytes", append(append([]byte{}, plain...), 0x17, 3, 3, 0, 1, 0), "api.example.com", nil},
		{"http", []byte("GET / HTTP/1.1\r\n"), "", ErrNotTLS},
		{"ssh", []byte("SSH-2.0-OpenSSH_9.6\r\n"), "", ErrNotTLS},
		{"first byte not tls", []byte{'G'}, "", ErrNotTLS},
		{"sslv3 major 2", []byte{0x16, 2, 0, 0, 4}, "", ErrNotTLS},
		{"not a client hello", []byte{0x16, 3, 1, 0, 4, 2, 0, 0, 0}, "", ErrNotTLS},
		{"empty record", []byte{0x16, 3, 1, 0, 0}, "", ErrMalformed},
		{"record too long", []byte{0x16, 3, 1, 0x40, 0x01}, "", ErrMalformed},
		{"hello too large", []byte{0x16, 3, 1, 0, 4, 1, 0, 0x40, 0x01}, "", ErrTooLarge},
		{"too large, record incomplete", []byte{0x16, 3, 1, 0x40, 0, 1, 1, 0, 0}, "", ErrTooLarge},
		{"not a hello, record incomplete", []byte{0x16, 3, 1, 0x40, 0, 2, 0, 0, 4}, "", ErrNotTLS},
		{"hello truncated inside", []byte{0x16, 3, 1, 0, 6, 1, 0, 0, 2, 3, 3}, "", ErrMalformed},
	}
	scratch := make([]byte, MaxHello+4)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name, more, err := Parse(c.in, scratch)
			if more || !errors.Is(err, c.err) || string(name) != c.want {
				t.Fatalf("Parse = %q, more %v, %v; want %q, %v", name, more, err, c.want, c.err)
			}
		})
	}
}

// TestParseNeedsMore: every proper prefix of a hello asks for more, as
// the bytes of a ClientHello split over TCP segments arrive.
func TestParseNeedsMore(t *testing.T) {
	scratch := make([]byte, MaxHello+4)
	for _, in := range [][]byte{
		clientHello(t, &tls.Config{ServerName: "api.example.com"}),
		refragment(t, clientHello(t, &tls.Config{ServerName: "api.example.com"}), 80),
	} {
		for i := range len(in) {
			name, more, err := Parse(in[:i], scratch)
			if !more || err != nil || name != nil {
				t.Fatalf("prefix of %d/%d bytes: %q, more %v, %v; want more", i, len(in), name, more, err)
			}
		}
	}
}

// TestParseSmallScratch: a hello split over records needs the scratch
// buffer; without room it is refused, never overrun.
func TestParseSmallScratch(t *testing.T) {
	in := refragment(t, clientHello(t, &tls.Config{ServerName: "api.example.com"}), 100)
	if _, _, err := Parse(in, make([]byte, 150)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v, want ErrTooLarge", err)
	}
}

func TestParseAllocatesNothing(t *testing.T) {
	one := clientHello(t, &tls.Config{ServerName: "api.example.com"})
	split := refragment(t, one, 100)
	scratch := make([]byte, MaxHello+4)
	n := testing.AllocsPerRun(200, func() {
		_, _, _ = Parse(one, scratch)
		_, _, _ = Parse(split, scratch)
	})
	if n != 0 {
		t.Fatalf("%v allocations per parse, want 0", n)
	}
}

func BenchmarkParse(b *testing.B) {
	in := clientHello(b, &tls.Config{ServerName: "api.example.com"})
	scratch := make([]byte, MaxHello+4)
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, _, err := Parse(in, scratch); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParse: no input panics, reads past its end, or answers both a name
// and an error; a name is a non-empty host name; and a prefix of an
// input that gave a name never gives a different one.
func FuzzParse(f *testing.F) {
	hello := clientHello(f, &tls.Config{ServerName: "api.example.com"})
	f.Add(hello)
	f.Add(refragment(f, hello, 64))
	f.Add(clientHello(f, &tls.Config{InsecureSkipVerify: true}))
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	scratch := make([]byte, MaxHello+4)
	f.Fuzz(func(t *testing.T, in []byte) {
		name, more, err := Parse(in, scratch)
		switch {
		case more && (err != nil || name != nil):
			t.Fatalf("more with %q, %v", name, err)
		case err != nil && name != nil:
			t.Fatalf("name %q with error %v", name, err)
		case !more && err == nil && !validName(name):
			t.Fatalf("invalid name %q", name)
		}
		if name != nil { // some prefixes (all of them would be quadratic)
			got := string(name)
			for i := 0; i < len(in); i += 1 + len(in)/32 {
				n2, more2, err2 := Parse(in[:i], scratch)
				if !more2 && err2 == nil && string(n2) != got {
					t.Fatalf("prefix %d gave %q, whole gave %q", i, n2, got)
				}
			}
		}
	})
}

// TestParsePostgresDirectTLS: the ClientHello of a PostgreSQL client with
// sslnegotiation=direct (ALPN "postgresql", as libpq 17 and pgx send it)
// yields its server name like any other.
func TestParsePostgresDirectTLS(t *testing.T) {
	hello := clientHello(t, &tls.Config{ServerName: "db.example.test", NextProtos: []string{"postgresql"}})
	name, more, err := Parse(hello, make([]byte, MaxHello+4))
	if more || err != nil || string(name) != "db.example.test" {
		t.Fatalf("Parse: %q more %v err %v", name, more, err)
	}
}
