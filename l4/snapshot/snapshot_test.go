package snapshot

import (
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
)

// The exposed table is the one Pick uses: the member it names for a
// flow's slot is the backend Pick returns.
func TestMaglevTableIsThePickersTable(t *testing.T) {
	var ms []balance.Member
	for i, id := range []string{"c", "a", "b"} {
		b := l4.NewBackend(l4.BackendID(id), netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)}), 80), nil)
		ms = append(ms, balance.Member{Backend: b, Weight: 1})
	}
	opts := balance.Options{Algorithm: l4.Maglev, HashKey: l4.HashFiveTuple, MaglevSize: 1009}
	s, err := Build(opts, ms)
	if err != nil {
		t.Fatal(err)
	}
	table := s.MaglevTable()
	if len(table) != 1009 {
		t.Fatalf("table of %d slots", len(table))
	}
	for port := uint16(1); port < 500; port++ {
		f := l4.Flow{Src: netip.AddrPortFrom(netip.MustParseAddr("198.18.0.2"), port), Dst: netip.MustParseAddrPort("198.18.2.10:80"), Proto: l4.TCP}
		want := s.Members[table[balance.Slot(balance.FlowHash(&f, l4.HashFiveTuple), len(table))]].Backend
		got := s.Pick(&f, nil)
		got.Release()
		if got != want {
			t.Fatalf("flow %v: Pick %s, table %s", f, got.ID, want.ID)
		}
	}
	rr, err := Build(balance.Options{}, ms)
	if err != nil || rr.MaglevTable() != nil {
		t.Fatalf("round robin has a Maglev table: %v", err)
	}
}
