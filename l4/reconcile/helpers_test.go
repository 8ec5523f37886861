// Test helpers: a Runtime on loopback in front of real, restartable servers.

package reconcile

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/l4lb/l4lb/config"
	dnsnames "github.com/l4lb/l4lb/internal/names"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// namedServer is a loopback server that writes its name to every
// connection and then echoes; it can be killed and restarted on its port.
type namedServer struct {
	name string
	addr netip.AddrPort
	mu   sync.Mutex
	ln   net.Listener
}

func startNamed(t *testing.T, name string) *namedServer {
	t.Helper()
	s := &namedServer{name: name}
	s.serve(testutil.ListenLoopback(t))
	t.Cleanup(s.kill)
	return s
}

func (s *namedServer) serve(ln net.Listener) {
	s.mu.Lock()
	s.ln, s.addr = ln, ln.Addr().(*net.TCPAddr).AddrPort()
	s.mu.Unlock()
	testutil.ServeConns(ln, testutil.NamedEcho(s.name))
}

func (s *namedServer) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
}

// restart listens again on the server's port, which is below the
// ephemeral range (see testutil.ListenLoopback): only a socket in
// TIME_WAIT can hold it, and SO_REUSEADDR passes those.
func (s *namedServer) restart(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp4", s.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	s.serve(ln)
}

// startRuntime applies a config given as TOML text; it shuts down on cleanup.
func startRuntime(t *testing.T, toml string) *Runtime {
	t.Helper()
	log := zaptest.NewLogger(t)
	rt := New(log, Options{Names: dnsnames.New(log)})
	apply(t, rt, toml)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rt.Shutdown(ctx)
	})
	return rt
}

func apply(t *testing.T, rt *Runtime, toml string) {
	t.Helper()
	if err := rt.Apply(parse(t, toml)); err != nil {
		t.Fatal(err)
	}
}

func parse(t *testing.T, toml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.toml", []byte(toml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, toml)
	}
	return cfg
}

// backendsTOML lists servers as [[vip.backend]] tables named after them.
func backendsTOML(addrs map[string]netip.AddrPort) string {
	out := ""
	for name, a := range addrs {
		out += fmt.Sprintf("  [[vip.backend]]\n  name = %q\n  address = %q\n", name, a)
	}
	return out
}

func backendStatus(rt *Runtime, vipName, id string) (plane.BackendStatus, bool) {
	for _, v := range rt.Status().VIPs {
		if v.Name != vipName {
			continue
		}
		for _, b := range v.Backends {
			if b.ID == id {
				return b, true
			}
		}
	}
	return plane.BackendStatus{}, false
}

// waitBackend polls until cond holds for the backend's status and returns
// how long that took.
func waitBackend(t *testing.T, rt *Runtime, vipName, id string, limit time.Duration, what string, cond func(plane.BackendStatus) bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if b, ok := backendStatus(rt, vipName, id); ok && cond(b) {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			b, _ := backendStatus(rt, vipName, id)
			t.Fatalf("backend %s: %s not reached within %v: %+v", id, what, limit, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dialName connects to addr and returns the name its backend wrote.
func dialName(addr netip.AddrPort) (string, error) {
	c, err := net.DialTimeout("tcp4", addr.String(), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n-1]), nil
}

// clientLoop dials addr until stopped, one connection at a time,
// counting names and errors.
type clientLoop struct {
	mu     sync.Mutex
	names  map[string]int
	errs   []error
	errAt  []time.Time // when the dial that failed began
	last   time.Time   // when the last dial that completed began
	stop   chan struct{}
	done   chan struct{}
	target netip.AddrPort
}

func startClients(addr netip.AddrPort) *clientLoop {
	l := &clientLoop{names: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{}), target: addr}
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			start := time.Now()
			name, err := dialName(addr)
			l.mu.Lock()
			if err != nil {
				l.errs, l.errAt = append(l.errs, err), append(l.errAt, start)
			} else {
				l.names[name]++
			}
			l.last = start
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *clientLoop) snapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, v := range l.names {
		out[k] = v
	}
	return out
}

func (l *clientLoop) finish() []error {
	close(l.stop)
	<-l.done
	return l.errs
}

// errorsSince returns the errors of dials that began at or after from.
func (l *clientLoop) errorsSince(from time.Time) []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []error
	for i, err := range l.errs {
		if !l.errAt[i].Before(from) {
			out = append(out, err)
		}
	}
	return out
}

// waitDialSince waits until a dial that began at or after from has
// completed: the loop dials one at a time, so every earlier connection
// has ended by then.
func (l *clientLoop) waitDialSince(t *testing.T, from time.Time) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "a client dial begun after the change to complete", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return !l.last.Before(from)
	})
}
