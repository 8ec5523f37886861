// The per-connection log: every end reason produced by a real connection
// or session, and found in its line with the right fields.

package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path"
	"runtime"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/conntrack"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// observed is a logger whose lines the test reads back, with the VIP's
// name in its context as the runtime gives a service.
func observed(vip string) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.InfoLevel)
	return zap.New(core).With(zap.String("vip", vip)), logs
}

// connLine is the fields of a connection's (or session's) line that a
// test checks.
type connLine struct {
	client, vip, end string
	backend          string // a path.Match pattern; "" = no backend key
	connected        bool   // connect_time present (TCP)
	bytesIn          uint64
	bytesOut         uint64
	retries          int64  // TCP
	datagramsIn      uint64 // UDP
	datagramsOut     uint64 // UDP
}

// loggedLine waits for the line msg, checks that it is the only one and
// returns its fields.
func loggedLine(t *testing.T, logs *observer.ObservedLogs, msg string) map[string]any {
	t.Helper()
	var got []observer.LoggedEntry
	testutil.Eventually(t, 5*time.Second, "a "+msg+" line", func() bool {
		got = logs.FilterMessage(msg).All()
		return len(got) > 0
	})
	time.Sleep(50 * time.Millisecond)
	if n := logs.FilterMessage(msg).Len(); n != 1 {
		t.Fatalf("%d %q lines, want 1: %v", n, msg, logs.FilterMessage(msg).All())
	}
	if got[0].Level != zap.InfoLevel {
		t.Errorf("level %s, want info", got[0].Level)
	}
	return got[0].ContextMap()
}

// checkTCPLine compares a connection's line with want.
func checkTCPLine(t *testing.T, m map[string]any, want connLine) {
	t.Helper()
	checkCommon(t, m, want)
	if _, ok := m["connect_time"]; ok != want.connected {
		t.Errorf("connect_time present %v, want %v: %v", ok, want.connected, m)
	}
	if m["retries"] != want.retries {
		t.Errorf("retries %v, want %d: %v", m["retries"], want.retries, m)
	}
	for _, k := range []string{"datagrams_in", "datagrams_out"} {
		if _, ok := m[k]; ok {
			t.Errorf("a TCP line has %s: %v", k, m)
		}
	}
}

// checkUDPLine compares a session's line with want.
func checkUDPLine(t *testing.T, m map[string]any, want connLine) {
	t.Helper()
	checkCommon(t, m, want)
	if m["datagrams_in"] != want.datagramsIn || m["datagrams_out"] != want.datagramsOut {
		t.Errorf("datagrams %v/%v, want %d/%d: %v", m["datagrams_in"], m["datagrams_out"], want.datagramsIn, want.datagramsOut, m)
	}
}

func checkCommon(t *testing.T, m map[string]any, want connLine) {
	t.Helper()
	if m["end"] != want.end {
		t.Errorf("end %v, want %s: %v", m["end"], want.end, m)
	}
	if m["vip"] != want.vip {
		t.Errorf("vip %v, want %s", m["vip"], want.vip)
	}
	if want.client != "" && m["client"] != want.client {
		t.Errorf("client %v, want %s", m["client"], want.client)
	}
	b, ok := m["backend"].(string)
	if match, _ := path.Match(want.backend, b); ok != (want.backend != "") || ok && !match {
		t.Errorf("backend %v, want %q: %v", m["backend"], want.backend, m)
	}
	if m["bytes_in"] != want.bytesIn || m["bytes_out"] != want.bytesOut {
		t.Errorf("bytes in/out %v/%v, want %d/%d: %v", m["bytes_in"], m["bytes_out"], want.bytesIn, want.bytesOut, m)
	}
	if d, ok := m["duration"].(time.Duration); !ok || d < 0 || d > 10*time.Second {
		t.Errorf("duration %v: %v", m["duration"], m)
	}
}

// blackHole is a loopback address whose SYNs are dropped: a listener with
// a backlog of 0 whose one queue slot is taken and never accepted.
func blackHole(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(fd)
	addr := sockaddrAddrPort(sa)
	filler, err := net.DialTimeout("tcp4", addr.String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })
	if c, err := net.DialTimeout("tcp4", addr.String(), 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("the black hole answers")
	}
	return addr
}

// readEnd reads c until it ends (EOF or an error) and returns the bytes.
func readEnd(c net.Conn) []byte {
	b, _ := readEndErr(c)
	return b
}

// readEndErr reads until the connection ends (within 5 s) and says how.
func readEndErr(c net.Conn) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	return io.ReadAll(c)
}

// dialFrom connects to addr from a port it reports even when the connect
// fails: a client turned away may be reset before its connect returns.
func dialFrom(t *testing.T, addr netip.AddrPort) (*net.TCPConn, string) {
	t.Helper()
	var local netip.AddrPort
	d := net.Dialer{Timeout: 2 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		cerr := rc.Control(func(fd uintptr) {
			if err = unix.Bind(int(fd), &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err == nil {
				var sa unix.Sockaddr
				sa, err = unix.Getsockname(int(fd))
				local = sockaddrAddrPort(sa)
			}
		})
		return errors.Join(cerr, err)
	}}
	c, err := d.Dial("tcp4", addr.String())
	if !local.IsValid() {
		t.Fatalf("dial: %v", err)
	}
	if err != nil {
		return nil, local.String()
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(waitBound)) // tests set shorter ones; none waits forever
	return c.(*net.TCPConn), local.String()
}

// ended waits for a client turned away (if its connect succeeded at all),
// which must see a reset.
func ended(t *testing.T, ts *testService, c *net.TCPConn) {
	if c != nil {
		readReset(t, c, "client turned away")
	}
}

// closedWithFIN waits for a client closed in order (first_byte_timeout
// ends a silent client with a FIN, not a reset).
func closedWithFIN(t *testing.T, ts *testService, c *net.TCPConn) {
	if c == nil {
		t.Fatal("the connect failed")
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("silent client: read %d bytes, %v; want EOF (a FIN)", n, err)
	}
}

func TestConnLogEveryEnd(t *testing.T) {
	echo := func(t *testing.T) []netip.AddrPort { return []netip.AddrPort{startServer(t, echoHandler)} }
	received := make(chan struct{}, 1)
	reset := func(why l4.EndReason) func(t *testing.T, ts *testService, c *net.TCPConn) {
		return func(t *testing.T, ts *testService, c *net.TCPConn) {
			echoOnce(t, c, "hi")
			if n := ts.ResetWhere(func(b *l4.Backend) bool { return b == ts.backends[0] }, why); n != 1 {
				t.Fatalf("reset %d connections, want 1", n)
			}
			readReset(t, c, why.String())
		}
	}
	rebalance := func(how CloseHow) func(t *testing.T, ts *testService, c *net.TCPConn) {
		return func(t *testing.T, ts *testService, c *net.TCPConn) {
			echoOnce(t, c, "hi")
			if n := ts.CloseSome(ts.backends[0], 1, how); n != 1 {
				t.Fatalf("closed %d connections, want 1", n)
			}
			if how == CloseReset {
				readReset(t, c, "rebalance --reset")
			} else if _, err := readEndErr(c); err != nil {
				t.Fatalf("rebalance with a FIN: %v, want an orderly EOF", err)
			}
			c.Close() // the client's FIN ends a graceful close
		}
	}
	for _, tc := range []struct {
		name     string
		st       Settings
		backends func(t *testing.T) []netip.AddrPort
		client   func(t *testing.T, ts *testService, c *net.TCPConn)
		want     connLine
		// mayRefuse: the client is reset at once, maybe before its
		// connect returns (c is then nil).
		mayRefuse bool
	}{
		{
			name: "client_fin", backends: echo,
			client: func(t *testing.T, ts *testService, c *net.TCPConn) {
				echoOnce(t, c, "hello")
				c.CloseWrite()
				readEnd(c)
			},
			want: connLine{end: "client_fin", backend: "b0", connected: true, bytesIn: 5, bytesOut: 5},
		},
		{
			name: "backend_fin",
			backends: func(t *testing.T) []netip.AddrPort {
				return []netip.AddrPort{startServer(t, func(c *net.TCPConn) { c.Write([]byte("bye!")) })}
			},
			client: func(t *testing.T, ts *testService, c *net.TCPConn) {
				if b := readEnd(c); string(b) != "bye!" {
					t.Fatalf("read %q", b)
				}
				c.Close()
			},
			want: connLine{end: "backend_fin", backend: "b0", connected: true, bytesOut: 4},
		},
		{
			name: "client_reset",
			backends: func(t *testing.T) []netip.AddrPort {
				return []netip.AddrPort{startServer(t, func(c *net.TCPConn) {
					io.ReadFull(c, make([]byte, 10))
					received <- struct{}{}
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					c.Read(make([]byte, 1))
				})}
			},
			client: func(t *testing.T, ts *testService, c *net.TCPConn) {
				c.Write([]byte("0123456789"))
				within(t, received, "the backend's read")
				c.SetLinger(0)
				c.Close()
			},
			want: connLine{end: "client_reset", backend: "b0", connected: true, bytesIn: 10},
		},
		{
			name: "backend_reset",
			backends: func(t *testing.T) []netip.AddrPort {
				return []netip.AddrPort{startServer(t, func(c *net.TCPConn) {
					io.ReadFull(c, make([]byte, 5))
					c.SetLinger(0)
				})}
			},
			client: func(t *testing.T, ts *testService, c *net.TCPConn) {
				c.Write([]byte("hello"))
				readEnd(c)
			},
			want: connLine{end: "backend_reset", backend: "b0", connected: true, bytesIn: 5},
		},
		{
			name: "idle_timeout", st: Settings{IdleTimeout: 200 * time.Millisecond}, backends: echo,
			client: func(t *testing.T, ts *testService, c *net.TCPConn) {
				echoOnce(t, c, "x")
				readEnd(c)
			},
			want: connLine{end: "idle_timeout", backend: "b0", connected: true, bytesIn: 1, bytesOut: 1},
		},
		{
			name: "connect_failed", st: Settings{Retries: 1},
			backends: func(t *testing.T) []netip.AddrPort {
				return []netip.AddrPort{testutil.FreeTCPAddr(t), testutil.FreeTCPAddr(t)}
			},
			client: ended,
			want:   connLine{end: "connect_failed", backend: "b[01]", retries: 1}, mayRefuse: true,
		},
		{
			name: "connect_timeout", st: Settings{ConnectTimeout: 200 * time.Millisecond},
			backends: func(t *testing.T) []netip.AddrPort { return []netip.AddrPort{blackHole(t)} },
			client:   ended,
			want:     connLine{end: "connect_timeout", backend: "b0"},
		},
		{
			name: "first_byte_timeout", st: Settings{FirstByteTimeout: 100 * time.Millisecond}, backends: echo,
			client: closedWithFIN,
			want:   connLine{end: "first_byte_timeout"},
		},
		{
			name: "no_backend", backends: echo, // and then none
			client: ended,
			want:   connLine{end: "no_backend"}, mayRefuse: true,
		},
		{
			name: "drain", backends: echo,
			client: func(t *testing.T, ts *testService, c *net.TCPConn) {
				echoOnce(t, c, "hi")
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				if n := ts.Drain(ctx); n != 1 {
					t.Fatalf("drain reset %d connections, want 1", n)
				}
				readReset(t, c, "drain deadline")
			},
			want: connLine{end: "drain", backend: "b0", connected: true, bytesIn: 2, bytesOut: 2},
		},
		{name: "on_down", backends: echo, client: reset(l4.EndOnDown),
			want: connLine{end: "on_down", backend: "b0", connected: true, bytesIn: 2, bytesOut: 2}},
		{name: "disabled", backends: echo, client: reset(l4.EndDisabled),
			want: connLine{end: "disabled", backend: "b0", connected: true, bytesIn: 2, bytesOut: 2}},
		{name: "rebalance_fin", backends: echo, client: rebalance(CloseFIN),
			want: connLine{end: "rebalance", backend: "b0", connected: true, bytesIn: 2, bytesOut: 2}},
		{name: "rebalance_reset", backends: echo, client: rebalance(CloseReset),
			want: connLine{end: "rebalance", backend: "b0", connected: true, bytesIn: 2, bytesOut: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, logs := observed("web")
			pipes := NewPipePool(0)
			tc.st.Name, tc.st.LogConnections = "web", true
			ts := newServiceLog(t, pipes, testLoops(t, pipes), ListenOptions{}, log, tc.st, tc.backends(t)...)
			if tc.want.end == "no_backend" {
				ts.setBackends(t) // as the runtime publishes when every backend is down
			}
			c, local := dialFrom(t, ts.addr)
			tc.want.vip, tc.want.client = "web", local
			if c == nil && !tc.mayRefuse {
				t.Fatal("the connect failed")
			}
			tc.client(t, ts, c)
			checkTCPLine(t, loggedLine(t, logs, connLogMsg), tc.want)
		})
	}
}

// TestConnLogOffAndReload: no line while log_connections is off; a reload
// that turns it on applies to connections accepted from then on, and one
// that turns it off leaves established connections logging.
func TestConnLogOffAndReload(t *testing.T) {
	log, logs := observed("web")
	pipes := NewPipePool(0)
	ts := newServiceLog(t, pipes, testLoops(t, pipes), ListenOptions{}, log, Settings{Name: "web"}, startServer(t, echoHandler))
	quiet := ts.dial(t)
	echoOnce(t, quiet, "a")
	ts.Update(Settings{Name: "web", LogConnections: true})
	logged := ts.dial(t)
	echoOnce(t, logged, "bb")
	ts.Update(Settings{Name: "web"})
	off := ts.dial(t)
	echoOnce(t, off, "ccc")
	for _, c := range []*net.TCPConn{quiet, logged, off} {
		c.Close()
	}
	m := loggedLine(t, logs, connLogMsg)
	checkTCPLine(t, m, connLine{end: "client_fin", vip: "web", client: logged.LocalAddr().String(), backend: "b0", connected: true, bytesIn: 2, bytesOut: 2})
}

// TestConnLogRate: past log_connections_rate lines are dropped and counted,
// and the next second's first line comes with one warning that sums them.
func TestConnLogRate(t *testing.T) {
	log, logs := observed("web")
	pipes := NewPipePool(0)
	ts := newServiceLog(t, pipes, testLoops(t, pipes), ListenOptions{}, log,
		Settings{Name: "web", LogConnections: true, LogRate: 2}, startServer(t, echoHandler))
	const n = 8
	for range n {
		c := ts.dial(t)
		echoOnce(t, c, "x")
		c.Close()
	}
	testutil.Eventually(t, 5*time.Second, "every connection ended", func() bool { return ts.Stats.Active.Load() == 0 })
	lines := logs.FilterMessage(connLogMsg).Len()
	dropped := ts.Stats.ConnLogDropped.Load()
	if lines < 2 || lines > 4 || uint64(lines)+dropped != n {
		t.Fatalf("%d lines and %d dropped for %d connections at 2 a second", lines, dropped, n)
	}
	time.Sleep(1100 * time.Millisecond)
	c := ts.dial(t)
	echoOnce(t, c, "x")
	c.Close()
	testutil.Eventually(t, 5*time.Second, "the summary", func() bool {
		return logs.FilterMessage("connection log lines dropped: over log_connections_rate").Len() > 0
	})
	var summed uint64
	for _, e := range logs.FilterMessage("connection log lines dropped: over log_connections_rate").All() {
		if e.Level != zap.WarnLevel {
			t.Errorf("summary at level %s", e.Level)
		}
		summed += e.ContextMap()["dropped"].(uint64)
	}
	if summed != dropped {
		t.Fatalf("the summaries say %d dropped, the counter %d", summed, dropped)
	}
}

// TestConnLogLevelHidesLines: a log level above info writes no line and
// drops none.
func TestConnLogLevelHidesLines(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	pipes := NewPipePool(0)
	ts := newServiceLog(t, pipes, testLoops(t, pipes), ListenOptions{}, zap.New(core),
		Settings{Name: "web", LogConnections: true, LogRate: 1}, startServer(t, echoHandler))
	for range 3 {
		c := ts.dial(t)
		echoOnce(t, c, "x")
		c.Close()
	}
	testutil.Eventually(t, 5*time.Second, "every connection ended", func() bool { return ts.Stats.Active.Load() == 0 })
	if logs.Len() != 0 || ts.Stats.ConnLogDropped.Load() != 0 {
		t.Fatalf("%d lines, %d dropped", logs.Len(), ts.Stats.ConnLogDropped.Load())
	}
}

func TestSessionLogEveryEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		st     UDPSettings
		client func(t *testing.T, ts *udpTestService, c *net.UDPConn)
		want   connLine
	}{
		{
			name: "responses", st: UDPSettings{SessionTimeout: time.Minute, Responses: 1},
			client: func(t *testing.T, ts *udpTestService, c *net.UDPConn) { exchangeOK(t, c, "hello") },
			want:   connLine{end: "responses", bytesIn: 5, bytesOut: 7, datagramsIn: 1, datagramsOut: 1},
		},
		{
			name: "idle_timeout", st: UDPSettings{SessionTimeout: 300 * time.Millisecond},
			client: func(t *testing.T, ts *udpTestService, c *net.UDPConn) {
				exchangeOK(t, c, "x")
				exchangeOK(t, c, "yy")
			},
			want: connLine{end: "idle_timeout", bytesIn: 3, bytesOut: 7, datagramsIn: 2, datagramsOut: 2},
		},
		{
			name: "moved", st: UDPSettings{SessionTimeout: time.Minute},
			client: func(t *testing.T, ts *udpTestService, c *net.UDPConn) {
				exchangeOK(t, c, "x")
				ts.backends[0].SetEligible(false)
				c.Write([]byte("lost")) // ends the session; no backend takes the datagram
			},
			want: connLine{end: "moved", bytesIn: 1, bytesOut: 3, datagramsIn: 1, datagramsOut: 1},
		},
		{
			name: "vip_closed", st: UDPSettings{SessionTimeout: time.Minute},
			client: func(t *testing.T, ts *udpTestService, c *net.UDPConn) {
				exchangeOK(t, c, "x")
				ts.Close()
			},
			want: connLine{end: "vip_closed", bytesIn: 1, bytesOut: 3, datagramsIn: 1, datagramsOut: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, logs := observed("dns")
			tc.st.Name, tc.st.LogConnections = "dns", true
			ts := newUDPServiceLog(t, "127.0.0.1:0", log, tc.st, udpEcho(t, "a"))
			c := dialUDP(t, ts.addr)
			tc.want.vip, tc.want.client, tc.want.backend = "dns", c.LocalAddr().String(), "b0"
			tc.client(t, ts, c)
			checkUDPLine(t, loggedLine(t, logs, sessionLogMsg), tc.want)
		})
	}
}

// exchangeOK sends msg and expects the echo backend's "a:" reply.
func exchangeOK(t *testing.T, c *net.UDPConn, msg string) {
	t.Helper()
	got, err := exchange(t, c, []byte(msg))
	if err != nil || string(got) != "a:"+msg {
		t.Fatalf("reply %q, %v", got, err)
	}
}

// TestSessionEndOfTableReasons: what the session table's reasons become
// (an eviction needs a full table: 65536 sessions, too many to make here).
func TestSessionEndOfTableReasons(t *testing.T) {
	for r, want := range map[conntrack.Reason]l4.EndReason{
		conntrack.ReasonExpired: l4.EndIdleTimeout,
		conntrack.ReasonEvicted: l4.EndEvicted,
		conntrack.ReasonClosed:  l4.EndVIPClosed,
		conntrack.ReasonDeleted: l4.EndMoved,
	} {
		if got := sessionEnd(&loopSession{}, r); got != want {
			t.Errorf("%s: %s, want %s", r, got, want)
		}
	}
	if got := sessionEnd(&loopSession{why: l4.EndResponses}, conntrack.ReasonDeleted); got != l4.EndResponses {
		t.Errorf("deleted at udp_responses: %s", got)
	}
}

// daemonLogger is a logger configured as cmd/l4lb's (JSON, or with
// console its default format), writing to w.
func daemonLogger(w zapcore.WriteSyncer, console bool) *zap.Logger {
	cfg := zap.NewProductionEncoderConfig()
	cfg.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.EncodeDuration = zapcore.StringDurationEncoder
	enc := zapcore.NewJSONEncoder(cfg)
	if console {
		cfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(cfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(w), zap.InfoLevel)).With(zap.String("vip", "web"))
}

// TestConnLogAllocations counts the process's allocations per logged
// connection (the loop allocates nothing with the log off: see
// TestLoopConnectionAllocatesNothing).
func TestConnLogAllocations(t *testing.T) {
	pipes := NewPipePool(0)
	ts := newServiceLog(t, pipes, newLoopsForTest(t, 1, pipes), ListenOptions{}, daemonLogger(zapcore.AddSync(io.Discard), false),
		Settings{Name: "web", LogConnections: true}, rawEchoServer(t))
	vip := &unix.SockaddrInet4{Port: int(ts.addr.Port()), Addr: ts.addr.Addr().As4()}
	msg, got := []byte("hello"), make([]byte, 5)
	conn := func() {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		rawDeadline(fd)
		defer unix.Close(fd)
		if err := unix.Connect(fd, vip); err != nil {
			t.Fatal(err)
		}
		unix.Write(fd, msg)
		if n, err := rawRead(fd, got); err != nil || n != len(msg) {
			t.Fatalf("read %d bytes, %v", n, err)
		}
	}
	for range warmConns {
		conn()
	}
	const n = 1000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		conn()
	}
	testutil.Eventually(t, 5*time.Second, "every connection ended", func() bool { return ts.Stats.Active.Load() == 0 })
	runtime.ReadMemStats(&after)
	per := float64(after.Mallocs-before.Mallocs) / n
	t.Logf("%.1f allocations per logged connection", per)
	if per > 5 {
		t.Fatalf("%.1f allocations per logged connection", per)
	}
}

// BenchmarkConnLogLine is the cost of one connection's line, through a
// logger like the daemon's (JSON or console), to io.Discard and to
// /dev/null (a write syscall per line, as on stderr).
func BenchmarkConnLogLine(b *testing.B) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	for _, sink := range []struct {
		name    string
		w       zapcore.WriteSyncer
		console bool
	}{{"json-discard", zapcore.AddSync(io.Discard), false}, {"json-devnull", null, false}, {"console-devnull", null, true}} {
		b.Run(sink.name, func(b *testing.B) {
			s := &TCPService{log: daemonLogger(sink.w, sink.console)}
			s.logs.lines.lost = &s.Stats.ConnLogDropped
			l := &loop{}
			st := &Settings{Name: "web", LogConnections: true}
			s.settings.Store(st)
			backend := l4.NewBackend("pg-a", netip.MustParseAddrPort("198.18.1.11:5432"), nil)
			c := &evConn{st: st, flow: l4.Flow{Src: netip.MustParseAddrPort("198.18.0.2:40000")},
				pick: connPick{lastTried: backend, attempts: 1}, times: connTimes{acceptAt: 1, connectAt: 2000}}
			c.up.n, c.down.n = 517, 18000
			b.ReportAllocs()
			for b.Loop() {
				l.clock += 1000
				s.logConn(l, c, l4.EndClientFIN)
			}
		})
	}
}

// TestConnLogDroppedLinesAllocateNothing: a line over the rate costs no
// allocation (zap's entry is taken only for a line that is written).
func TestConnLogDroppedLinesAllocateNothing(t *testing.T) {
	s := &TCPService{log: daemonLogger(zapcore.AddSync(io.Discard), false)}
	s.logs.lines.lost = &s.Stats.ConnLogDropped
	l := &loop{clock: int64(time.Hour)}
	st := &Settings{LogConnections: true, LogRate: 1}
	s.settings.Store(st)
	c := &evConn{st: st, flow: l4.Flow{Src: netip.MustParseAddrPort("198.18.0.2:40000")}}
	s.logConn(l, c, l4.EndClientFIN) // the second's one line
	if n := testing.AllocsPerRun(100, func() { s.logConn(l, c, l4.EndClientFIN) }); n != 0 {
		t.Fatalf("%v allocations per dropped line", n)
	}
	if s.Stats.ConnLogDropped.Load() != 101 {
		t.Fatalf("%d dropped", s.Stats.ConnLogDropped.Load())
	}
}
