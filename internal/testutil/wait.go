package testutil

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Eventually polls cond every 5 ms for up to d and fails the test, naming
// what it waited for, if cond never holds.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// FreeTCPAddr returns a loopback address nothing listens on right now: a
// connect to it is refused, and a listener may take it. The port lies below
// the kernel's ephemeral range, so no outgoing connection can take it in
// the meantime.
func FreeTCPAddr(t testing.TB) netip.AddrPort {
	t.Helper()
	ln := ListenLoopback(t)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// ListenLoopback listens on 127.0.0.1 at a random port below the kernel's
// ephemeral range. A port from that range (what ":0" gives) may be taken
// by any outgoing connection once its listener closes, so a test that
// stops a server and starts it again on the same port could find it in
// use; below the range only listeners compete for it.
func ListenLoopback(t testing.TB) *net.TCPListener {
	t.Helper()
	low := ephemeralLow()
	for range 200 {
		port := 10000 + rand.IntN(low-10000)
		ln, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port))))
		if err == nil {
			return ln
		}
	}
	t.Fatal("no free loopback port below the ephemeral range after 200 tries")
	return nil
}

// ephemeralLow is the first port of net.ipv4.ip_local_port_range, or the
// kernel default when it cannot be read or leaves no room below.
func ephemeralLow() int {
	const kernelDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return kernelDefault
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return kernelDefault
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low < 12000 {
		return kernelDefault
	}
	return low
}
