// helpers_test.go: small servers and assertions shared by the health tests.

package health

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// listen opens a loopback listener closed on cleanup.
func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// addrOf returns a listener's address.
func addrOf(l net.Listener) netip.AddrPort { return l.Addr().(*net.TCPAddr).AddrPort() }

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := addrOf(l)
	_ = l.Close()
	return a
}

// closeKind is how a client ended a connection, as the server saw it.
type closeKind string

const (
	closedFIN     closeKind = "fin"
	closedRST     closeKind = "rst"
	closedTimeout closeKind = "timeout"
)

// server accepts connections, optionally writes a greeting, then reads
// until the client closes, recording how each connection ended. silent
// servers never read: they only hold the connection.
type server struct {
	l        net.Listener
	greeting []byte
	silent   bool

	mu     sync.Mutex
	closes []closeKind
	got    [][]byte
	wg     sync.WaitGroup
}

// startServer serves on a fresh loopback listener until cleanup.
func startServer(t *testing.T, greeting []byte, silent bool) *server {
	t.Helper()
	s := &server{l: listen(t), greeting: greeting, silent: silent}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() { _ = s.l.Close(); s.wg.Wait() })
	return s
}

func (s *server) addr() netip.AddrPort { return addrOf(s.l) }

func (s *server) accept() {
	defer s.wg.Done()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		if s.silent {
			conns = append(conns, c) // held open, never read, closed at cleanup
			continue
		}
		s.wg.Add(1)
		go s.serve(c)
	}
}

// serve writes the greeting and reads to the end.
func (s *server) serve(c net.Conn) {
	defer s.wg.Done()
	defer c.Close()
	if len(s.greeting) > 0 {
		_, _ = c.Write(s.greeting)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	kind := closedFIN
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		kind = closedRST
	case err != nil:
		kind = closedTimeout
	}
	s.mu.Lock()
	s.closes, s.got = append(s.closes, kind), append(s.got, b)
	s.mu.Unlock()
}

// waitCloses waits until n connections ended and returns how.
func (s *server) waitCloses(t *testing.T, n int) []closeKind {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		if len(s.closes) >= n {
			out := append([]closeKind(nil), s.closes...)
			s.mu.Unlock()
			return out
		}
		s.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("fewer than %d connections ended", n)
	return nil
}

// mustCheck builds a checker from spec or fails.
func mustCheck(t *testing.T, spec Spec) Checker {
	t.Helper()
	c, err := NewChecker(spec)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// check runs one check with a generous outer context. A spec without a
// timeout gets testTimeout rather than the default second: a check that
// should pass must not fail on a busy machine (PostgreSQL forks a backend
// per connection, which took over a second at load 16 on two cores);
// tests of timeouts set their own.
func check(t *testing.T, spec Spec, addr netip.AddrPort) Result {
	t.Helper()
	if spec.Timeout == 0 {
		spec.Timeout = testTimeout
		spec.Interval = max(spec.Interval, testTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return mustCheck(t, spec).Check(ctx, addr)
}

// wantOK fails unless r passed.
func wantOK(t *testing.T, r Result) {
	t.Helper()
	if !r.OK {
		t.Fatalf("check failed: %s (took %v)", r.Reason, r.Took)
	}
	if r.Connect <= 0 || r.Took < r.Connect {
		t.Errorf("timings: connect %v took %v", r.Connect, r.Took)
	}
}

// wantFail fails unless r failed with a reason containing want.
func wantFail(t *testing.T, r Result, want string) {
	t.Helper()
	if r.OK {
		t.Fatalf("check passed, want failure %q", want)
	}
	if !strings.Contains(r.Reason, want) {
		t.Fatalf("reason %q, want it to contain %q", r.Reason, want)
	}
}

// testTimeout is a check's timeout in these tests unless they set one.
const testTimeout = 10 * time.Second
