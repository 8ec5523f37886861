package reconcile

import (
	"testing"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/snapshot"
	"github.com/l4lb/l4lb/l4/xdpplane"
)

// recordingPlane is a data plane that records what it is given.
type recordingPlane struct {
	plane.Plane
	published []*snapshot.Snapshot
}

func (p *recordingPlane) Publish(s *snapshot.Snapshot) error {
	p.published = append(p.published, s)
	return nil
}

func (p *recordingPlane) BackendsRemoved(bs []*l4.Backend, release func(*l4.Backend)) {
	for _, b := range bs {
		release(b)
	}
}

// An xdp least_conn VIP moves new flows away from the backend with more
// live flows, step by step, and only republishes when a weight changed.
func TestRescaleShiftsTableShare(t *testing.T) {
	cfg := parse(t, `
[xdp]
interface = "veth0"
[[vip]]
name = "x"
listen = "198.18.100.1:80"
mode = "xdp"
algorithm = "least_conn"
  [vip.health]
  type = "none"
  [[vip.backend]]
  name = "busy"
  address = "198.18.10.11:80"
  [[vip.backend]]
  name = "idle"
  address = "198.18.10.12:80"
`)
	v := &vip{key: cfg.VIPs[0].Key(), log: zap.NewNop(), indexes: xdpplane.NewIndexPool(10), backends: map[l4.BackendID]*backend{}}
	rec := &recordingPlane{}
	v.dp = rec
	p, err := v.plan(&cfg.VIPs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := v.commit(p); err != nil {
		t.Fatal(err)
	}
	share := func() (busy, idle uint32) {
		for _, m := range v.store.Load().Members {
			if m.Backend.ID == "busy" {
				busy = m.Weight
			} else {
				idle = m.Weight
			}
		}
		return
	}
	if b, i := share(); b != i {
		t.Fatalf("weights before any flow: busy %d, idle %d", b, i)
	}
	live := func(b *l4.Backend) uint64 {
		if b.ID == "busy" {
			return 50
		}
		return 5
	}
	// Costs per weight: busy 51, idle 6, mean 28.5: the scales head for
	// 28.5/51 and 28.5/6, a busy/idle weight ratio of 6/51.
	target := 6.0 / 51
	prev := 1.0
	for step := 0; prev > target*1.01; step++ {
		if step > 20 {
			t.Fatalf("busy/idle weight %v never reached %v", prev, target)
		}
		v.rescale(live)
		b, i := share()
		ratio := float64(b) / float64(i)
		if ratio >= prev || ratio < prev/(xdpplane.ScaleStep*xdpplane.ScaleStep)-1e-3 || ratio < target*0.99 {
			t.Fatalf("step %d: busy/idle weight %v -> %v: want a fall of at most two bounded steps, not past %v", step, prev, ratio, target)
		}
		prev = ratio
	}
	n := len(rec.published)
	v.rescale(live) // converged: nothing moves, nothing is written
	if len(rec.published) != n {
		t.Fatal("a rescale that changed no weight republished the table")
	}
}
