// End-to-end test of the agent check (HAProxy agent-check): small real
// agents beside two Redis servers steer redis-benchmark's connections
// through the daemon, and status shows what each agent said.

package main

import (
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// agentPort is where the test's agents listen, on each backend's address.
const agentPort = 5555

// lineAgent answers every connection with its current line, then closes
// (what HAProxy's agents do).
type lineAgent struct {
	line atomic.Pointer[string]
}

func (a *lineAgent) say(line string) { a.line.Store(&line) }

// startLineAgent serves on the backend's address in its namespace.
func startLineAgent(t *testing.T, ns *testutil.Netns, addr string, line string) *lineAgent {
	t.Helper()
	a := &lineAgent{}
	a.say(line)
	var ln net.Listener
	ns.MustDo(t, func() (err error) { ln, err = net.Listen("tcp", addr); return err })
	t.Cleanup(func() { _ = ln.Close() })
	testutil.ServeConns(ln, func(c net.Conn) {
		defer c.Close()
		_, _ = c.Write([]byte(*a.line.Load()))
	})
	return a
}

// benchSet runs redis-benchmark through the VIP: n SETs, each on a new
// connection (-k 0), so that every request is a new pick. It fails the
// test on an error exit or an error line.
func benchSet(t *testing.T, tp *testutil.Topology, n int) {
	t.Helper()
	out, err := benchCmd(tp, n).CombinedOutput()
	checkBench(t, out, err)
}

func benchCmd(tp *testutil.Topology, n int) *exec.Cmd {
	return tp.Client.Command("redis-benchmark", "-h", tp.VIP.String(), "-p", "6379",
		"-n", strconv.Itoa(n), "-c", "8", "-k", "0", "-t", "set", "-q")
}

func checkBench(t *testing.T, out []byte, err error) {
	t.Helper()
	if err != nil || regexp.MustCompile(`(?i)\berror`).Match(out) {
		t.Fatalf("redis-benchmark: %v:\n%s", err, out)
	}
}

// flowsOf is each backend's flows so far.
func flowsOf(st plane.Status) map[string]uint64 {
	out := map[string]uint64{}
	for _, b := range vipNamed(st, "redis").Backends {
		out[b.ID] = b.Flows
	}
	return out
}

// TestAgentCheckSteersRedisBenchmark: two Redis servers, each with an
// agent on port 5555; round_robin over weight 100 each, redis checks.
// Each step changes what one agent says while redis-benchmark runs (no
// request may fail), waits until status shows it, then runs another
// redis-benchmark of 900 SETs, one connection each, and looks where
// the connections went:
//   - both "up 100%": both servers take connections;
//   - r1 "50%": r0 takes twice r1's (1.6..2.5 times), r1's effective
//     weight is 50;
//   - r1 garbage: nothing changes (50% stays), status shows the error;
//   - r1 "drain": r1 takes none;
//   - r1 "ready 100%", r0 "down #maintenance": r0 takes none, while its
//     redis check still says up; status shows why;
//   - r0 "up": r0 takes connections again.
//
// Every SET lands on a server exactly once: the servers' SET calls add
// up to every request sent, none rejected or failed.
func TestAgentCheckSteersRedisBenchmark(t *testing.T) {
	testutil.RequireTool(t, "redis-benchmark", "redis-cli")
	tp := testutil.NewTopology(t, 2)
	var rs [2]*testutil.Redis
	var agents [2]*lineAgent
	for i := range rs {
		rs[i] = testutil.StartRedisIn(t, tp.Backends[i], tp.BackendIP(i).String()+":6379", "")
		agents[i] = startLineAgent(t, tp.Backends[i], fmt.Sprintf("%s:%d", tp.BackendIP(i), agentPort), "up 100%\n")
	}
	cfg := newConf().vip("redis", ":6379", `algorithm = "round_robin"`, `connect_timeout = "500ms"`).
		health(`type = "redis"`, `interval = "500ms"`, `timeout = "500ms"`,
			fmt.Sprintf("agent_port = %d", agentPort), `agent_interval = "200ms"`, `agent_timeout = "200ms"`).
		at("r0", rs[0].Addr, "weight = 100").at("r1", rs[1].Addr, "weight = 100").String()
	lb := startLB(t, tp, cfg)
	lb.waitHealth(t, "redis", "r0", "up")
	lb.waitHealth(t, "redis", "r1", "up")
	agentIs := func(id, state string) func(plane.Status) bool {
		return func(st plane.Status) bool {
			a := backendOf(st, "redis", id).Agent
			return a != nil && a.State == state
		}
	}
	lb.waitStatus(t, 10*time.Second, "both agents up", func(st plane.Status) bool {
		return agentIs("r0", "up ready 100%")(st) && agentIs("r1", "up ready 100%")(st)
	})

	const perStep, bgRequests = 900, 1500
	sent := 0
	// step says line through agent i while redis-benchmark runs, waits
	// for the status to show want (and cond, if any), then measures.
	step := func(name string, i int, line string, want func(plane.Status) bool) (d0, d1 uint64) {
		t.Helper()
		bg := benchCmd(tp, bgRequests)
		var bgOut strings.Builder
		bg.Stdout, bg.Stderr = &bgOut, &bgOut
		if err := bg.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		agents[i].say(line)
		lb.waitStatus(t, 15*time.Second, name, want)
		err := bg.Wait()
		checkBench(t, []byte(bgOut.String()), err)
		sent += bgRequests
		before := flowsOf(lb.status(t))
		benchSet(t, tp, perStep)
		sent += perStep
		after := flowsOf(lb.status(t))
		d0, d1 = after["r0"]-before["r0"], after["r1"]-before["r1"]
		if d0+d1 < perStep {
			t.Fatalf("%s: %d+%d connections for %d requests", name, d0, d1, perStep)
		}
		t.Logf("%s: r0 %d, r1 %d connections", name, d0, d1)
		return d0, d1
	}

	d0, d1 := step("both up", 0, "up 100%\n", agentIs("r0", "up ready 100%"))
	if d0 == 0 || d1 == 0 {
		t.Fatalf("both up: r0 %d r1 %d, want both", d0, d1)
	}

	d0, d1 = step("r1 at 50%", 1, "50%\n", func(st plane.Status) bool {
		return agentIs("r1", "up ready 50%")(st) && backendOf(st, "redis", "r1").EffectiveWeight == 50
	})
	if r := float64(d0) / float64(max(d1, 1)); r < 1.6 || r > 2.5 {
		t.Fatalf("r1 at 50%%: r0 %d r1 %d, ratio %.2f, want about 2", d0, d1, r)
	}

	step("r1 garbage", 1, "HTTP/1.1 400 Bad Request\r\n", func(st plane.Status) bool {
		a := backendOf(st, "redis", "r1").Agent
		return a != nil && strings.Contains(a.Error, "agent reply not understood") && a.State == "up ready 50%" &&
			backendOf(st, "redis", "r1").EffectiveWeight == 50
	})

	d0, d1 = step("r1 drain", 1, "drain\n", agentIs("r1", "up drain 50%"))
	if d1 != 0 || d0 < perStep {
		t.Fatalf("r1 drain: r0 %d r1 %d, want all on r0", d0, d1)
	}
	if txt := lb.statusText(t); !strings.Contains(txt, "agent up drain 50%") {
		t.Fatalf("status text does not show the agent:\n%s", txt)
	}

	agents[1].say("ready 100%\n")
	lb.waitStatus(t, 15*time.Second, "r1 ready", agentIs("r1", "up ready 100%"))
	d0, d1 = step("r0 down", 0, "down #maintenance\n", func(st plane.Status) bool {
		b := backendOf(st, "redis", "r0")
		return agentIs("r0", "down ready 100%")(st) && b.Agent.Why == "agent said down: maintenance" && b.Health == "up" && b.EffectiveWeight == 0
	})
	if d0 != 0 || d1 < perStep {
		t.Fatalf("r0 down: r0 %d r1 %d, want all on r1", d0, d1)
	}

	d0, d1 = step("r0 up", 0, "up\n", agentIs("r0", "up ready 100%"))
	if d0 == 0 || d1 == 0 {
		t.Fatalf("r0 up again: r0 %d r1 %d, want both", d0, d1)
	}

	var total int
	for i := range rs {
		c := redisCalls(t, tp.Backends[i], rs[i])["set"]
		if c[1] != 0 {
			t.Fatalf("r%d: %d SETs rejected or failed", i, c[1])
		}
		total += c[0]
	}
	if total != sent {
		t.Fatalf("servers took %d SETs, redis-benchmark sent %d", total, sent)
	}
}
