// End-to-end: a bounded SYN flood (spoofed sources) and connection flood
// from 2000 source addresses at a proxy VIP do not stop a legitimate
// client, the health checks or the admin socket.

package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
)

var floodConfig = newConf().vip("web", ":80").health(`interval = "300ms"`, `timeout = "300ms"`).backends(2, 7000).String()

// Flood bounds: 2000 sources each way; every spoofed source sends
// synPerSource SYNs; every connection-flood source opens one connection
// and holds it for connHold.
const (
	floodSources = 2000
	synPerSource = 50
	connHold     = time.Second
)

// floodAddr is flood source i in base (198.18.4.0 for connections from
// the client's own addresses, 198.19.0.0 for spoofed SYNs).
func floodAddr(base [4]byte, i int) netip.Addr {
	n := binary.BigEndian.Uint32(base[:]) + 1 + uint32(i)
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], n)
	return netip.AddrFrom4(b)
}

// ipBatchIn runs ip commands in namespace ns.
func ipBatchIn(t *testing.T, ns *testutil.Netns, lines []string) {
	t.Helper()
	cmd := exec.Command("ip", "-n", ns.Name, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -batch in %s: %v: %s", ns.Name, err, out)
	}
}

// nstatIn reads kernel counters (absolute, history untouched) in ns.
func nstatIn(t *testing.T, ns *testutil.Netns, names ...string) map[string]uint64 {
	t.Helper()
	out := ns.MustExec(t, append([]string{"nstat", "-asz"}, names...)...)
	m := map[string]uint64{}
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) >= 2 {
			if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				m[f[0]] = v
			}
		}
	}
	return m
}

// synPacket is an IPv4 TCP SYN from src to dst (checksums filled in).
func synPacket(src, dst netip.AddrPort, seq uint32) []byte {
	p := make([]byte, 40)
	p[0], p[2], p[3], p[8], p[9] = 0x45, 0, 40, 64, unix.IPPROTO_TCP
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(p[12:16], s[:])
	copy(p[16:20], d[:])
	binary.BigEndian.PutUint16(p[10:], csum(p[:20], 0))
	tcp := p[20:]
	binary.BigEndian.PutUint16(tcp[0:], src.Port())
	binary.BigEndian.PutUint16(tcp[2:], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12], tcp[13] = 5<<4, 0x02 // header length 20, SYN
	binary.BigEndian.PutUint16(tcp[14:], 64240)
	pseudo := uint32(binary.BigEndian.Uint16(s[0:])) + uint32(binary.BigEndian.Uint16(s[2:])) +
		uint32(binary.BigEndian.Uint16(d[0:])) + uint32(binary.BigEndian.Uint16(d[2:])) + unix.IPPROTO_TCP + 20
	binary.BigEndian.PutUint16(tcp[16:], csum(tcp, pseudo))
	return p
}

// csum is the Internet checksum of b plus a partial sum.
func csum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// synFlood sends synPerSource SYNs from each of floodSources spoofed
// addresses to vip through a raw socket in ns; it returns how many went.
func synFlood(t *testing.T, ns *testutil.Netns, vip netip.AddrPort) int {
	var fd int
	ns.MustDo(t, func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		return err
	})
	defer unix.Close(fd)
	to := &unix.SockaddrInet4{Addr: vip.Addr().As4()}
	sent := 0
	for round := range synPerSource {
		for i := range floodSources {
			src := netip.AddrPortFrom(floodAddr([4]byte{198, 19, 0, 0}, i), uint16(1024+round))
			if err := unix.Sendto(fd, synPacket(src, vip, uint32(i*7919+round)), 0, to); err == nil {
				sent++
			} else if err != unix.ENOBUFS && err != unix.EAGAIN {
				t.Errorf("raw send: %v", err)
				return sent
			}
		}
	}
	return sent
}

// connFlood opens one connection to vip from each of floodSources
// addresses of the client (at most 1000 at once), holds it connHold and
// closes it; it returns how many connected.
func connFlood(ns *testutil.Netns, vip netip.AddrPort) int64 {
	var ok atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 1000)
	for i := range floodSources {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: floodAddr([4]byte{198, 18, 4, 0}, i).AsSlice()}}
			var c net.Conn
			if ns.Do(func() (err error) { c, err = d.Dial("tcp4", vip.String()); return err }) != nil {
				return
			}
			ok.Add(1)
			time.Sleep(connHold)
			c.Close()
		}()
	}
	wg.Wait()
	return ok.Load()
}

// TestFloodKeepsLegitimateClients: while 2000 spoofed sources send
// 100000 SYNs and 2000 real sources each open a connection, a legitimate
// client's established connection keeps echoing, a new connection every
// 100 ms connects and round-trips, the backends stay up and the admin
// socket answers. SYN floods on proxy VIPs are the kernel's to absorb:
// it answers with syncookies once the listener's SYN queue is full.
func TestFloodKeepsLegitimateClients(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	// The connection flood's 2000 addresses on the client's link; the
	// balancer routes them, and the spoofed range, back through it. The
	// client does not forward, so SYN-ACKs to spoofed sources die there,
	// as they would on the Internet.
	var addrs []string
	for i := range floodSources {
		addrs = append(addrs, fmt.Sprintf("addr add %s/32 dev c0", floodAddr([4]byte{198, 18, 4, 0}, i)))
	}
	ipBatchIn(t, tp.Client, addrs)
	ipBatchIn(t, tp.LB, []string{"route add 198.18.4.0/22 via 198.18.0.2", "route add 198.18.8.0/22 via 198.18.0.2", "route add 198.19.0.0/16 via 198.18.0.2"})
	if v := strings.TrimSpace(tp.LB.MustExec(t, "sysctl", "-n", "net.ipv4.tcp_syncookies")); v != "1" {
		t.Fatalf("net.ipv4.tcp_syncookies = %s in the balancer's namespace; want 1 (the kernel default)", v)
	}
	lb := startLB(t, tp, floodConfig)
	sock := lb.cfg[:strings.LastIndex(lb.cfg, "/")] + "/admin.sock"
	testutil.Eventually(t, 10*time.Second, "both backends up", func() bool { return backendsUp(t, lb) == 2 })
	before := nstatIn(t, tp.LB, "TcpExtSyncookiesSent", "TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtTCPReqQFullDoCookies")

	established := mustDialVIP(t, tp, 80)
	vip := netip.AddrPortFrom(tp.VIP, 80)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lat []time.Duration
	var echoes, fails atomic.Int64
	wg.Add(2)
	go func() { // new connections every 100 ms
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			start := time.Now()
			c, err := dialVIPWithin(tp, 80, 3*time.Second)
			if err == nil {
				err = c.echo("new")
				c.Close()
			}
			if err != nil {
				fails.Add(1)
				t.Errorf("legitimate new connection: %v", err)
				continue
			}
			mu.Lock()
			lat = append(lat, time.Since(start))
			mu.Unlock()
		}
	}()
	go func() { // the established connection keeps moving bytes
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if err := established.echo(fmt.Sprintf("still %d", i)); err != nil {
				fails.Add(1)
				t.Errorf("established connection: %v", err)
				return
			}
			echoes.Add(1)
		}
	}()

	floodStart := time.Now()
	var syns int
	var conns int64
	var fw sync.WaitGroup
	fw.Add(2)
	go func() { defer fw.Done(); syns = synFlood(t, tp.Client, vip) }()
	go func() { defer fw.Done(); conns = connFlood(tp.Client, vip) }()
	done := make(chan struct{})
	go func() { fw.Wait(); close(done) }()
	statusOK := 0
	for flooding := true; flooding; {
		out, err := exec.Command(mustBin(t), "status", "--socket", sock).CombinedOutput()
		if err != nil {
			t.Errorf("l4lb status during the flood: %v: %s", err, out)
		} else {
			statusOK++
		}
		select {
		case <-done:
			flooding = false
		case <-time.After(300 * time.Millisecond):
		}
	}
	floodTook := time.Since(floodStart)
	time.Sleep(500 * time.Millisecond) // the legitimate client after the flood too
	close(stop)
	wg.Wait()

	after := nstatIn(t, tp.LB, "TcpExtSyncookiesSent", "TcpExtListenOverflows", "TcpExtListenDrops", "TcpExtTCPReqQFullDoCookies")
	slices.Sort(lat)
	p := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(q*float64(len(lat))))]
	}
	t.Logf("flood %v: %d spoofed SYNs from %d sources, %d/%d flood connections; syncookies sent %d, listen overflows %d, drops %d; legitimate: %d new connections (connect+echo p50 %v, p99 %v, max %v), %d echoes on the established one, %d failures, %d admin status answers",
		floodTook.Round(time.Millisecond), syns, floodSources, conns, floodSources,
		after["TcpExtSyncookiesSent"]-before["TcpExtSyncookiesSent"], after["TcpExtListenOverflows"]-before["TcpExtListenOverflows"],
		after["TcpExtListenDrops"]-before["TcpExtListenDrops"], len(lat), p(0.5), p(0.99), p(1), echoes.Load(), fails.Load(), statusOK)
	if syns < floodSources*synPerSource/2 {
		t.Errorf("only %d SYNs sent", syns)
	}
	if after["TcpExtSyncookiesSent"] == before["TcpExtSyncookiesSent"] {
		t.Errorf("no syncookie sent: the SYN flood did not reach the listener's limit")
	}
	if len(lat) < 5 || echoes.Load() < 5 || statusOK == 0 {
		t.Errorf("too few legitimate operations: %d new connections, %d echoes, %d status answers", len(lat), echoes.Load(), statusOK)
	}
	if n := backendsUp(t, lb); n != 2 || strings.Contains(lb.log.String(), `"to": "down"`) {
		t.Errorf("%d backends up after the flood; log:\n%s", n, lb.log.String())
	}
}

// backendsUp counts the VIP's backends whose health is up.
func backendsUp(t *testing.T, lb *lbProcess) int {
	n := 0
	for _, v := range lb.status(t).VIPs {
		for _, b := range v.Backends {
			if b.Health == "up" {
				n++
			}
		}
	}
	return n
}
