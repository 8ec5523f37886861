// Tests of the fixed flow and ID hashes: stability, key selection, avalanche.

package balance

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

func flow(src, dst string, proto l4.Protocol) *l4.Flow {
	return &l4.Flow{Src: netip.MustParseAddrPort(src), Dst: netip.MustParseAddrPort(dst), Proto: proto}
}

// The hash is a cross-instance contract: these values must never change
// (recorded when the hash was written).
const (
	goldenSrcIP     = 0x94a8a6972d87148d
	goldenSrcIPPort = 0xecf74283230984ae
	goldenFiveTuple = 0xf261685e96eeac7e
	goldenID        = 0x62b94b0c603e5131
)

func TestFlowHashGolden(t *testing.T) {
	f := flow("198.51.100.7:40000", "198.18.0.10:5432", l4.TCP)
	tests := []struct {
		key  l4.HashKey
		want uint64
	}{
		{l4.HashSrcIP, goldenSrcIP},
		{l4.HashSrcIPPort, goldenSrcIPPort},
		{l4.HashFiveTuple, goldenFiveTuple},
	}
	for _, tt := range tests {
		if got := flowHash(f, tt.key); got != tt.want {
			t.Errorf("flowHash(%s) = %#x, want %#x", tt.key, got, tt.want)
		}
	}
	if got := hashString("db-1", seedOff); got != goldenID {
		t.Errorf("hashString = %#x, want %#x", got, goldenID)
	}
}

func TestFlowHashKeys(t *testing.T) {
	base := flow("198.51.100.7:40000", "198.18.0.10:5432", l4.TCP)
	tests := []struct {
		name  string
		other *l4.Flow
		key   l4.HashKey
		same  bool
	}{
		{"src_ip ignores src port", flow("198.51.100.7:40001", "198.18.0.10:5432", l4.TCP), l4.HashSrcIP, true},
		{"src_ip ignores dst and proto", flow("198.51.100.7:40000", "198.18.0.11:53", l4.UDP), l4.HashSrcIP, true},
		{"src_ip sees the address", flow("198.51.100.8:40000", "198.18.0.10:5432", l4.TCP), l4.HashSrcIP, false},
		{"ipv4-mapped is ipv4", flow("[::ffff:198.51.100.7]:40000", "198.18.0.10:5432", l4.TCP), l4.HashFiveTuple, true},
		{"src_ip_port sees the port", flow("198.51.100.7:40001", "198.18.0.10:5432", l4.TCP), l4.HashSrcIPPort, false},
		{"src_ip_port ignores dst", flow("198.51.100.7:40000", "198.18.0.11:53", l4.TCP), l4.HashSrcIPPort, true},
		{"5tuple sees the proto", flow("198.51.100.7:40000", "198.18.0.10:5432", l4.UDP), l4.HashFiveTuple, false},
		{"5tuple sees the dst port", flow("198.51.100.7:40000", "198.18.0.10:5433", l4.TCP), l4.HashFiveTuple, false},
		{"5tuple sees the dst addr", flow("198.51.100.7:40000", "198.18.0.11:5432", l4.TCP), l4.HashFiveTuple, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := flowHash(base, tt.key) == flowHash(tt.other, tt.key); got != tt.same {
				t.Errorf("same hash = %v, want %v", got, tt.same)
			}
		})
	}
	if flowHash(nil, l4.HashFiveTuple) != flowHash(&l4.Flow{}, l4.HashFiveTuple) {
		t.Error("nil flow must hash like a zero flow")
	}
}

// Strict avalanche: over 1000 random flows, flipping any one input bit
// (addresses, ports, protocol) flips every output bit in 40-60% of the
// cases (ideal 50%; sampling sd 1.6%, so 6 sd of slack).
func TestFlowHashAvalanche(t *testing.T) {
	fs := flows(1000, 13)
	type flip func(f *l4.Flow, bit int)
	addrBit := func(a netip.Addr, bit int) netip.Addr {
		b := a.As16()
		b[bit/8] ^= 1 << (bit % 8)
		return netip.AddrFrom16(b)
	}
	inputs := []struct {
		name string
		bits int
		flip flip
	}{
		{"src addr", 128, func(f *l4.Flow, bit int) { f.Src = netip.AddrPortFrom(addrBit(f.Src.Addr(), bit), f.Src.Port()) }},
		{"src port", 16, func(f *l4.Flow, bit int) { f.Src = netip.AddrPortFrom(f.Src.Addr(), f.Src.Port()^1<<bit) }},
		{"dst addr", 128, func(f *l4.Flow, bit int) { f.Dst = netip.AddrPortFrom(addrBit(f.Dst.Addr(), bit), f.Dst.Port()) }},
		{"dst port", 16, func(f *l4.Flow, bit int) { f.Dst = netip.AddrPortFrom(f.Dst.Addr(), f.Dst.Port()^1<<bit) }},
		{"proto", 8, func(f *l4.Flow, bit int) { f.Proto ^= 1 << bit }},
	}
	for _, in := range inputs {
		for bit := range in.bits {
			var flips [64]int
			for i := range fs {
				g := fs[i]
				in.flip(&g, bit)
				d := flowHash(&fs[i], l4.HashFiveTuple) ^ flowHash(&g, l4.HashFiveTuple)
				for o := range 64 {
					flips[o] += int(d >> o & 1)
				}
			}
			for o, n := range flips {
				if n < 400 || n > 600 {
					t.Fatalf("%s bit %d flips output bit %d in %d of 1000 flows", in.name, bit, o, n)
				}
			}
		}
	}
}

func TestHashStringDistinct(t *testing.T) {
	ids := []string{"", "a", "a\x00", "ab", "abcdefgh", "abcdefgh\x00", "abcdefghi", "ba"}
	seen := map[uint64]string{}
	for _, id := range ids {
		h := hashString(id, seedRing)
		if prev, ok := seen[h]; ok {
			t.Errorf("hashString(%q) == hashString(%q)", id, prev)
		}
		seen[h] = id
	}
}

// Sequential clients (consecutive addresses, consecutive ports) spread
// evenly: 65536 keys into 64 buckets by the hash's top bits (as Maglev and
// the ring use them) and by its low bits, each bucket within 5 sigma
// (+-160) of 1024.
func TestFlowHashUniform(t *testing.T) {
	tests := []struct {
		name string
		key  l4.HashKey
		flow func(i int) *l4.Flow
	}{
		{"consecutive ipv4", l4.HashSrcIP, func(i int) *l4.Flow {
			return &l4.Flow{Src: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 1)}
		}},
		{"consecutive ipv6", l4.HashSrcIP, func(i int) *l4.Flow {
			return &l4.Flow{Src: netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 1, 0xd, 0xb8, 14: byte(i >> 8), 15: byte(i)}), 1)}
		}},
		{"consecutive ports", l4.HashSrcIPPort, func(i int) *l4.Flow {
			return flow(fmt.Sprintf("198.51.100.7:%d", i), "198.18.0.10:53", l4.UDP)
		}},
		{"consecutive ports 5tuple", l4.HashFiveTuple, func(i int) *l4.Flow {
			return flow(fmt.Sprintf("198.51.100.7:%d", i), "198.18.0.10:53", l4.UDP)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var top, low [64]int
			for i := range 65536 {
				h := flowHash(tt.flow(i), tt.key)
				top[h>>58]++
				low[h&63]++
			}
			for b := range 64 {
				if top[b] < 1024-160 || top[b] > 1024+160 || low[b] < 1024-160 || low[b] > 1024+160 {
					t.Fatalf("bucket %d: %d (top bits), %d (low bits), want 1024 +- 160", b, top[b], low[b])
				}
			}
		})
	}
}
