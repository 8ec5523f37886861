package bfd

import (
	"bytes"
	"errors"
	"testing"
)

func TestPacketRoundTrip(t *testing.T) {
	p := Packet{Diag: DiagTimeExpired, State: StateUp, Poll: true, CPI: true, DetectMult: 3, Length: PacketLen,
		MyDiscr: 0x01020304, YourDiscr: 0xa0b0c0d0, DesiredMinTx: 100000, RequiredMinRx: 200000, RequiredMinEchoRx: 7}
	var b [PacketLen]byte
	p.Encode(&b)
	// RFC 5880 section 4.1, byte by byte: version 1 and diag 1; state 3,
	// P and C; mult 3; length 24; then the five words.
	want := []byte{0x21, 0xe8, 3, 24, 1, 2, 3, 4, 0xa0, 0xb0, 0xc0, 0xd0, 0, 1, 0x86, 0xa0, 0, 3, 0x0d, 0x40, 0, 0, 0, 7}
	if !bytes.Equal(b[:], want) {
		t.Fatalf("encoded % x\nwant    % x", b, want)
	}
	got, err := Decode(b[:])
	if err != nil || got != p {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, p)
	}
	final := Packet{State: StateDown, Final: true, Demand: true, DetectMult: 1, Length: PacketLen, MyDiscr: 1}
	final.Encode(&b)
	if b[1] != 0x40|0x10|0x02 {
		t.Fatalf("flags byte %#x, want state 1 with F and D", b[1])
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := func() []byte {
		var b [PacketLen]byte
		(&Packet{State: StateUp, DetectMult: 3, MyDiscr: 1, YourDiscr: 2}).Encode(&b)
		return b[:]
	}
	for _, c := range []struct {
		name string
		mod  func(b []byte) []byte
		want error
	}{
		{"short", func(b []byte) []byte { return b[:23] }, ErrShort},
		{"version 0", func(b []byte) []byte { b[0] &^= 0xe0; return b }, ErrVersion},
		{"version 2", func(b []byte) []byte { b[0] = 2<<5 | b[0]&0x1f; return b }, ErrVersion},
		{"length 23", func(b []byte) []byte { b[3] = 23; return b }, ErrLength},
		{"length past datagram", func(b []byte) []byte { b[3] = 25; return b }, ErrLength},
		{"auth needs 26", func(b []byte) []byte { b[1] |= 0x04; b[3] = 24; return append(b, 0, 0) }, ErrLength},
		{"detect mult 0", func(b []byte) []byte { b[2] = 0; return b }, ErrDetectMult},
		{"multipoint", func(b []byte) []byte { b[1] |= 0x01; return b }, ErrMultipoint},
		{"my discr 0", func(b []byte) []byte { copy(b[4:8], []byte{0, 0, 0, 0}); return b }, ErrMyDiscr},
		{"your discr 0 while up", func(b []byte) []byte { copy(b[8:12], []byte{0, 0, 0, 0}); return b }, ErrYourDiscr},
		{"your discr 0 while init", func(b []byte) []byte { copy(b[8:12], []byte{0, 0, 0, 0}); b[1] = 2 << 6; return b }, ErrYourDiscr},
		{"your discr 0 while down: fine", func(b []byte) []byte { copy(b[8:12], []byte{0, 0, 0, 0}); b[1] = 1 << 6; return b }, nil},
		{"your discr 0 while admindown: fine", func(b []byte) []byte { copy(b[8:12], []byte{0, 0, 0, 0}); b[1] = 0; return b }, nil},
		{"trailing bytes ignored", func(b []byte) []byte { return append(b, 9, 9, 9) }, nil},
	} {
		if _, err := Decode(c.mod(good())); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// FuzzDecode: any bytes either decode into a packet that passes every
// check of section 6.8.6 and encodes back to the same first 24 bytes
// (with the A bit and length normalised), or are refused; never a panic.
func FuzzDecode(f *testing.F) {
	var b [PacketLen]byte
	for _, p := range []Packet{
		{State: StateDown, DetectMult: 3, MyDiscr: 7, DesiredMinTx: 1000000, RequiredMinRx: 100000},
		{State: StateUp, Poll: true, DetectMult: 3, MyDiscr: 7, YourDiscr: 9, DesiredMinTx: 100000, RequiredMinRx: 100000},
		{State: StateInit, Final: true, DetectMult: 1, MyDiscr: 1, YourDiscr: 1},
	} {
		p.Encode(&b)
		f.Add(append([]byte(nil), b[:]...))
	}
	f.Add([]byte{})
	f.Add([]byte{0x20, 0x44, 3, 26, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Decode(data)
		if err != nil {
			return
		}
		if p.DetectMult == 0 || p.MyDiscr == 0 || p.Multipoint || int(p.Length) > len(data) || p.Length < PacketLen {
			t.Fatalf("accepted %+v from % x", p, data)
		}
		if p.YourDiscr == 0 && p.State != StateDown && p.State != StateAdminDown {
			t.Fatalf("accepted your discr 0 in state %v", p.State)
		}
		var out [PacketLen]byte
		p.Encode(&out)
		in := append([]byte(nil), data[:PacketLen]...)
		in[1] &^= 0x04 // Encode never sets A
		in[3] = PacketLen
		if !bytes.Equal(in, out[:]) {
			t.Fatalf("re-encoded % x, was % x", out, in)
		}
	})
}
