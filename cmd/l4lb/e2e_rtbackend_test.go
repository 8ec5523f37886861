// End to end: `l4lb backend add|set|remove` under redis-benchmark through
// proxy and xdp VIPs, the state file across a kill and a restart, a
// corrupt state file refused, reloads that keep or end the changes, and
// the file's words for a refused change.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// benchLoop runs rounds of redis-benchmark from a namespace against a VIP
// until finish: each round opens a new connection per request (-k 0), so
// every change of the backend set meets new connections, and must exit
// 0 without an error line (redis-benchmark stops at the first error
// reply or lost connection).
type benchLoop struct {
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	rounds   int
	failures []string
}

// benchRequests is each round's SETs (and as many GETs).
const benchRequests = 600

func startBenchLoop(t *testing.T, ns *testutil.Netns, host string, port int) *benchLoop {
	t.Helper()
	testutil.RequireTool(t, "redis-benchmark", "redis-cli")
	// Short connections: let the client reuse ports in TIME_WAIT.
	ns.MustExec(t, "sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1", "net.ipv4.ip_local_port_range=10000 65000")
	b := &benchLoop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		for round := 0; round < 200; round++ { // bounded: about 2 s a round
			select {
			case <-b.stop:
				return
			default:
			}
			out, err := ns.Command("redis-benchmark", "-h", host, "-p", strconv.Itoa(port), "-n", strconv.Itoa(benchRequests),
				"-c", "10", "-k", "0", "-t", "set,get", "-q").CombinedOutput()
			b.mu.Lock()
			b.rounds++
			if err != nil || regexp.MustCompile(`(?i)\berror`).Match(out) {
				b.failures = append(b.failures, fmt.Sprintf("round %d: %v: %s", b.rounds, err, out))
			}
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() { b.finish() })
	return b
}

// waitRounds waits until n more rounds have ended.
func (b *benchLoop) waitRounds(t *testing.T, n int) {
	t.Helper()
	b.mu.Lock()
	want := b.rounds + n
	b.mu.Unlock()
	testutil.Eventually(t, time.Duration(n)*60*time.Second, fmt.Sprintf("%d redis-benchmark rounds", n), func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.rounds >= want
	})
}

// finish stops the loop after its round and returns the rounds run and
// the failed ones.
func (b *benchLoop) finish() (int, []string) {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rounds, b.failures
}

// setCalls sums the SET calls, and the rejected or failed commands, on
// the servers.
func setCalls(t *testing.T, servers map[*testutil.Netns]*testutil.Redis) (sets, bad int) {
	t.Helper()
	for ns, r := range servers {
		for cmd, c := range redisCalls(t, ns, r) {
			if cmd == "set" {
				sets += c[0]
			}
			bad += c[1]
		}
	}
	return sets, bad
}

// rtRedisConf is VIP redis over r0 and r1 (topology backends 0 and 1),
// round robin, redis probes, with stateFile as [global] state_file.
func rtRedisConf(stateFile string, r0Keys ...string) string {
	return newConf(fmt.Sprintf("state_file = %q", stateFile), `drain_timeout = "3s"`).
		vip("redis", ":6379", `algorithm = "round_robin"`, `connect_timeout = "500ms"`).
		health(`type = "redis"`, `interval = "300ms"`, `timeout = "300ms"`, "rise = 1").
		named("r0", 0, 6379, r0Keys...).named("r1", 1, 6379).String()
}

// TestBackendRunTimeRedisBenchmark: redis-benchmark (a new connection per
// request) runs through a proxy VIP while `l4lb backend` adds r2, sets
// r1's weight to 0 and r0's max_conns, and removes r0 (drained first):
// every round exits 0 and the servers saw exactly the SETs sent, none
// rejected or failed; r2 takes connections once added, r1 none after its
// weight is 0, r0 none after its removal. Status marks the changes with
// who and when, --show-config shows the config in force, check --diff
// lists them as kept by a reload. After a SIGKILL the restarted l4lb
// restores them from the state file and serves the next round without an
// error; a corrupt state file is refused with a log line, kept aside,
// and l4lb starts from the file alone and serves.
func TestBackendRunTimeRedisBenchmark(t *testing.T) {
	testutil.RequireTool(t, "redis-benchmark", "redis-cli")
	tp := testutil.NewTopology(t, 3)
	servers := map[*testutil.Netns]*testutil.Redis{}
	for i := range 3 {
		servers[tp.Backends[i]] = testutil.StartRedisIn(t, tp.Backends[i], tp.BackendIP(i).String()+":6379", "")
	}
	tp.LB.MustExec(t, "sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1", "net.ipv4.ip_local_port_range=10000 65000")
	stateFile := filepath.Join(t.TempDir(), "state", "l4lb.state")
	config := rtRedisConf(stateFile)
	lb := startLB(t, tp, config)
	lb.waitHealth(t, "redis", "r0", "up")
	lb.waitHealth(t, "redis", "r1", "up")

	load := startBenchLoop(t, tp.Client, tp.VIP.String(), 6379)
	load.waitRounds(t, 1)

	// add: r2 takes new connections.
	out := lb.verb(t, "backend", "add", "redis", tp.BackendIP(2).String()+":6379", "--name", "r2")
	if !strings.Contains(out, "r2") || !strings.Contains(out, "added") {
		t.Fatalf("backend add: %q", out)
	}
	lb.waitStatus(t, 30*time.Second, "r2 up and taking connections", func(st plane.Status) bool {
		b := backendOf(st, "redis", "r2")
		return b.Health == "up" && b.Flows > 0
	})

	// set: r1's weight 0 takes it out of new connections; r0 gets a cap.
	lb.verb(t, "backend", "set", "redis", "r1", "--weight", "0")
	lb.verb(t, "backend", "set", "redis", "r0", "--max-conns", "50")
	if b := lb.backend(t, "redis", "r0"); b.MaxFlows != 50 || !strings.Contains(b.Change, "max_conns 50 (file 0)") {
		t.Fatalf("r0 after set --max-conns 50: max %d, change %q", b.MaxFlows, b.Change)
	}
	time.Sleep(300 * time.Millisecond) // picks made before the set
	r1Flows := lb.backend(t, "redis", "r1").Flows
	load.waitRounds(t, 1)
	if b := lb.backend(t, "redis", "r1"); b.Flows != r1Flows || b.Weight != 0 || b.Change != "weight 0 (file 100)" || b.ChangeBy == "" || b.ChangeSince.IsZero() {
		t.Fatalf("r1 after set --weight 0: flows %d -> %d, weight %d, change %q by %q at %v", r1Flows, b.Flows, b.Weight, b.Change, b.ChangeBy, b.ChangeSince)
	}

	// remove: r0 drains, then goes; it gets nothing after.
	var res plane.BackendChangeResult
	out = lb.verb(t, "backend", "remove", "redis", "r0", "--timeout", "20s", "--json")
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Change != "removed" || res.LeftFlows != 0 {
		t.Fatalf("backend remove: %v %+v", err, res)
	}
	st := lb.status(t)
	if b := backendOf(st, "redis", "r0"); b.ID != "" {
		t.Fatalf("r0 still listed after its removal: %+v", b)
	}
	load.waitRounds(t, 1)
	rounds, failures := load.finish()
	if len(failures) > 0 {
		t.Fatalf("%d of %d redis-benchmark rounds failed:\n%s", len(failures), rounds, strings.Join(failures, "\n"))
	}
	if sets, bad := setCalls(t, servers); sets != rounds*benchRequests || bad != 0 {
		t.Fatalf("servers saw %d SETs (%d rejected or failed), want %d rounds x %d and none", sets, bad, rounds, benchRequests)
	}
	t.Logf("%d redis-benchmark rounds of %d SET + %d GET, a connection each, across add, set and remove: 0 errors", rounds, benchRequests, benchRequests)

	// Who and when, the config in force, a reload's view.
	st = lb.status(t)
	if len(st.BackendChanges) != 3 {
		t.Fatalf("backend_changes %+v, want r2 added, r1 set, r0 removed", st.BackendChanges)
	}
	text := lb.statusText(t)
	for _, want := range []string{"run-time backend changes on top of the file (3)", "r0: removed", "r2: added " + tp.BackendIP(2).String() + ":6379", "/RUNTIME", "weight 0 (file 100) at run time by"} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}
	shown := lb.verb(t, "status", "--show-config")
	if !strings.Contains(shown, "# In force: the file with 3 run-time backend changes on top") || !strings.Contains(shown, "#  vip redis: backend r0: removed, by ") {
		t.Errorf("--show-config does not head the config with the changes from the file:\n%s", shown)
	}
	if strings.Contains(shown, `name = "r0"`) || !strings.Contains(shown, `name = "r2"`) || !regexp.MustCompile(`name = "r1"\s+address = "[^"]+"\s+weight = 0`).MatchString(shown) {
		t.Errorf("--show-config is not the config in force:\n%s", shown)
	}
	diff, errOut, code := l4lbCmd(t, "check", "--diff", "--socket", lb.sock, lb.cfg)
	if code != 0 || strings.Count(diff, "kept by the reload") != 3 || !strings.Contains(diff, "with this file:\nno changes\n") {
		t.Errorf("check --diff with the file unchanged: exit %d\n%s%s", code, diff, errOut)
	}

	// The state file survives a SIGKILL: the next l4lb restores the
	// changes, and the drain an operator set.
	lb.verb(t, "drain", "redis", "r1", "--reason", "disk swap")
	lb.signal(t, syscall.SIGKILL)
	<-lb.exited
	lb = startLB(t, tp, config)
	lb.waitLog(t, "state file restored")
	lb.waitHealth(t, "redis", "r2", "up")
	st = lb.status(t)
	if len(st.BackendChanges) != 3 || backendOf(st, "redis", "r0").ID != "" || backendOf(st, "redis", "r1").Weight != 0 ||
		st.StateFile == nil || !strings.Contains(st.StateFile.Restored, "3 backend changes") {
		t.Fatalf("after a restart: changes %+v, state file %+v, backends %+v", st.BackendChanges, st.StateFile, mustVIP(t, st, "redis").Backends)
	}
	oneRound(t, tp.Client, tp.VIP.String(), 6379)
	if b := lb.backend(t, "redis", "r1"); b.Flows != 0 || b.Override != "drain" || !strings.Contains(b.OverrideBy, "disk swap") {
		t.Fatalf("r1 (weight 0 and a drain restored) took %d connections; override %q by %q", b.Flows, b.Override, b.OverrideBy)
	}

	// A corrupt state file: refused, kept aside, l4lb starts from the file.
	lb.signal(t, syscall.SIGKILL)
	<-lb.exited
	if err := os.WriteFile(stateFile, []byte(`{"format": "l4lb-state", "schema": 1, "sta`), 0o600); err != nil {
		t.Fatal(err)
	}
	lb = startLB(t, tp, config)
	lb.waitLog(t, "state file refused")
	st = lb.status(t)
	if len(st.BackendChanges) != 0 || backendOf(st, "redis", "r0").ID == "" || backendOf(st, "redis", "r2").ID != "" ||
		st.StateFile == nil || !strings.Contains(st.StateFile.Refused, "corrupt") {
		t.Fatalf("after a corrupt state file: changes %+v, state file %+v", st.BackendChanges, st.StateFile)
	}
	if _, err := os.Stat(stateFile + ".refused"); err != nil {
		t.Fatalf("the refused file is not kept aside: %v", err)
	}
	lb.waitHealth(t, "redis", "r0", "up")
	oneRound(t, tp.Client, tp.VIP.String(), 6379)
}

// oneRound runs one redis-benchmark round that must not fail.
func oneRound(t *testing.T, ns *testutil.Netns, host string, port int) {
	t.Helper()
	out, err := ns.Command("redis-benchmark", "-h", host, "-p", strconv.Itoa(port), "-n", strconv.Itoa(benchRequests),
		"-c", "10", "-t", "set,get", "-q").CombinedOutput()
	if err != nil || regexp.MustCompile(`(?i)\berror`).Match(out) {
		t.Fatalf("redis-benchmark: %v:\n%s", err, out)
	}
}

// TestBackendRunTimeReloadAndWords: a reload with the file unchanged
// keeps the run-time changes; one that changes a set backend in the file
// ends that change (logged) and keeps the others; set --reset gives the
// file's values back. A refused change exits 1 with the words `l4lb
// check` gives the same backend written in the file (a bad address, the
// VIP's own listener, a weight out of range), and the admin API answers
// it 422 with a JSON error.
func TestBackendRunTimeReloadAndWords(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	file := func(be1Weight int) string {
		return newConf().vip("a", ":80", `algorithm = "round_robin"`).health(`type = "none"`).
			named("be0", 0, 7000).named("be1", 1, 7000, fmt.Sprintf("weight = %d", be1Weight)).String()
	}
	lb := startLB(t, tp, file(100))
	lb.verb(t, "backend", "add", "a", tp.BackendIP(2).String()+":7000", "--name", "be2", "--weight", "300")
	lb.verb(t, "backend", "set", "a", "be1", "--weight", "0")
	lb.verb(t, "backend", "set", "a", "be0", "--weight", "50")
	if seen := backendsSeen(t, tp, 80, 70); seen["be1"] != 0 || seen["be2"] < 3*seen["be0"]-10 {
		t.Fatalf("70 connections after the changes: %v, want none on be1 and be2 ~6x be0", seen)
	}
	lb.reloadOK(t)
	if st := lb.status(t); len(st.BackendChanges) != 3 || backendOf(st, "a", "be1").Weight != 0 {
		t.Fatalf("a reload of the same file: changes %+v", st.BackendChanges)
	}
	lb.writeConfig(t, file(40))
	diff := lb.verb(t, "check", "--diff", "--socket", lb.sock, lb.cfg)
	if !strings.Contains(diff, "backend be1: set weight 0") || !strings.Contains(diff, "ENDED by the reload: the file changed the backend") {
		t.Fatalf("check --diff with be1 changed in the file:\n%s", diff)
	}
	lb.reloadOK(t)
	lb.waitLog(t, "run-time backend change ended")
	st := lb.status(t)
	if len(st.BackendChanges) != 2 || backendOf(st, "a", "be1").Weight != 40 || backendOf(st, "a", "be2").Weight != 300 || backendOf(st, "a", "be0").Weight != 50 {
		t.Fatalf("after a reload that changed be1: changes %+v, backends %+v", st.BackendChanges, mustVIP(t, st, "a").Backends)
	}
	// What a set costs, answered (the API call, not the CLI's start):
	// the median of 21, alternating weights.
	var took []time.Duration
	for i := range 21 {
		w := 50 + i%2
		start := time.Now()
		if _, err := (admin.Client{Socket: lb.sock}).Do(context.Background(), "POST", admin.BackendPath("a", "be0", "set"), admin.BackendSetRequest{Weight: &w}, nil); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	if took[10] > 2*time.Second {
		t.Fatalf("backend set: median %v of 21", took[10])
	}
	t.Logf("backend set through the admin API (race build): median %v, max %v of 21", took[10], took[20])
	lb.verb(t, "backend", "set", "a", "be0", "--reset")
	if st := lb.status(t); len(st.BackendChanges) != 1 || backendOf(st, "a", "be0").Weight != 100 || backendOf(st, "a", "be0").Change != "" {
		t.Fatalf("after --reset: changes %+v", st.BackendChanges)
	}

	// remove drains first: while a connection to be0 is open the backend
	// stays, drained (no new connection), and the remove waits; it
	// returns once that connection ends, well before its deadline.
	held := dialBackend(t, tp, 80, "be0")
	type removal struct {
		res  plane.BackendChangeResult
		err  string
		code int
	}
	removed := make(chan removal, 1)
	go func() {
		out, errOut, code := lb.run(t, "backend", "remove", "a", "be0", "--timeout", "60s", "--json")
		var r removal
		r.code, r.err = code, errOut
		_ = json.Unmarshal([]byte(out), &r.res)
		removed <- r
	}()
	lb.waitStatus(t, 10*time.Second, "be0 drained by the remove", func(st plane.Status) bool { return backendOf(st, "a", "be0").Override == "drain" })
	if seen := backendsSeen(t, tp, 80, 20); seen["be0"] != 0 {
		t.Fatalf("be0, draining for its removal, took new connections: %v", seen)
	}
	time.Sleep(time.Second)
	select {
	case r := <-removed:
		t.Fatalf("remove returned while be0 still had a connection: %+v %s", r.res, r.err)
	default:
	}
	if err := held.echo("still here"); err != nil {
		t.Fatalf("the connection to be0 broke during its drain: %v", err)
	}
	held.Close()
	select {
	case r := <-removed:
		if r.code != 0 || r.res.Change != "removed" || r.res.DrainedFrom != 1 || r.res.LeftFlows != 0 || r.res.Waited < 1 || r.res.Waited > 30 {
			t.Fatalf("remove after the drain: exit %d %+v %s", r.code, r.res, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("remove did not return after be0's last connection closed")
	}
	if b := backendOf(lb.status(t), "a", "be0"); b.ID != "" {
		t.Fatalf("be0 listed after its removal: %+v", b)
	}
	// At the deadline the backend goes with its connection still open,
	// which carries on as after a reload's removal.
	held = dialBackend(t, tp, 80, "be2")
	out := lb.verb(t, "backend", "remove", "a", "be2", "--timeout", "1s", "--json")
	var res plane.BackendChangeResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.LeftFlows != 1 || res.Waited < 1 {
		t.Fatalf("remove at the deadline: %v %+v", err, res)
	}
	if err := held.echo("after the removal"); err != nil {
		t.Fatalf("be2's open connection broke at its removal: %v", err)
	}

	// The file's words for the same mistakes.
	for _, tc := range []struct {
		name  string
		args  []string
		toml  string // the same backend in the file
		words string
	}{
		{"bad address", []string{"198.18.1.300:7000"}, `address = "198.18.1.300:7000"`, "is not ip:port"},
		{"self-loop", []string{topoVIP + ":80"}, `address = "` + topoVIP + `:80"`, "is this VIP's own listener"},
		{"weight out of range", []string{tp.BackendIP(2).String() + ":7001", "--weight", "1001"}, `address = "` + tp.BackendIP(2).String() + `:7001"` + "\n  weight = 1001", "weight"},
	} {
		_, errOut, code := lb.run(t, "backend", append([]string{"add", "a"}, tc.args...)...)
		bad := filepath.Join(t.TempDir(), "bad.toml")
		src := strings.Replace(file(40), "@ADMIN@", "/run/l4lb-test-unused.sock", 1) + "  [[vip.backend]]\n  " + tc.toml + "\n"
		if err := os.WriteFile(bad, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		_, fileErr, fileCode := l4lbCmd(t, "check", bad)
		// The file's problem line, "FILE:LINE: vip "a": KEY: MESSAGE":
		// the change's error must hold the same message.
		var msg string
		for _, line := range strings.Split(fileErr, "\n") {
			if strings.Contains(line, tc.words) && strings.HasPrefix(line, bad) {
				msg = line[strings.Index(line, ".backend[2].")+len(".backend[2]."):]
				msg = msg[strings.Index(msg, ": ")+2:]
			}
		}
		if code != 1 || fileCode != 1 || msg == "" || !strings.Contains(errOut, msg) {
			t.Errorf("%s: backend add exit %d %q; check of the file exit %d %q (message %q)", tc.name, code, errOut, fileCode, fileErr, msg)
		}
	}
	_, err := admin.Client{Socket: lb.sock}.Do(context.Background(), "POST", admin.BackendsPath("a"), admin.BackendAddRequest{Address: "nonsense"}, nil)
	var se *admin.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusUnprocessableEntity || !strings.Contains(se.Error(), "is not ip:port") {
		t.Fatalf("POST /vips/a/backends with a bad address: %v, want 422 with the file's words", err)
	}
	_, err = admin.Client{Socket: lb.sock}.Do(context.Background(), "POST", admin.BackendPath("a", "nope", "set"), admin.BackendSetRequest{Weight: new(int)}, nil)
	if !errors.As(err, &se) || se.Status != http.StatusNotFound {
		t.Fatalf("set of an unknown backend: %v, want 404", err)
	}
}

// TestBackendRunTimeXDP: the same verbs on an xdp VIP (IPIP to the
// backends, DSR), under redis-benchmark from the client: be2 added takes
// SETs, be1 at weight 0 takes (almost) none of the later ones, be0
// removed none after its removal, every round exits 0 and the servers
// saw every SET exactly once.
func TestBackendRunTimeXDP(t *testing.T) {
	testutil.RequireTool(t, "redis-benchmark", "redis-cli")
	n := newXDPNet(t, 3)
	servers := map[*testutil.Netns]*testutil.Redis{}
	var rs []*testutil.Redis
	for _, b := range n.Backends {
		r := testutil.StartRedisIn(t, b.NS, "0.0.0.0:6379", "")
		servers[b.NS] = r
		rs = append(rs, r)
	}
	sets := func(i int) int { return redisCalls(t, n.Backends[i].NS, rs[i])["set"][0] }
	name := func(i int) string { return n.Backends[i].Name }
	c := newConf(`drain_timeout = "2s"`).raw(n.xdpTable(""))
	c.vip("r", netip.AddrPortFrom(n.vip4.Addr(), 6379).String(), `mode = "xdp"`, `algorithm = "maglev"`).health(xdpProbe...)
	lb := startLBIn(t, n.LB.NS, n.backendsOn(c, 6379, false, 0, 1).String())
	lb.waitHealth(t, "r", name(1), "up")

	load := startBenchLoop(t, n.Client.NS, n.vip4.Addr().String(), 6379)
	load.waitRounds(t, 1)
	lb.verb(t, "backend", "add", "r", netip.AddrPortFrom(n.Backends[2].Addr4, 6379).String(), "--name", name(2))
	lb.waitHealth(t, "r", name(2), "up")
	load.waitRounds(t, 2)
	if got := sets(2); got == 0 {
		t.Fatalf("be2, added, took no SET in two rounds")
	}

	lb.verb(t, "backend", "set", "r", name(1), "--weight", "0")
	load.waitRounds(t, 1) // the round under way may have picked be1
	be1, all := sets(1), setTotal(t, servers)
	load.waitRounds(t, 2)
	if more, total := sets(1)-be1, setTotal(t, servers)-all; more*100 > total {
		t.Fatalf("be1 at weight 0 took %d of %d SETs, want none (1%% for a reused port's pinned flow)", more, total)
	}

	lb.verb(t, "backend", "remove", "r", name(0), "--timeout", "5s")
	if b := backendOf(lb.status(t), "r", name(0)); b.ID != "" {
		t.Fatalf("be0 still listed after its removal: %+v", b)
	}
	load.waitRounds(t, 1)
	be0 := sets(0)
	load.waitRounds(t, 1)
	rounds, failures := load.finish()
	if len(failures) > 0 {
		t.Fatalf("%d of %d redis-benchmark rounds failed:\n%s", len(failures), rounds, strings.Join(failures, "\n"))
	}
	if got := sets(0); got != be0 {
		t.Fatalf("be0 took %d SETs after its removal", got-be0)
	}
	if total, bad := setCalls(t, servers); total != rounds*benchRequests || bad != 0 {
		t.Fatalf("servers saw %d SETs (%d rejected or failed), want %d rounds x %d and none", total, bad, rounds, benchRequests)
	}
	if st := lb.status(t); len(st.BackendChanges) != 3 || backendOf(st, "r", name(2)).Change != "added" {
		t.Fatalf("changes %+v", st.BackendChanges)
	}
	t.Logf("xdp: %d redis-benchmark rounds across add, set weight 0 and remove: 0 errors; SETs %s %d, %s %d, %s %d", rounds, name(0), sets(0), name(1), sets(1), name(2), sets(2))
}

// setTotal is the SETs all servers saw.
func setTotal(t *testing.T, servers map[*testutil.Netns]*testutil.Redis) int {
	t.Helper()
	n, _ := setCalls(t, servers)
	return n
}

// TestBackendRunTimeUpgrade: without a state file, `l4lb upgrade` hands
// the run-time backend changes to the new process with the backends'
// state: the added backend and the weight set stay in force there.
func TestBackendRunTimeUpgrade(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	lb := startUpgradable(t, tp.LB, newConf().vip("a", ":80", `algorithm = "round_robin"`).health(`type = "none"`).backends(2, 7000).String())
	lb.verb(t, "backend", "add", "a", tp.BackendIP(2).String()+":7000", "--name", "be2")
	lb.verb(t, "backend", "set", "a", "be1", "--weight", "0")
	pid, _ := lb.upgradeOK(t)
	st := lb.status(t)
	if st.Process.PID != pid || len(st.BackendChanges) != 2 || backendOf(st, "a", "be2").Change != "added" || backendOf(st, "a", "be1").Weight != 0 {
		t.Fatalf("after the upgrade (pid %d): pid %d, changes %+v", pid, st.Process.PID, st.BackendChanges)
	}
	if seen := backendsSeen(t, tp, 80, 20); seen["be1"] != 0 || seen["be2"] == 0 {
		t.Fatalf("new connections after the upgrade: %v, want be0 and be2 only", seen)
	}
}

// TestStateFileKeepsHealth: a backend that health took down stays down
// across a SIGKILL and a restart when the state file says so, although
// its server is back by then (a fresh l4lb counts a backend up until its
// checks say otherwise), and comes up only through its own checks (rise
// 3 at 2 s); new connections meanwhile avoid it. Without the state
// file's health the restarted l4lb would send a third of them there at
// once.
func TestStateFileKeepsHealth(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	for i := range 2 { // be2 serves nothing yet: its checks fail
		namedEcho(t, tp, i, 7000)
	}
	stateFile := filepath.Join(t.TempDir(), "l4lb.state")
	config := newConf(fmt.Sprintf("state_file = %q", stateFile)).
		vip("a", ":80", `algorithm = "round_robin"`).
		health(`type = "tcp"`, `interval = "2s"`, `timeout = "1s"`, "rise = 3", "fall = 1").
		backends(3, 7000).String()
	lb := startLB(t, tp, config)
	lb.waitHealth(t, "a", "be2", "down")
	testutil.Eventually(t, 10*time.Second, "the state file to hold be2 down", func() bool {
		b, err := os.ReadFile(stateFile)
		return err == nil && regexp.MustCompile(`"backend":\s*"be2"[^}]*"down":\s*true`).Match(b)
	})
	lb.signal(t, syscall.SIGKILL)
	<-lb.exited

	namedEcho(t, tp, 2, 7000) // be2 is back before l4lb is
	lb = startLB(t, tp, config)
	lb.waitLog(t, "state file restored")
	restarted := time.Now()
	if b := lb.backend(t, "a", "be2"); b.Health != "down" {
		t.Fatalf("be2 after the restart: health %q, want down (from the state file)", b.Health)
	}
	if seen := backendsSeen(t, tp, 80, 12); seen["be2"] != 0 || seen["be0"]+seen["be1"] != 12 {
		t.Fatalf("new connections after the restart went to %v, want be0 and be1 only", seen)
	}
	lb.waitStatus(t, 30*time.Second, "be2 up through its own checks", func(st plane.Status) bool {
		return backendOf(st, "a", "be2").Health == "up"
	})
	if took := time.Since(restarted); took < 3*time.Second {
		t.Fatalf("be2 came up %v after the restart: not through rise 3 at 2 s", took)
	}
}
