// Property tests of the Maglev table: weighted shares, minimal disruption, determinism, input checks.

package balance

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// tableOwners maps each slot to its owner's ID, to compare tables built
// over different member lists.
func tableOwners(t *testing.T, ms []Member, size uint32) []string {
	t.Helper()
	tab, err := MaglevTable(ms, size)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(tab))
	for s, i := range tab {
		out[s] = string(ms[i].Backend.ID)
	}
	return out
}

func without(ms []Member, i int) []Member {
	return append(slices.Clone(ms[:i]), ms[i+1:]...)
}

// Each backend owns its weight share of the slots: |entries - expected| is
// at most 1% of expected, or one entry when 1% is less than one.
func TestMaglevShares(t *testing.T) {
	tests := []struct {
		name    string
		weights []uint32
	}{
		{"3 equal", equal(3, 100)},
		{"10 equal", equal(10, 100)},
		{"100 equal", equal(100, 100)},
		{"1000 equal", equal(1000, 1)},
		{"weighted 1:2:3:4", []uint32{100, 200, 300, 400}},
		{"weighted 1..10", []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{"one heavy", append([]uint32{1000}, equal(20, 1)...)},
	}
	const m = DefaultMaglevSize
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms := makeMembers(tt.weights...)
			tab, err := MaglevTable(ms, m)
			if err != nil {
				t.Fatal(err)
			}
			count := make([]int, len(ms))
			for _, i := range tab {
				count[i]++
			}
			for i, share := range shares(tt.weights) {
				want := share * m
				if d := float64(count[i]) - want; d > max(0.01*want, 1) || -d > max(0.01*want, 1) {
					t.Errorf("backend %d: %d entries, want %.1f +- 1%%", i, count[i], want)
				}
			}
		})
	}
}

// Removing one of n equal backends moves at most 1/n + 2% of the slots,
// and at least half of the moved slots are the removed backend's own (the
// rest is Maglev's small extra churn). Adding one likewise, with at least
// half of the moved slots going to the new backend.
func TestMaglevDisruption(t *testing.T) {
	const m = DefaultMaglevSize
	for _, n := range []int{3, 10, 100} {
		ms := makeMembers(equal(n+1, 100)...)
		full, base := ms, ms[:n]
		before := tableOwners(t, base, m)
		for _, r := range []int{0, n / 2, n - 1} {
			t.Run(fmt.Sprintf("remove %d of %d", r, n), func(t *testing.T) {
				checkMoved(t, before, tableOwners(t, without(base, r), m), string(base[r].Backend.ID), n, true)
			})
		}
		t.Run(fmt.Sprintf("add 1 to %d", n), func(t *testing.T) {
			checkMoved(t, before, tableOwners(t, full, m), string(full[n].Backend.ID), n+1, false)
		})
	}
}

// checkMoved compares two owner tables; id is the backend removed (removed
// true: its slots must all move) or added.
func checkMoved(t *testing.T, before, after []string, id string, n int, removed bool) {
	t.Helper()
	moved, own := 0, 0
	for s := range before {
		if before[s] == after[s] {
			continue
		}
		moved++
		if removed && before[s] == id || !removed && after[s] == id {
			own++
		}
		if removed && after[s] == id {
			t.Fatalf("slot %d still owned by the removed backend", s)
		}
	}
	frac := float64(moved) / float64(len(before))
	if bound := 1/float64(n) + 0.02; frac > bound {
		t.Errorf("moved %.4f of the slots, bound %.4f", frac, bound)
	}
	if float64(own) < 0.5*float64(moved) {
		t.Errorf("only %d of %d moved slots belong to %s", own, moved, id)
	}
	t.Logf("moved %.4f of slots (1/n = %.4f), %.0f%% of them %s's", frac, 1/float64(n), 100*float64(own)/float64(moved), id)
}

func tableBytes(tab []uint32) []byte {
	b := make([]byte, 4*len(tab))
	for i, v := range tab {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// Two independent builds of the same members are byte-identical, whatever
// the input order (as owners), and match the table recorded when the
// builder was written: any change here remaps flows across an upgrade.
func TestMaglevDeterministic(t *testing.T) {
	ws := []uint32{100, 100, 50, 200, 1}
	a, err := MaglevTable(makeMembers(ws...), DefaultMaglevSize)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := MaglevTable(makeMembers(ws...), DefaultMaglevSize)
	if !bytes.Equal(tableBytes(a), tableBytes(b)) {
		t.Fatal("two builds differ")
	}
	sum := sha256.Sum256(tableBytes(a))
	if got := hex.EncodeToString(sum[:8]); got != goldenMaglev {
		t.Errorf("table fingerprint %s, want %s", got, goldenMaglev)
	}
	ms := makeMembers(ws...)
	want := tableOwners(t, ms, DefaultMaglevSize)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	if got := tableOwners(t, ms, DefaultMaglevSize); !slices.Equal(got, want) {
		t.Error("table owners depend on member order")
	}
}

// goldenMaglev fingerprints MaglevTable(weights 100,100,50,200,1; 65537).
const goldenMaglev = "47839367e96b7b5b"

func TestMaglevTableErrors(t *testing.T) {
	dup := makeMembers(1, 1)
	dup[1].Backend.ID = dup[0].Backend.ID
	zero := makeMembers(1, 1)
	zero[1].Weight = 0
	tests := []struct {
		name string
		ms   []Member
		size uint32
	}{
		{"empty", nil, 7},
		{"size 0", makeMembers(1), 0},
		{"size 1", makeMembers(1), 1},
		{"not prime", makeMembers(1, 1), 65536},
		{"below members", makeMembers(equal(11, 1)...), 7},
		{"too big", makeMembers(1), 16777259}, // prime above MaxMaglevSize
		{"duplicate id", dup, 7},
		{"zero weight", zero, 7},
		{"nil backend", []Member{{Weight: 1}}, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tab, err := MaglevTable(tt.ms, tt.size); err == nil {
				t.Errorf("no error, table of %d", len(tab))
			}
		})
	}
	if _, err := MaglevTable(makeMembers(1), 2); err != nil {
		t.Errorf("size 2, one member: %v", err)
	}
}

func TestIsPrime(t *testing.T) {
	var got []uint32
	for n := uint32(0); n < 50; n++ {
		if isPrime(n) {
			got = append(got, n)
		}
	}
	want := []uint32{2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47}
	if !slices.Equal(got, want) {
		t.Errorf("primes below 50: %v", got)
	}
	for _, p := range []uint32{65537, 65521, 16777213} {
		if !isPrime(p) {
			t.Errorf("%d is prime", p)
		}
	}
	if isPrime(65535) || isPrime(16769025) { // 4095^2
		t.Error("composite reported prime")
	}
}
