// Agent checks applied by the loop: real agents on loopback, a fake plane.

package reconcile

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// loopAgents listens on one port at 127.0.0.1 and 127.0.0.2 (backends
// a and b), each answering its own line.
type loopAgents struct {
	port  int
	lines [2]atomic.Pointer[string]
}

func startLoopAgents(t *testing.T) *loopAgents {
	t.Helper()
	a := &loopAgents{}
	for i := range a.lines {
		a.say(i, "up\n")
	}
	for range 20 {
		l1, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l1.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.2:%d", port))
		if err != nil {
			l1.Close()
			continue
		}
		t.Cleanup(func() { l1.Close(); l2.Close() })
		for i, l := range []net.Listener{l1, l2} {
			testutil.ServeConns(l, func(c net.Conn) {
				defer c.Close()
				_, _ = c.Write([]byte(*a.lines[i].Load()))
			})
		}
		a.port = port
		return a
	}
	t.Fatal("no port free on both 127.0.0.1 and 127.0.0.2")
	return nil
}

func (a *loopAgents) say(i int, line string) { a.lines[i].Store(&line) }

const agentVIP = `
[global]
admin_socket = "off"
[[vip]]
name = "v"
listen = "198.18.7.1:80"
algorithm = "round_robin"
  [vip.health]
  type = "none"
  on_down = "%s"
  %s
  [[vip.backend]]
  name = "a"
  address = "127.0.0.1:9"
  weight = 10
  max_conns = 100
  [[vip.backend]]
  name = "b"
  address = "127.0.0.2:9"
  weight = 10
`

// TestAgentApplied: what an agent says reaches the snapshot, the
// backend's pinned-flow eligibility, its cap and status: a share scales
// the weight, drain keeps pinned flows and maint does not, maxconn
// replaces max_conns, down purges the backend's pinned flows and applies
// on_down, up and ready lift them. A reload that keeps agent_port keeps
// what the agents said; one without an agent drops it.
func TestAgentApplied(t *testing.T) {
	agents := startLoopAgents(t)
	rt := New(zaptest.NewLogger(t), Options{})
	var fake *fakePlane
	rt.openPlane = func(key l4.VIPKey, vc *config.VIP, v *vip) (plane.Plane, func(*config.VIP) error, error) {
		fake = &fakePlane{}
		return fake, func(*config.VIP) error { return nil }, nil
	}
	defer rt.Shutdown(context.Background())
	withAgent := fmt.Sprintf(`agent_port = %d
  agent_interval = "100ms"
  agent_timeout = "100ms"`, agents.port)
	apply(t, rt, fmt.Sprintf(agentVIP, "reset", withAgent))

	backendA := func() *l4.Backend {
		v := rt.lookupVIP(l4.VIPKey{Addr: netip.MustParseAddrPort("198.18.7.1:80"), Proto: l4.TCP}.String())
		return v.backendByID("a")
	}
	wait := func(what string, cond func(plane.BackendStatus) bool) plane.BackendStatus {
		t.Helper()
		waitBackend(t, rt, "v", "a", 10*time.Second, what, cond)
		b, _ := backendStatus(rt, "v", "a")
		return b
	}
	agentIs := func(state string) func(plane.BackendStatus) bool {
		return func(b plane.BackendStatus) bool { return b.Agent != nil && b.Agent.State == state }
	}

	b := wait("agent up", agentIs("up ready"))
	if b.EffectiveWeight != 10 || b.MaxFlows != 100 {
		t.Fatalf("up: %+v", b)
	}
	agents.say(0, "50% maxconn:7\n")
	b = wait("50%", agentIs("up ready 50% maxconn:7"))
	if b.EffectiveWeight != 5 || b.MaxFlows != 7 || b.Agent.Reply != "50% maxconn:7\n" {
		t.Fatalf("50%% maxconn:7: %+v %+v", b, b.Agent)
	}
	agents.say(0, "drain\n")
	b = wait("drain", agentIs("up drain 50% maxconn:7"))
	if b.EffectiveWeight != 0 || !backendA().Eligible() {
		t.Fatalf("drain: effective weight %d, pinned flows kept %v", b.EffectiveWeight, backendA().Eligible())
	}
	agents.say(0, "maint\n")
	wait("maint", agentIs("up maint 50% maxconn:7"))
	if backendA().Eligible() {
		t.Fatal("maint keeps pinned flows")
	}
	fake.took()
	agents.say(0, "ready down#disk full\n")
	b = wait("down", agentIs("down ready 50% maxconn:7"))
	if b.Agent.Why != "agent said down: disk full" || b.Health != "unknown" || backendA().Eligible() {
		t.Fatalf("down: %+v %+v", b, b.Agent)
	}
	testutil.Eventually(t, 5*time.Second, "BackendDown and on_down reset", func() bool {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		return slices.Contains(fake.events, "down a") && slices.Contains(fake.events, fmt.Sprintf("reset %v", l4.EndOnDown))
	})
	agents.say(0, "garbage\n")
	b = wait("garbage", func(b plane.BackendStatus) bool {
		return b.Agent != nil && strings.Contains(b.Agent.Error, "not understood")
	})
	if b.Agent.State != "down ready 50% maxconn:7" {
		t.Fatalf("garbage changed the state: %+v", b.Agent)
	}
	agents.say(0, "up 100% maxconn:0\n")
	b = wait("up again", agentIs("up ready 100% maxconn:0"))
	if b.EffectiveWeight != 10 || b.MaxFlows != 0 || !backendA().Eligible() {
		t.Fatalf("up again: %+v", b)
	}

	agents.say(0, "30%\n")
	wait("30%", agentIs("up ready 30% maxconn:0"))
	agents.say(0, "hold on\n") // not understood: the reload below must not see a new state
	apply(t, rt, fmt.Sprintf(agentVIP, "keep", withAgent))
	if b, _ := backendStatus(rt, "v", "a"); b.Agent == nil || b.Agent.State != "up ready 30% maxconn:0" || b.EffectiveWeight != 3 {
		t.Fatalf("a reload keeping agent_port dropped the agent's state: %+v", b)
	}
	apply(t, rt, fmt.Sprintf(agentVIP, "keep", ""))
	if b, _ := backendStatus(rt, "v", "a"); b.Agent != nil || b.EffectiveWeight != 10 || b.MaxFlows != 100 {
		t.Fatalf("a reload without an agent kept its state: %+v", b)
	}
}
