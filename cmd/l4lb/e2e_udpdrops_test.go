// UDP datagrams the daemon loses, each counted by its cause and shown in
// status (JSON and text) and metrics; a backend that answers nothing.

package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// udpEchoUnlessX answers every datagram with "beN:" and the datagram,
// except those that start with 'x' (a blast the test sends: no reply, so
// no reply's send can fail and blur the count of client datagrams).
func udpEchoUnlessX(t *testing.T, tp *testutil.Topology, i, port int) {
	t.Helper()
	udpEchoIf(t, tp, i, port, func(b []byte) bool { return len(b) > 0 && b[0] != 'x' })
}

// udpClients opens n client sockets connected to the VIP's port, in the
// client namespace.
func udpClients(t *testing.T, tp *testutil.Topology, port, n int) []*net.UDPConn {
	t.Helper()
	conns := make([]*net.UDPConn, n)
	tp.Client.MustDo(t, func() error {
		for i := range conns {
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: tp.VIP.AsSlice(), Port: port})
			if err != nil {
				return err
			}
			conns[i] = c
			t.Cleanup(func() { c.Close() })
		}
		return nil
	})
	return conns
}

// answered sends one datagram on each of cs and reports which got an
// answer within wait.
func answered(cs []*net.UDPConn, msg string, wait time.Duration) []bool {
	for _, c := range cs {
		c.Write([]byte(msg))
	}
	out := make([]bool, len(cs))
	buf := make([]byte, 2048)
	for i, c := range cs {
		c.SetReadDeadline(time.Now().Add(wait))
		_, err := c.Read(buf)
		out[i] = err == nil
	}
	return out
}

func count(bs []bool, v bool) int {
	n := 0
	for _, b := range bs {
		if b == v {
			n++
		}
	}
	return n
}

// lowestFreeFD is the lowest descriptor number process pid has free.
func lowestFreeFD(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	open := map[int]bool{}
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			open[n] = true
		}
	}
	fd := 0
	for open[fd] {
		fd++
	}
	return fd
}

var udpDropsVIP = newConf(`metrics_listen = "198.18.0.1:9370"`).
	vip("dns", ":53", `protocol = "udp"`, `session_timeout = "1m"`, `max_sessions = 20`).backends(1, 5300).String()

// TestUDPDropsShownInStatus: datagrams the daemon loses are each counted
// by cause, and status (JSON and text) and metrics show every count:
//   - the kernel's drops on the VIP socket: the daemon is stopped
//     (SIGSTOP) while a client blasts 3000 datagrams, so the socket's
//     queue overflows; forwarded plus queue-dropped is every datagram;
//   - sockets that cannot be opened: the daemon's descriptor limit is
//     lowered to its lowest free descriptor, so a new client's session
//     socket fails with EMFILE; each new client's datagram then made a
//     session or is counted in socket_errors;
//   - no session slot: clients past max_sessions are counted in
//     sessions_refused, one per datagram.
func TestUDPDropsShownInStatus(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	udpEchoUnlessX(t, tp, 0, 5300)
	lb := startLB(t, tp, udpDropsVIP)
	pid := lb.cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })

	first := udpClients(t, tp, 53, 10)
	if got := answered(first, "hello", 2*time.Second); count(got, true) != 10 {
		t.Fatalf("answers %v, want 10", got)
	}

	// The kernel's drops on the VIP socket.
	const blast = 3000
	before := lb.status(t).VIPs[0].UDP
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	msg := []byte("x-blast")
	for range blast {
		first[0].Write(msg)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var u *plane.UDPStatus
	lb.waitStatus(t, 10*time.Second, "the blast forwarded or counted as dropped", func(st plane.Status) bool {
		u = st.VIPs[0].UDP
		return u.Datagrams-before.Datagrams+u.Dropped-before.Dropped+u.QueueDropped == blast
	})
	if u.QueueDropped == 0 {
		t.Fatalf("%d datagrams to a stopped daemon, none dropped by the kernel: the test did not fill the queue", blast)
	}
	queueDropped := u.QueueDropped

	// Sockets that cannot be opened (EMFILE).
	second := udpClients(t, tp, 53, 8)
	created := lb.status(t).VIPs[0].Accepted
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatal(err)
	}
	lim := uint64(lowestFreeFD(t, pid))
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: lim, Max: old.Max}, nil); err != nil {
		t.Fatal(err)
	}
	got := answered(second, "hello", 300*time.Millisecond)
	lb.waitLog(t, "too many open files")
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatal(err)
	}
	lb.waitStatus(t, 5*time.Second, "each new client's datagram to make a session or count as a socket error", func(st plane.Status) bool {
		v := st.VIPs[0]
		return v.UDP.SocketErrors+v.Accepted-created == 8
	})
	v := lb.status(t).VIPs[0]
	if v.UDP.SocketErrors == 0 || v.UDP.SocketErrors > uint64(count(got, false)) {
		t.Fatalf("socket_errors %d with %d of 8 new clients unanswered under the descriptor limit", v.UDP.SocketErrors, count(got, false))
	}
	socketErrors := v.UDP.SocketErrors

	// No session slot: max_sessions is 20.
	live := v.Active
	third := udpClients(t, tp, 53, 15)
	answered(third, "hello", 300*time.Millisecond)
	refused := uint64(live + 15 - 20)
	lb.waitStatus(t, 5*time.Second, "clients past max_sessions counted", func(st plane.Status) bool {
		return st.VIPs[0].UDP.SessionsRefused == refused
	})

	text := lb.statusText(t)
	want := fmt.Sprintf("dropped: truncated 0  send-failed 0  no-session-slot %d  backends-full 0  queue-full %d  reply-queue-full 0  socket-errors %d", refused, queueDropped, socketErrors)
	if !strings.Contains(text, want) {
		t.Errorf("status text lacks %q:\n%s", want, text)
	}
	m := scrapeMetrics(t, tp)
	for series, want := range map[string]uint64{
		`l4lb_vip_udp_queue_dropped_total{protocol="udp",vip="dns"}`:       queueDropped,
		`l4lb_vip_udp_socket_errors_total{protocol="udp",vip="dns"}`:       socketErrors,
		`l4lb_vip_udp_sessions_refused_total{protocol="udp",vip="dns"}`:    refused,
		`l4lb_vip_udp_reply_queue_dropped_total{protocol="udp",vip="dns"}`: 0,
	} {
		if got, ok := m[series]; !ok || got != float64(want) {
			t.Errorf("%s = %v (present %v), want %d", series, got, ok, want)
		}
	}
}

var udpSilentVIP = newConf(`metrics_listen = "198.18.0.1:9370"`).
	vip("dns", ":53", `protocol = "udp"`, `session_timeout = "1s"`, `udp_responses = 1`).health(`type = "none"`, `max_fails = 1`, `fail_timeout = "1m"`).
	named("be0", 0, 5300).named("silent", 1, 5300).String()

// TestUDPSilentBackendVisible: with health none, a backend that reads
// every query and answers none. Each of its sessions ends by
// session_timeout unanswered: counted on it (status NO REPLY, JSON,
// metrics), warned about, and (udp_responses: replies are expected) a
// passive mark that takes it down, after which every query is answered.
func TestUDPSilentBackendVisible(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	udpEchoUnlessX(t, tp, 0, 5300)
	var pc net.PacketConn
	tp.Backends[1].MustDo(t, func() (err error) {
		pc, err = net.ListenPacket("udp4", fmt.Sprintf("%s:5300", tp.BackendIP(1)))
		return err
	})
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	lb := startLB(t, tp, udpSilentVIP)
	if got := answered(udpClients(t, tp, 53, 10), "q", time.Second); count(got, false) == 0 {
		t.Fatalf("answers %v: no query reached the silent backend", got)
	}
	lb.waitLog(t, "answered none of a session's datagrams")
	var silent plane.BackendStatus
	lb.waitStatus(t, 10*time.Second, "the silent backend down by its passive mark", func(st plane.Status) bool {
		silent = st.VIPs[0].Backends[1]
		return silent.Health == "down"
	})
	if bs := lb.status(t).VIPs[0].Backends; silent.ID != "silent" || silent.Unanswered == 0 || bs[0].Unanswered != 0 {
		t.Fatalf("backends %+v: want unanswered sessions on silent only", bs)
	}
	if got := answered(udpClients(t, tp, 53, 10), "q", time.Second); count(got, false) != 0 {
		t.Fatalf("answers %v with the silent backend down: want all", got)
	}
	text := lb.statusText(t)
	if !strings.Contains(text, "NO REPLY") {
		t.Errorf("status text has no NO REPLY column:\n%s", text)
	}
	series := `l4lb_backend_udp_unanswered_sessions_total{address="198.18.1.12:5300",backend="silent",vip="dns"}`
	if got := scrapeMetrics(t, tp)[series]; got < float64(silent.Unanswered) {
		t.Errorf("%s = %v, status says %d", series, got, silent.Unanswered)
	}
}
