package flowsync

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

var testKey = []byte("0123456789abcdef-test")

func testFlows() []plane.SyncedFlow {
	return []plane.SyncedFlow{
		{Flow: l4.Flow{Src: netip.MustParseAddrPort("198.18.0.2:40000"), Dst: netip.MustParseAddrPort("198.18.2.10:80"), Proto: l4.TCP},
			Backend: netip.MustParseAddrPort("198.18.1.11:80"), Age: 1500 * time.Millisecond},
		{Flow: l4.Flow{Src: netip.MustParseAddrPort("[2001:db8::2]:53000"), Dst: netip.MustParseAddrPort("[2001:db8:2::10]:53"), Proto: l4.UDP},
			Backend: netip.MustParseAddrPort("198.18.1.12:53"), Closing: true},
		{Flow: l4.Flow{Src: netip.MustParseAddrPort("198.18.0.3:0"), Dst: netip.MustParseAddrPort("198.18.2.10:443"), Proto: l4.TCP},
			Backend: netip.MustParseAddrPort("198.18.1.13:443"), Age: 42 * time.Second, Pin: true},
	}
}

func TestWireRoundTrip(t *testing.T) {
	c := newCodec(testKey)
	buf := make([]byte, MaxLen)
	h := Header{Sender: 7, Seq: 9, Time: 123456789}
	n := c.encode(buf, h, testFlows())
	if n != HeaderLen+3*EntryLen+MACLen {
		t.Fatalf("length %d", n)
	}
	gh, entries, err := newCodec(testKey).decode(buf[:n])
	if err != nil || gh != h || len(entries) != 3*EntryLen {
		t.Fatalf("decode: %+v %d %v", gh, len(entries), err)
	}
	for i, want := range testFlows() {
		if got, ok := entry(entries, i); !ok || got != want {
			t.Errorf("flow %d: %+v, %v; want %+v", i, got, ok, want)
		}
	}
}

func TestWireRefuses(t *testing.T) {
	c := newCodec(testKey)
	good := func() []byte {
		buf := make([]byte, MaxLen)
		return buf[:c.encode(buf, Header{Sender: 1, Seq: 1, Time: 1}, testFlows())]
	}
	for _, tc := range []struct {
		name string
		mod  func(b []byte) []byte
		want error
	}{
		{"empty", func(b []byte) []byte { return nil }, ErrMalformed},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, ErrMalformed},
		{"version 2", func(b []byte) []byte { b[4] = 2; return b }, ErrVersion},
		{"count beyond the datagram", func(b []byte) []byte { b[7] = 4; return b }, ErrMalformed},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, ErrMalformed},
		{"a flipped flow byte", func(b []byte) []byte { b[HeaderLen+9] ^= 1; return b }, ErrAuth},
		{"a flipped seq", func(b []byte) []byte { b[23] ^= 1; return b }, ErrAuth},
		{"another key", func(b []byte) []byte {
			buf := make([]byte, MaxLen)
			return buf[:newCodec([]byte("another key, 16+ bytes")).encode(buf, Header{Sender: 1, Seq: 1, Time: 1}, testFlows())]
		}, ErrAuth},
	} {
		if _, _, err := c.decode(tc.mod(good())); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// A well-signed flow that makes no sense is refused on its own.
	bad := testFlows()
	bad[0].Flow.Proto = 1 // ICMP
	buf := make([]byte, MaxLen)
	_, entries, err := c.decode(buf[:c.encode(buf, Header{Sender: 1, Seq: 1, Time: 1}, bad)])
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := entry(entries, 0); ok {
		t.Error("an ICMP flow was accepted")
	}
	if _, ok := entry(entries, 1); !ok {
		t.Error("the good flow beside it was refused")
	}
}

// TestWirePins: an affinity pin is a TCP entry with client port 0 and
// the pin flag; either without the other, or a closing or UDP pin, is
// refused on its own.
func TestWirePins(t *testing.T) {
	c := newCodec(testKey)
	flows := testFlows()
	pin, flow := flows[2], flows[0]
	for _, tc := range []struct {
		name string
		f    plane.SyncedFlow
		ok   bool
	}{
		{"pin", pin, true},
		{"flow", flow, true},
		{"pin with a client port", func() plane.SyncedFlow { f := pin; f.Flow.Src = flow.Flow.Src; return f }(), false},
		{"flow with client port 0", func() plane.SyncedFlow { f := flow; f.Flow.Src = pin.Flow.Src; return f }(), false},
		{"closing pin", func() plane.SyncedFlow { f := pin; f.Closing = true; return f }(), false},
		{"udp pin", func() plane.SyncedFlow { f := pin; f.Flow.Proto = l4.UDP; return f }(), false},
	} {
		buf := make([]byte, MaxLen)
		_, entries, err := c.decode(buf[:c.encode(buf, Header{Sender: 1, Seq: 1, Time: 1}, []plane.SyncedFlow{tc.f})])
		if err != nil {
			t.Fatal(err)
		}
		got, ok := entry(entries, 0)
		if ok != tc.ok || (ok && got != tc.f) {
			t.Errorf("%s: %+v, %v; want ok %v", tc.name, got, ok, tc.ok)
		}
	}
}

func TestReplayWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newReplays(99)
	h := func(sender, seq uint64) Header { return Header{Sender: sender, Seq: seq, Time: now.UnixNano()} }
	for _, c := range []struct {
		h    Header
		want bool
	}{
		{h(1, 1), true},
		{h(1, 1), false}, // the same again
		{h(1, 3), true},
		{h(1, 2), true}, // late, in the window, unseen
		{h(1, 2), false},
		{h(1, 100), true},
		{h(1, 36), false}, // 64 below the top: too old to tell
		{h(1, 37), true},
		{h(2, 1), true}, // another sender has its own window
		{h(1, 0), false},
		{h(99, 5), false}, // this process's own datagrams
		{Header{Sender: 1, Seq: 200, Time: now.Add(-MaxSkew - time.Second).UnixNano()}, false},
		{Header{Sender: 1, Seq: 201, Time: now.Add(MaxSkew + time.Second).UnixNano()}, false},
		{Header{Sender: 1, Seq: 202, Time: now.Add(-MaxSkew + time.Second).UnixNano()}, true},
	} {
		if got := r.check(c.h, now); got != c.want {
			t.Errorf("%+v: fresh %v, want %v", c.h, got, c.want)
		}
	}
	for i := range maxSenders + 10 {
		r.check(h(uint64(1000+i), 1), now.Add(time.Duration(i)))
	}
	if len(r.senders) > maxSenders {
		t.Fatalf("%d senders remembered, cap %d", len(r.senders), maxSenders)
	}
}

// FuzzDecode: any datagram under the right key either decodes into a
// header and whole entries, each of which reads back into a flow that
// encodes to the same bytes, or is refused; never a panic. Seeds are
// valid datagrams, so the fuzzer explores past the HMAC by mutating
// the entries and re-signing (the second input picks whether to).
func FuzzDecode(f *testing.F) {
	c := newCodec(testKey)
	buf := make([]byte, MaxLen)
	f.Add(append([]byte(nil), buf[:c.encode(buf, Header{Sender: 1, Seq: 1, Time: 1}, testFlows())]...), true)
	f.Add(append([]byte(nil), buf[:c.encode(buf, Header{Sender: 1, Seq: 2, Time: 1}, nil)]...), false)
	f.Add([]byte("L4FS"), false)
	f.Fuzz(func(t *testing.T, data []byte, resign bool) {
		if resign && len(data) >= HeaderLen+MACLen {
			end := len(data) - MACLen
			c.mac.Reset()
			c.mac.Write(data[:end])
			copy(data[end:], c.mac.Sum(nil))
		}
		_, entries, err := c.decode(data)
		if err != nil {
			return
		}
		if len(entries)%EntryLen != 0 || len(entries)/EntryLen > MaxEntries {
			t.Fatalf("entries of %d bytes", len(entries))
		}
		for i := range len(entries) / EntryLen {
			fl, ok := entry(entries, i)
			if !ok {
				continue
			}
			out := make([]byte, EntryLen)
			putEntry(out, &fl)
			in := entries[i*EntryLen : (i+1)*EntryLen]
			// Ages round to milliseconds: compare all else.
			if !bytes.Equal(in[:4], out[:4]) || !bytes.Equal(in[8:], out[8:]) {
				t.Fatalf("flow %d re-encoded\n% x\nwas\n% x", i, out, in)
			}
		}
	})
}
