package bpf

import (
	"errors"
	"testing"
	"time"
)

// TestInsertFlow: an entry flow sync installs pins a mid-flow packet to
// its backend against the Maglev table, keeps its synced mark and age
// (the first hit refreshes last-seen), never overwrites a local entry,
// and yields to a SYN as any entry does.
func TestInsertFlow(t *testing.T) {
	e := newCTEnv(t)
	f := flowTo(vip4TCP) // the table sends it to backend 1
	old := MonotonicNow() - 5*time.Second
	must(t, e.lb.InsertFlow(f, FlowEntry{Backend: 2, LastSeen: old, Synced: true}))
	if fe, ok := e.entry(t, f); !ok || fe.Backend != 2 || !fe.Synced || fe.LastSeen != old {
		t.Fatalf("installed entry: %+v, %v", fe, ok)
	}
	if err := e.lb.InsertFlow(f, FlowEntry{Backend: 1, LastSeen: MonotonicNow()}); !errors.Is(err, ErrFlowExists) {
		t.Fatalf("a second insert: %v, want ErrFlowExists", err)
	}
	wantBackend(t, "ack of the synced flow", e.send(t, f, thACK), 2)
	if fe, _ := e.entry(t, f); fe.Backend != 2 || !fe.Synced || fe.LastSeen <= old {
		t.Fatalf("after a hit: %+v, want backend 2, still synced, last-seen refreshed", fe)
	}
	wantBackend(t, "a new SYN of the same tuple", e.send(t, f, thSYN), 1)
	if fe, _ := e.entry(t, f); fe.Synced || fe.Backend != 1 {
		t.Fatalf("after the SYN: %+v, want a local entry on backend 1", fe)
	}
	// A local entry wins over a peer's.
	g := flowTo(vip4UDP)
	wantBackend(t, "udp", e.send(t, g, 0), 1)
	if err := e.lb.InsertFlow(g, FlowEntry{Backend: 2, Synced: true}); !errors.Is(err, ErrFlowExists) {
		t.Fatalf("insert over a local entry: %v", err)
	}
}
