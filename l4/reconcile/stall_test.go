package reconcile

import (
	"fmt"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// TestStallMark: a backend the proxy reports degraded gets no new flow
// and status says why; a second one reported too is kept, with the first,
// as nothing else could take a flow (never the last eligible backend); a
// reload keeps the marks; a report that it is back restores it.
func TestStallMark(t *testing.T) {
	s1, s2 := startNamed(t, "s1"), startNamed(t, "s2")
	conf := fmt.Sprintf(overrideVIP, testutil.FreeTCPAddr(t), s1.addr, s2.addr, 100)
	rt := startRuntime(t, conf)
	v := rt.vipNamed("a")
	b1, b2 := v.backendByID("s1"), v.backendByID("s2")
	stalled := plane.StallReport{Degraded: true, Conns: 4, Stalled: 3, Waited: 5e9}

	v.BackendStall(b1, stalled)
	if seen := names(t, rt, 10); seen["s1"] != 0 {
		t.Fatalf("degraded s1 got new flows: %v", seen)
	}
	bs, _ := backendStatus(rt, "a", "s1")
	if !strings.HasPrefix(bs.Degraded, "3 of 4 connections: no reply for 5s") || bs.DegradedSince.IsZero() || bs.DegradedKept || bs.EffectiveWeight != 0 || bs.Health == "down" {
		t.Fatalf("s1 status: %+v", bs)
	}

	v.BackendStall(b2, stalled) // both: neither is taken out
	if seen := names(t, rt, 10); seen["s1"] == 0 || seen["s2"] == 0 {
		t.Fatalf("both degraded: flows %v, want both kept", seen)
	}
	if bs, _ := backendStatus(rt, "a", "s2"); !bs.DegradedKept {
		t.Fatalf("s2 status: %+v", bs)
	}

	apply(t, rt, conf) // a reload keeps the marks
	v.BackendStall(b2, plane.StallReport{Recovered: "1 of 1 connections got a reply"})
	if seen := names(t, rt, 10); seen["s1"] != 0 || seen["s2"] != 10 {
		t.Fatalf("s2 back, s1 degraded: flows %v", seen)
	}
	if bs, _ := backendStatus(rt, "a", "s1"); bs.Degraded == "" || bs.DegradedKept {
		t.Fatalf("s1 after the reload: %+v", bs)
	}
	v.BackendStall(b1, plane.StallReport{Recovered: "back"})
	if seen := names(t, rt, 10); seen["s1"] == 0 {
		t.Fatalf("s1 back: flows %v", seen)
	}
	if bs, _ := backendStatus(rt, "a", "s1"); bs.Degraded != "" {
		t.Fatalf("s1 back: %+v", bs)
	}
}
