// End to end: thousands of WebSocket clients hold connections through a
// VIP and exchange messages while an operator drains a backend, reloads
// an unrelated change and a backend dies.

package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/internal/testutil/wsecho"
)

const (
	wsClients    = 5000             // held connections (the target of issue 12)
	wsInterval   = time.Second      // each client sends a message this often
	wsAnonLimit  = 22 << 10         // KiB: l4lb's private memory (RssAnon) holding them; see below
	wsEchoWithin = 5 * time.Second  // a message's echo must come back within this
	wsPort       = 8080             // the backends' WebSocket echo port
	wsVIPAddr    = "198.18.2.10:80" // the VIP the clients use
	// Deadlines, not measures (each run logs what it took): every client
	// finishes a few rounds, the killed backend's clients are back. The
	// kill's clients were back in 2-4 s on an idle machine; under make
	// stress (both cores busy beside the whole suite) 15 s once ran out
	// with nothing wrong but time, so the bound is a minute.
	wsRoundWait  = 30 * time.Second
	wsKillWait   = time.Minute
	wsDialPar    = 32                     // parallel dials in the client namespace
	wsDialTries  = 20                     // a reconnecting client tries this often
	wsRetryPause = 100 * time.Millisecond // between its tries
)

// wsConf: the WebSocket VIP over three backends, least_conn, with a
// WebSocket health check, and an unrelated VIP whose idle_timeout
// (otherIdle) the reload changes.
func wsConf(otherIdle string) string {
	return newConf(`drain_timeout = "1s"`).
		vip("ws", ":80", `protocol = "tcp"`, `algorithm = "least_conn"`, `idle_timeout = "1h"`).
		health(`type = "http"`, `websocket = true`, `interval = "500ms"`, `timeout = "400ms"`).backends(3, 8080).
		vip("other", ":81", `protocol = "tcp"`, fmt.Sprintf("idle_timeout = %q", otherIdle)).health(`type = "none"`).named("o0", 0, 8081).String()
}

// testserverBinary builds scripts/testserver (its -ws flag serves
// wsecho) once per test process.
var testserverBinary = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "testserver")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/l4lb/l4lb/scripts/testserver").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build testserver: %v: %s", err, out)
	}
	return bin, nil
})

// wsBackend starts a WebSocket echo server process named be<i> in backend
// i's namespace and waits until it answers; its own process, so that
// killing it ends exactly its connections, and so that its descriptors
// do not count against this test process's limit.
func wsBackend(t *testing.T, tp *testutil.Topology, i int) *exec.Cmd {
	t.Helper()
	bin, err := testserverBinary()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("%s:%d", tp.BackendIP(i), wsPort)
	cmd := tp.Backends[i].Command(bin, "-name", fmt.Sprintf("be%d", i), "-http", "", "-ws", addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	testutil.Eventually(t, 10*time.Second, "backend "+addr+" to answer an upgrade", func() bool {
		var c *wsecho.Conn
		err := tp.LB.Do(func() (err error) { c, err = wsecho.Dial(addr, time.Second); return err })
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return cmd
}

// wsEnd is a client's connection ending under it.
type wsEnd struct {
	at      time.Time // the message that failed was sent
	back    time.Time // the client was connected again
	backend string
	err     error
}

// wsSample is one message's echo time.
type wsSample struct {
	at time.Time
	d  time.Duration
}

// wsClient is one WebSocket client of the hold; its goroutine owns conn
// and lat, the others are read by the test while it runs.
type wsClient struct {
	id      int
	conn    *wsecho.Conn
	lat     []wsSample
	backend atomic.Pointer[string]
	ok      atomic.Int64 // messages echoed
	mu      sync.Mutex
	ends    []wsEnd // guarded by mu
	lost    error   // guarded by mu: could not reconnect
}

// wsHold runs the clients.
type wsHold struct {
	dials     chan wsDialReq
	clients   []*wsClient
	stop      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

type wsDialReq struct {
	reply chan wsDialRes
}

type wsDialRes struct {
	c   net.Conn
	err error
}

// startWSDialers runs par goroutines in the client namespace that open
// TCP connections to the VIP on request (a socket belongs to the
// namespace of the thread that made it); the handshakes run on the
// requester's goroutine.
func (h *wsHold) startDialers(t *testing.T, tp *testutil.Topology) {
	h.dials = make(chan wsDialReq)
	for range wsDialPar {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			err := tp.Client.Do(func() error {
				for {
					select {
					case <-h.stop:
						return nil
					case r := <-h.dials:
						c, err := net.DialTimeout("tcp4", wsVIPAddr, wsEchoWithin)
						r.reply <- wsDialRes{c, err}
					}
				}
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
}

// dialTCP opens a TCP connection to the VIP from the client namespace.
func (h *wsHold) dialTCP() (net.Conn, error) {
	r := wsDialReq{reply: make(chan wsDialRes, 1)}
	select {
	case h.dials <- r:
	case <-h.stop:
		return nil, fmt.Errorf("stopped")
	}
	res := <-r.reply
	return res.c, res.err
}

// dial opens a WebSocket through the VIP.
func (h *wsHold) dial() (*wsecho.Conn, error) {
	c, err := h.dialTCP()
	if err != nil {
		return nil, err
	}
	ws, err := wsecho.Handshake(c, wsVIPAddr, time.Now().Add(wsEchoWithin))
	if err != nil {
		c.Close()
	}
	return ws, err
}

// startWSHold opens n WebSockets through the VIP, then starts every
// client's message loop, their sends spread evenly over one interval.
func startWSHold(t *testing.T, tp *testutil.Topology, n int) *wsHold {
	t.Helper()
	h := &wsHold{stop: make(chan struct{}), clients: make([]*wsClient, n)}
	h.startDialers(t, tp)
	t.Cleanup(h.close)
	var next atomic.Int64
	errs := make(chan error, wsDialPar)
	var wg sync.WaitGroup
	for range wsDialPar {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				c, err := h.dial()
				if err != nil {
					errs <- fmt.Errorf("client %d: %w", i, err)
					return
				}
				cl := &wsClient{id: i, conn: c}
				cl.backend.Store(&c.Backend)
				h.clients[i] = cl
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	start := time.Now()
	for i, cl := range h.clients {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			cl.run(h, start.Add(wsInterval*time.Duration(i)/time.Duration(n)))
		}()
	}
	return h
}

func (h *wsHold) close() {
	h.closeOnce.Do(func() { close(h.stop) })
	h.wg.Wait()
	for _, cl := range h.clients {
		if cl != nil && cl.conn != nil {
			cl.conn.Close()
		}
	}
}

// run sends a message every interval and checks its echo; when the
// connection fails it records the end and reconnects through the VIP.
func (cl *wsClient) run(h *wsHold, next time.Time) {
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	var msg []byte
	for seq := 0; ; seq++ {
		select {
		case <-h.stop:
			return
		case <-timer.C:
		}
		next = next.Add(wsInterval)
		timer.Reset(time.Until(next))
		msg = fmt.Appendf(msg[:0], "client %d message %d", cl.id, seq)
		t0 := time.Now()
		err := cl.conn.Echo(msg, t0.Add(wsEchoWithin))
		if err == nil {
			cl.lat = append(cl.lat, wsSample{t0, time.Since(t0)})
			cl.ok.Add(1)
			continue
		}
		select {
		case <-h.stop:
			return
		default:
		}
		end := wsEnd{at: t0, backend: cl.conn.Backend, err: err}
		cl.conn.Close()
		ok := cl.reconnect(h)
		end.back = time.Now()
		cl.mu.Lock()
		cl.ends = append(cl.ends, end)
		cl.mu.Unlock()
		if !ok {
			return
		}
	}
}

// reconnect dials until a new WebSocket is up, or gives up.
func (cl *wsClient) reconnect(h *wsHold) bool {
	var err error
	for range wsDialTries {
		var c *wsecho.Conn
		if c, err = h.dial(); err == nil {
			cl.conn = c
			cl.backend.Store(&c.Backend)
			return true
		}
		select {
		case <-h.stop:
			return false
		case <-time.After(wsRetryPause):
		}
	}
	cl.mu.Lock()
	cl.lost = err
	cl.mu.Unlock()
	cl.conn = nil
	return false
}

// String says when (against the kill) and why a connection ended.
func (e wsEnd) String() string {
	return fmt.Sprintf("%s: %v (reconnected %v later)", e.backend, e.err, e.back.Sub(e.at).Round(time.Millisecond))
}

// endsOf returns a client's connection ends and its reconnect failure.
func (cl *wsClient) endsOf() ([]wsEnd, error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return slices.Clone(cl.ends), cl.lost
}

// onBackend counts the clients whose current connection is on each backend.
func (h *wsHold) onBackend() map[string]int64 {
	out := map[string]int64{}
	for _, cl := range h.clients {
		out[*cl.backend.Load()]++
	}
	return out
}

// totalEnds counts connection ends seen by all clients, and gives one.
func (h *wsHold) totalEnds() (int, string) {
	n, example := 0, ""
	for _, cl := range h.clients {
		ends, lost := cl.endsOf()
		n += len(ends)
		if len(ends) > 0 && example == "" {
			example = fmt.Sprintf("client %d on %s: %v", cl.id, ends[0].backend, ends[0].err)
		}
		if lost != nil && example == "" {
			example = fmt.Sprintf("client %d could not reconnect: %v", cl.id, lost)
		}
	}
	return n, example
}

// waitRounds waits until every client has had k more messages echoed than
// now, so that every held connection has carried traffic since.
func (h *wsHold) waitRounds(t *testing.T, k int64, limit time.Duration, when string) {
	t.Helper()
	want := make([]int64, len(h.clients))
	for i, cl := range h.clients {
		want[i] = cl.ok.Load() + k
	}
	deadline := time.Now().Add(limit)
	for {
		behind := 0
		for i, cl := range h.clients {
			if cl.ok.Load() < want[i] {
				behind++
			}
		}
		if behind == 0 {
			return
		}
		if time.Now().After(deadline) {
			n, ex := h.totalEnds()
			t.Fatalf("%s: %d of %d clients did not get %d more echoes within %v (%d connection ends so far; %s)",
				when, behind, len(h.clients), k, limit, n, ex)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noEnds fails the test if any client's connection ended.
func (h *wsHold) noEnds(t *testing.T, when string) {
	t.Helper()
	if n, ex := h.totalEnds(); n > 0 || ex != "" {
		t.Fatalf("%s: %d connections ended (%s)", when, n, ex)
	}
}

// latencies merges every client's echo times of messages sent in
// [from, to), sorted (after close).
func (h *wsHold) latencies(from, to time.Time) []time.Duration {
	var all []time.Duration
	for _, cl := range h.clients {
		for _, s := range cl.lat {
			if !s.at.Before(from) && s.at.Before(to) {
				all = append(all, s.d)
			}
		}
	}
	slices.Sort(all)
	return all
}

// newWSLandings opens n fresh WebSockets through the VIP, closes them and
// counts where they landed.
func newWSLandings(t *testing.T, h *wsHold, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		c, err := h.dial()
		if err != nil {
			t.Fatalf("a new connection: %v", err)
		}
		seen[c.Backend]++
		_ = c.CloseGracefully(time.Second)
	}
	return seen
}

// procCPUSecs is utime+stime of pid (all threads), in seconds.
func procCPUSecs(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return float64(utime+stime) / 100 // USER_HZ
}

// TestWebSocketHoldDrainReloadKill: 5000 WebSocket clients in the client
// namespace hold connections through a least_conn VIP to three backend
// processes (wsecho in scripts/testserver) and each sends a message a
// second, checking its echo. Then an operator drains be0 (`l4lb drain`):
// no connection ends, every one keeps echoing, new ones avoid be0; a
// reload with a change to another VIP (`l4lb reload`): no connection
// ends, the drain holds; be0 is enabled again and be1's process is
// killed: exactly the clients on be1 (as many as status counted LIVE on
// it) see their connection end, reconnect and land on be0 and be2, and
// nobody else notices. l4lb's RSS before and during the hold and its CPU
// over the hold are logged; the RSS must stay under 40 MiB. The daemon
// is the plain build (benchBinary), not the race-enabled one: the race
// detector's shadow memory alone is several times that figure.
func TestWebSocketHoldDrainReloadKill(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	n := idleConnsThatFit(t, wsClients)
	procs := make([]*exec.Cmd, 3)
	for i := range procs {
		procs[i] = wsBackend(t, tp, i)
	}
	bin, err := benchBinary()
	if err != nil {
		t.Fatal(err)
	}
	cfg := wsConf("1h")
	lb := startBinaryIn(t, tp.LB, bin, cfg)
	pid := lb.status(t).Process.PID
	testutil.Eventually(t, 10*time.Second, "all three backends up", func() bool {
		for _, b := range lb.vip(t, "ws").Backends {
			if b.Health != "up" {
				return false
			}
		}
		return true
	})
	rssBefore := vmRSSKiB(t, pid)

	start := time.Now()
	h := startWSHold(t, tp, n)
	t.Logf("%d WebSockets open through the VIP in %v: %v", n, time.Since(start).Round(time.Millisecond), h.onBackend())
	cpu0, held := procCPUSecs(t, pid), time.Now()
	var msgs0 int64
	for _, cl := range h.clients {
		msgs0 += cl.ok.Load()
	}
	rssMax, anonMax := int64(0), int64(0)
	sampleRSS := func() {
		rssMax = max(rssMax, vmRSSKiB(t, pid))
		anonMax = max(anonMax, procStatusKiB(t, pid, "RssAnon"))
	}

	h.waitRounds(t, 2, wsRoundWait, "holding")
	h.noEnds(t, "holding")
	sampleRSS()
	clientsOn, live := h.onBackend(), lb.liveFlows(t, "ws")
	for _, be := range []string{"be0", "be1", "be2"} {
		if clientsOn[be] != live[be] || clientsOn[be] < int64(n)/5 {
			t.Fatalf("clients on each backend %v, status LIVE %v: want equal, and spread", clientsOn, live)
		}
	}

	// Drain be0: nothing ends, everything keeps echoing, new ones avoid it.
	drained := time.Now()
	if out := lb.verb(t, "drain", "ws", "be0"); !strings.Contains(out, "drained") ||
		!strings.Contains(out, fmt.Sprintf("%d established continue", live["be0"])) {
		t.Fatalf("drain said:\n%s", out)
	}
	h.waitRounds(t, 2, wsRoundWait, "after the drain")
	h.noEnds(t, "after the drain")
	// least_conn: which of be1 and be2 they reach depends on whether each
	// has ended before the next (one backend may take all 30); be0 none.
	if seen := newWSLandings(t, h, 30); seen["be0"] != 0 || seen["be1"]+seen["be2"] != 30 {
		t.Fatalf("new connections after the drain went to %v, want be1 and be2 only", seen)
	}
	if got := lb.liveFlows(t, "ws")["be0"]; got != live["be0"] {
		t.Fatalf("be0 LIVE %d after the drain, was %d", got, live["be0"])
	}
	sampleRSS()

	// A reload that changes only the other VIP: nothing ends, the drain holds.
	lb.writeConfig(t, wsConf("2h"))
	reloaded := time.Now()
	if out := lb.verb(t, "reload"); !strings.Contains(out, "reload applied") {
		t.Fatalf("reload said:\n%s", out)
	}
	h.waitRounds(t, 2, wsRoundWait, "after the reload")
	h.noEnds(t, "after the reload")
	st := lb.status(t)
	if b := mustVIP(t, st, "ws").Backends[0]; b.ID != "be0" || b.Override != "drain" || b.LiveFlows != live["be0"] {
		t.Fatalf("be0 after the reload: %+v (LIVE before: %d)", b, live["be0"])
	}
	if seen := newWSLandings(t, h, 6); seen["be0"] != 0 {
		t.Fatalf("new connections after the reload went to %v, want not be0 (drained)", seen)
	}
	sampleRSS()

	// Kill be1 (be0 enabled again): exactly its clients lose their
	// connection, and they come back on be0 and be2.
	lb.verb(t, "enable", "ws", "be0")
	h.waitRounds(t, 1, wsRoundWait, "before the kill")
	clientsOn, live = h.onBackend(), lb.liveFlows(t, "ws")
	if clientsOn["be1"] != live["be1"] {
		t.Fatalf("before the kill: clients on be1 %d, status LIVE %d (%v, %v)", clientsOn["be1"], live["be1"], clientsOn, live)
	}
	victims := map[int]bool{}
	for _, cl := range h.clients {
		if *cl.backend.Load() == "be1" {
			victims[cl.id] = true
		}
	}
	killed := time.Now()
	if err := procs[1].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wsKillWait, "be1's clients to reconnect elsewhere", func() bool {
		on := h.onBackend()
		return on["be1"] == 0 && on["be0"]+on["be2"] == int64(n)
	})
	t.Logf("be1 killed holding %d connections; its clients were all back on be0/be2 %v later: %v",
		len(victims), time.Since(killed).Round(time.Millisecond), h.onBackend())
	h.waitRounds(t, 2, wsRoundWait, "after the kill")
	var detect, back []time.Duration
	for _, cl := range h.clients {
		ends, lost := cl.endsOf()
		if len(ends) == 1 {
			detect, back = append(detect, ends[0].at.Sub(killed)), append(back, ends[0].back.Sub(ends[0].at))
		}
		switch {
		case lost != nil:
			t.Fatalf("client %d could not reconnect: %v", cl.id, lost)
		case victims[cl.id] && (len(ends) != 1 || ends[0].backend != "be1" || ends[0].at.Before(killed.Add(-wsEchoWithin))):
			t.Fatalf("client %d on be1 saw ends %v, want one, of its be1 connection, after the kill", cl.id, ends)
		case !victims[cl.id] && len(ends) != 0:
			t.Fatalf("client %d, not on be1, saw its connection end: %v", cl.id, ends)
		}
	}
	slices.Sort(detect)
	slices.Sort(back)
	if len(back) > 0 {
		t.Logf("after the kill: the failed message was sent %v..%v after it; reconnecting took p50 %v, max %v",
			detect[0].Round(time.Millisecond), detect[len(detect)-1].Round(time.Millisecond),
			back[len(back)/2].Round(time.Millisecond), back[len(back)-1].Round(time.Millisecond))
	}
	live = lb.liveFlows(t, "ws")
	if live["be1"] != 0 || live["be0"]+live["be2"] != int64(n) || live["be0"] <= clientsOn["be0"] || live["be2"] <= clientsOn["be2"] {
		t.Fatalf("LIVE after the kill %v (before %v), want be1 0 and its clients on both be0 and be2", live, clientsOn)
	}
	sampleRSS()

	cpu := procCPUSecs(t, pid) - cpu0
	ended := time.Now()
	holdSecs := ended.Sub(held).Seconds()
	h.close()
	var msgs int64
	for _, cl := range h.clients {
		msgs += cl.ok.Load()
	}
	msgs -= msgs0
	t.Logf("l4lb RSS: %.1f MiB before the clients, %.1f MiB at most during the hold (%.2f KiB per connection)",
		float64(rssBefore)/1024, float64(rssMax)/1024, float64(rssMax-rssBefore)/float64(n))
	t.Logf("l4lb CPU over the %.1f s hold: %.2f s (%.1f%% of a core), %.1f µs per echoed message (%d messages)",
		holdSecs, cpu, 100*cpu/holdSecs, cpu*1e6/float64(msgs), msgs)
	for _, ph := range []struct {
		what     string
		from, to time.Time
	}{{"holding", held, drained}, {"drain", drained, reloaded}, {"reload", reloaded, killed}, {"kill", killed, ended}, {"whole hold", held, ended}} {
		if lat := h.latencies(ph.from, ph.to); len(lat) > 0 {
			pct := func(p float64) time.Duration { return lat[int(p/100*float64(len(lat)-1))].Round(time.Microsecond) }
			t.Logf("echo round trip through the VIP, %s (%d messages; the test process is race-enabled): p50 %v, p99 %v, max %v",
				ph.what, len(lat), pct(50), pct(99), pct(100))
		}
	}
	// Issue 12's target was 40 MiB of RSS, met when 18 MiB of it were the
	// binary's own text (file-backed pages, shared with the page cache).
	// Embedding GoBGP grew the text by 12 MiB and VmRSS with it, not the
	// memory the connections take; so what is held to the target is
	// l4lb's private memory (heap, stacks, buffers: RssAnon), to the 22
	// MiB the text left of it.
	t.Logf("l4lb private memory (RssAnon): %.1f MiB at most during the hold; binary text and other file pages (RssFile) %.1f MiB",
		float64(anonMax)/1024, float64(procStatusKiB(t, pid, "RssFile"))/1024)
	if anonMax > wsAnonLimit {
		t.Errorf("l4lb private memory (RssAnon) %.1f MiB holding %d WebSockets, over the %d MiB target", float64(anonMax)/1024, n, wsAnonLimit>>10)
	}
}
