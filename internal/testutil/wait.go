package testutil

import (
	"net"
	"net/netip"
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
// connect to it is refused, and a listener may take it.
func FreeTCPAddr(t testing.TB) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}
