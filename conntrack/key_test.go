// Tests of Key: round trips, family separation, allocation, hash spread.

package conntrack

import (
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

func TestKeyOfRoundTrip(t *testing.T) {
	ap := netip.MustParseAddrPort
	tests := []struct {
		name     string
		in, want l4.Flow // want is the canonical form
	}{
		{"ipv4 tcp",
			l4.Flow{Src: ap("198.18.0.1:40000"), Dst: ap("198.18.0.10:5432"), Proto: l4.TCP},
			l4.Flow{Src: ap("198.18.0.1:40000"), Dst: ap("198.18.0.10:5432"), Proto: l4.TCP}},
		{"ipv6 udp",
			l4.Flow{Src: ap("[2001:db8::1]:53000"), Dst: ap("[2001:db8::10]:53"), Proto: l4.UDP},
			l4.Flow{Src: ap("[2001:db8::1]:53000"), Dst: ap("[2001:db8::10]:53"), Proto: l4.UDP}},
		{"ipv4-mapped is unmapped",
			l4.Flow{Src: ap("[::ffff:198.18.0.1]:1"), Dst: ap("[::ffff:198.18.0.10]:2"), Proto: l4.TCP},
			l4.Flow{Src: ap("198.18.0.1:1"), Dst: ap("198.18.0.10:2"), Proto: l4.TCP}},
		{"zone dropped",
			l4.Flow{Src: ap("[fe80::1%eth0]:1"), Dst: ap("[fe80::2]:2"), Proto: l4.UDP},
			l4.Flow{Src: ap("[fe80::1]:1"), Dst: ap("[fe80::2]:2"), Proto: l4.UDP}},
		{"mixed families",
			l4.Flow{Src: ap("198.18.0.1:1"), Dst: ap("[2001:db8::10]:2"), Proto: l4.TCP},
			l4.Flow{Src: ap("198.18.0.1:1"), Dst: ap("[2001:db8::10]:2"), Proto: l4.TCP}},
		{"zero addresses",
			l4.Flow{Proto: l4.UDP},
			l4.Flow{Proto: l4.UDP}},
		{"other protocol",
			l4.Flow{Src: ap("198.18.0.1:0"), Dst: ap("198.18.0.2:0"), Proto: 132},
			l4.Flow{Src: ap("198.18.0.1:0"), Dst: ap("198.18.0.2:0"), Proto: 132}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := KeyOf(&tt.in)
			if got := k.Flow(); got != tt.want {
				t.Errorf("KeyOf(%v).Flow() = %v, want %v", tt.in, got, tt.want)
			}
			if again := k.Flow(); KeyOf(&again) != k {
				t.Errorf("KeyOf(Flow()) differs from the key")
			}
			if k.Proto() != tt.in.Proto {
				t.Errorf("Proto() = %v, want %v", k.Proto(), tt.in.Proto)
			}
		})
	}
}

func TestKeyFamiliesDistinct(t *testing.T) {
	dst := netip.MustParseAddrPort("198.18.0.10:80")
	srcs := []string{
		"198.18.0.1",       // IPv4
		"::198.18.0.1",     // IPv4-compatible IPv6: same low bytes, other family
		"2001:db8::c612:1", // IPv6
		"::",               // unspecified IPv6, 16 zero bytes
		"0.0.0.0",
	}
	seen := map[Key]string{}
	for _, s := range srcs {
		f := l4.Flow{Src: netip.AddrPortFrom(netip.MustParseAddr(s), 1), Dst: dst, Proto: l4.TCP}
		k := KeyOf(&f)
		if prev, dup := seen[k]; dup {
			t.Errorf("%s and %s give the same key", prev, s)
		}
		seen[k] = s
	}
	zero := KeyOf(&l4.Flow{Proto: l4.TCP})
	unspec := KeyOf(&l4.Flow{Src: netip.AddrPortFrom(netip.IPv6Unspecified(), 0), Proto: l4.TCP})
	if zero == unspec {
		t.Error("zero Addr and :: give the same key")
	}
	tcp, udp := flowKey(1, l4.TCP), flowKey(1, l4.UDP)
	if tcp == udp {
		t.Error("protocol is not part of the key")
	}
}

func TestKeyOfDoesNotAllocate(t *testing.T) {
	f := l4.Flow{
		Src:   netip.MustParseAddrPort("[2001:db8::1]:40000"),
		Dst:   netip.MustParseAddrPort("[2001:db8::10]:443"),
		Proto: l4.TCP,
	}
	var sink Key
	if n := testing.AllocsPerRun(100, func() { sink = KeyOf(&f) }); n != 0 {
		t.Errorf("KeyOf allocates %v times", n)
	}
	_ = sink
}

// TestHashSpread checks that keys differing only in the client port, the
// usual case behind one NAT, spread evenly over shards and index slots.
func TestHashSpread(t *testing.T) {
	const shards, keys = 64, 64 * 1024
	s := newSeed()
	var byShard [shards]int
	byLow := make([]int, 1024)
	for i := 0; i < keys; i++ {
		f := l4.Flow{
			Src:   netip.AddrPortFrom(netip.MustParseAddr("198.18.0.1"), uint16(i)),
			Dst:   netip.MustParseAddrPort("198.18.0.10:443"),
			Proto: l4.TCP,
		}
		k := KeyOf(&f)
		h := s.hash(&k)
		byShard[h>>(64-6)]++
		byLow[h&1023]++
	}
	within := func(name string, counts []int, mean, tol float64) {
		for i, n := range counts {
			if float64(n) < mean*(1-tol) || float64(n) > mean*(1+tol) {
				t.Errorf("%s %d holds %d keys, mean %.0f", name, i, n, mean)
			}
		}
	}
	within("shard", byShard[:], keys/shards, 0.15)
	within("low bucket", byLow, keys/1024, 0.6)
}
