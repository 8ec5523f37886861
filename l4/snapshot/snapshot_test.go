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

// Generations count a store's publications; Explain names the member
// Pick returns for a hashing algorithm and takes no flow.
func TestGenerationAndExplain(t *testing.T) {
	var ms []balance.Member
	for i, id := range []string{"a", "b", "c"} {
		b := l4.NewBackend(l4.BackendID(id), netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)}), 80), nil)
		ms = append(ms, balance.Member{Backend: b, Weight: 1})
	}
	var st Store
	var nilSnap *Snapshot
	if st.Load().Generation() != 0 || nilSnap.Explain(nil).Chosen != -1 {
		t.Fatal("an empty store")
	}
	opts := balance.Options{Algorithm: l4.Maglev, MaglevSize: 1009}
	for want := uint64(1); want <= 3; want++ {
		s, err := Build(opts, ms)
		if err != nil {
			t.Fatal(err)
		}
		st.Store(s)
		st.Store(s) // the same snapshot again: the same generation
		if got := st.Load().Generation(); got != want {
			t.Fatalf("generation %d, want %d", got, want)
		}
	}
	s := st.Load()
	f := l4.Flow{Src: netip.MustParseAddrPort("198.18.0.2:1234"), Dst: netip.MustParseAddrPort("198.18.2.10:80"), Proto: l4.TCP}
	e := s.Explain(&f)
	if e.Algorithm != l4.Maglev || e.Chosen < 0 || s.Members[e.Chosen].Backend.LiveFlows() != 0 {
		t.Fatalf("%+v", e)
	}
	if b := s.Pick(&f, nil); b != s.Members[e.Chosen].Backend {
		t.Fatalf("explained %s, picked %s", s.Members[e.Chosen].Backend.ID, b.ID)
	}
}
