// Fuzz tests: random member sets through the Maglev builder, the ring and the flow hash.

package balance

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// fuzzSizes are the table sizes a fuzz input may pick from (small ones
// keep an iteration fast; 65537 is the default).
var fuzzSizes = []uint32{2, 3, 13, 251, 4093, 65537}

// fuzzMembers turns bytes into members: each 3-byte group is a weight
// (1..1024) and an ID fragment, so IDs may repeat (an expected error).
func fuzzMembers(data []byte) []Member {
	var ws []uint32
	var ids []string
	for i := 0; i+3 <= len(data) && len(ws) < 300; i += 3 {
		ws = append(ws, 1+uint32(binary.LittleEndian.Uint16(data[i:]))%1024)
		ids = append(ids, fmt.Sprintf("be-%d", data[i+2]))
	}
	ms := makeMembers(ws...)
	for i := range ms {
		ms[i].Backend.ID = l4.BackendID(ids[i])
	}
	return ms
}

func FuzzMaglevTable(f *testing.F) {
	f.Add([]byte{1, 0, 1, 2, 0, 2, 3, 0, 3}, uint8(5))
	f.Add([]byte{0xff, 0xff, 7}, uint8(0))
	f.Add([]byte{}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, sizeSel uint8) {
		ms := fuzzMembers(data)
		size := fuzzSizes[int(sizeSel)%len(fuzzSizes)]
		tab, err := MaglevTable(ms, size)
		if err != nil {
			return // empty, duplicate IDs, or size below member count
		}
		if len(tab) != int(size) {
			t.Fatalf("table of %d, want %d", len(tab), size)
		}
		for s, i := range tab {
			if int(i) >= len(ms) {
				t.Fatalf("slot %d holds %d of %d members", s, i, len(ms))
			}
		}
		again, _ := MaglevTable(ms, size)
		if !slices.Equal(tab, again) {
			t.Fatal("two builds differ")
		}
	})
}

// FuzzHashedPick builds a ring and a Maglev picker over random members,
// bounded or not, and picks for a random flow: never a panic, always a
// member, and the ring lookup lands on the first point at or after the key.
func FuzzHashedPick(f *testing.F) {
	f.Add([]byte{1, 0, 1, 2, 0, 2}, []byte("198.51.100.7"), uint16(4000), uint8(0))
	f.Add([]byte{9, 9, 9}, []byte("\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"), uint16(0), uint8(7))
	f.Fuzz(func(t *testing.T, data, addr []byte, port uint16, sel uint8) {
		ms := fuzzMembers(data)
		a, _ := netip.AddrFromSlice(addr) // invalid addresses hash as zero
		fl := l4.Flow{Src: netip.AddrPortFrom(a, port), Dst: netip.AddrPortFrom(a, ^port), Proto: l4.Protocol(sel)}
		for _, alg := range []l4.Algorithm{l4.SourceHash, l4.Maglev} {
			opts := Options{Algorithm: alg, HashKey: l4.HashKey(sel % 3), BalanceFactor: uint32(sel%2) * 110, MaglevSize: 251}
			p, err := New(opts, ms)
			if err != nil {
				continue
			}
			b := p.Pick(&fl, nil)
			if _, member := index(ms)[b]; len(ms) > 0 && !member {
				t.Fatalf("%s: pick %v, not a member", alg, b)
			}
			if b != nil {
				b.Release()
			}
			if r, ok := p.(*ring); ok {
				checkLookup(t, r, flowHash(&fl, opts.HashKey))
			}
		}
	})
}

func checkLookup(t *testing.T, r *ring, h uint64) {
	i := r.lookup(h)
	if r.points[i] < h && !(i == 0 && r.points[len(r.points)-1] < h) {
		t.Fatalf("lookup(%#x) = point %#x", h, r.points[i])
	}
	if i > 0 && r.points[i-1] >= h {
		t.Fatalf("lookup(%#x) skipped point %#x", h, r.points[i-1])
	}
}
