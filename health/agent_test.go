// agent_test.go: the agent check against small real agents (TCP servers on loopback) and through the Manager.

package health

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// agent is a small real agent: it answers every connection with what
// reply says (given the bytes the checker sent, read up to a newline
// when sendFirst), then closes; reply "" closes at once, and a hold
// agent never says anything.
type agent struct {
	l         net.Listener
	sendFirst bool
	mu        sync.Mutex
	reply     string
	hold      bool
	got       []string
}

func startAgent(t *testing.T, reply string) *agent {
	t.Helper()
	a := &agent{l: listen(t), reply: reply}
	testutil.ServeConns(a.l, a.serve)
	return a
}

func (a *agent) set(reply string, hold bool) {
	a.mu.Lock()
	a.reply, a.hold = reply, hold
	a.mu.Unlock()
}

func (a *agent) serve(c net.Conn) {
	defer c.Close()
	a.mu.Lock()
	reply, hold, first := a.reply, a.hold, a.sendFirst
	a.mu.Unlock()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if first {
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		a.mu.Lock()
		a.got = append(a.got, string(buf[:n]))
		a.mu.Unlock()
		reply = strings.ReplaceAll(reply, "$GOT", strings.TrimSpace(string(buf[:n])))
	}
	if hold {
		_, _ = c.Read(make([]byte, 1)) // until the checker gives up
		return
	}
	_, _ = c.Write([]byte(reply))
}

func (a *agent) port() uint16 { return addrOf(a.l).Port() }

func agentCheck(t *testing.T, a *agent, spec AgentSpec) (string, AgentReply, error) {
	t.Helper()
	spec.Port = a.port()
	if spec.Timeout == 0 {
		spec.Timeout = testTimeout
	}
	s := Spec{Interval: time.Minute, Timeout: spec.Timeout, Agent: spec}.withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return newAgentChecker(s).check(ctx, addrOf(a.l))
}

func TestAgentCheck(t *testing.T) {
	cases := []struct {
		name, reply string
		hold        bool
		timeout     time.Duration
		want        string // the reply as the state shows it, or the error
	}{
		{"weight and drain", "drain 50%\n", false, 0, "up drain 50%"},
		{"no newline, then close", "75%", false, 0, "up ready 75%"},
		{"down with a comment", "down#maintenance window\n", false, 0, "down ready"},
		{"garbage", "HTTP/1.0 200 OK\r\n\r\nhello\n", false, 0, `agent reply not understood: "HTTP/1.0 200 OK"`},
		{"bad value", "maxconn:many\n", false, 0, `want maxconn:N`},
		{"closes early", "", false, 0, "agent closed the connection without a reply"},
		{"silent", "", true, 300 * time.Millisecond, "timeout after 300ms waiting for the agent's reply"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := startAgent(t, c.reply)
			a.set(c.reply, c.hold)
			_, r, err := agentCheck(t, a, AgentSpec{Timeout: c.timeout})
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				got = AgentState{}.Apply(r).String()
			}
			if !strings.Contains(got, c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		s := Spec{Interval: time.Minute, Timeout: time.Second, Agent: AgentSpec{Port: closedPort(t).Port()}}.withDefaults()
		_, _, err := newAgentChecker(s).check(context.Background(), netip.MustParseAddrPort("127.0.0.1:1"))
		if err == nil || err.Error() != "connect refused" {
			t.Fatalf("error %v, want connect refused", err)
		}
	})
	t.Run("send", func(t *testing.T) {
		a := startAgent(t, "")
		a.mu.Lock()
		a.sendFirst = true
		a.mu.Unlock()
		a.set("$GOT\n", false)
		_, r, err := agentCheck(t, a, AgentSpec{Send: []byte("maint\n")})
		if err != nil || !r.HasAdmin || r.Admin != AgentMaint {
			t.Fatalf("reply %+v err %v, want the echoed maint", r, err)
		}
	})
}

// TestManagerAgent: the agent runs beside the check (here type none: no
// check at all), its replies add up to the state the events and State
// carry, a failed agent check keeps that state and says why, and the
// health state is the check's alone.
func TestManagerAgent(t *testing.T) {
	m, rec := newManager(t)
	a := startAgent(t, "drain 50%\n")
	key := TargetKey{VIP: "v", Backend: "b"}
	spec := Spec{Type: l4.CheckNone, Agent: AgentSpec{Port: a.port(), Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond}}
	if err := m.Set(key, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 9), spec); err != nil {
		t.Fatal(err)
	}
	wait := func(pred func(Event) bool, what string) Event {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			evs := rec.snapshot(key)
			for i := len(evs) - 1; i >= 0; i-- {
				if evs[i].Agent && pred(evs[i]) {
					return evs[i]
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("no agent event: %s; last state %+v", what, m.mustState(t, key).Agent)
		return Event{}
	}
	ev := wait(func(e Event) bool { return e.AgentChanged && e.AgentState.String() == "up drain 50%" }, "drain 50%")
	if ev.Changed() || ev.New != l4.HealthUnknown {
		t.Fatalf("an agent event changed the health: %+v", ev)
	}
	a.set("garbage\n", false)
	ev = wait(func(e Event) bool { return e.AgentState.Reply == "garbage\n" }, "garbage")
	if ev.AgentChanged || ev.AgentState.String() != "up drain 50%" || ev.AgentState.Reply != "garbage\n" {
		t.Fatalf("garbage changed the state: %+v", ev)
	}
	a.set("ready maxconn:7\n", false)
	wait(func(e Event) bool { return e.AgentState.String() == "up ready 50% maxconn:7" }, "ready maxconn:7")
	st := m.mustState(t, key)
	if !st.AgentOn || st.Agent.String() != "up ready 50% maxconn:7" || st.Health != l4.HealthUnknown {
		t.Fatalf("State %+v", st)
	}
	// A new agent port: what the old agent said is void.
	b := startAgent(t, "up\n")
	spec.Agent.Port = b.port()
	if err := m.Set(key, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 9), spec); err != nil {
		t.Fatal(err)
	}
	if st := m.mustState(t, key); st.Agent.Replied {
		t.Fatalf("state kept across an agent change: %+v", st.Agent)
	}
	wait(func(e Event) bool { return e.AgentState.String() == "up ready" }, "the new agent's up")
}

func (m *Manager) mustState(t *testing.T, key TargetKey) Status {
	t.Helper()
	st, ok := m.State(key)
	if !ok {
		t.Fatalf("%s not tracked", key)
	}
	return st
}
