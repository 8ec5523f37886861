// Test helpers: real loopback backends and a service in front of them.

package proxy

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// startServer runs handler for every connection to a fresh loopback listener.
func startServer(t testing.TB, handler func(c *net.TCPConn)) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	testutil.ServeConns(ln, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(waitBound)) // a handler never waits forever
		handler(c.(*net.TCPConn))
	})
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

func echoHandler(c *net.TCPConn) { io.Copy(c, c) }

type testService struct {
	*TCPService
	addr     netip.AddrPort
	backends []*l4.Backend
	store    *snapshot.Store
	pipes    *PipePool
}

func newService(t testing.TB, st Settings, addrs ...netip.AddrPort) *testService {
	t.Helper()
	pipes := NewPipePool(0)
	return newServiceOn(t, pipes, testLoops(t, pipes), st, addrs...)
}

// newServiceOn is newService on the given loops.
func newServiceOn(t testing.TB, pipes *PipePool, loops *Loops, st Settings, addrs ...netip.AddrPort) *testService {
	t.Helper()
	return newServiceListen(t, pipes, loops, ListenOptions{KeepAlive: keepAliveConfig(st.KeepAlive)}, st, addrs...)
}

// newServiceListen is newServiceOn with a listener opened with lo.
func newServiceListen(t testing.TB, pipes *PipePool, loops *Loops, lo ListenOptions, st Settings, addrs ...netip.AddrPort) *testService {
	t.Helper()
	return newServiceLog(t, pipes, loops, lo, nil, st, addrs...)
}

// newServiceLog is newServiceListen with a logger (nil = none).
func newServiceLog(t testing.TB, pipes *PipePool, loops *Loops, lo ListenOptions, log *zap.Logger, st Settings, addrs ...netip.AddrPort) *testService {
	t.Helper()
	return newServiceWith(t, pipes, loops, lo, func(c *TCPConfig) { c.Log = log }, st, addrs...)
}

// newServiceWith is newServiceListen with its config edited first (a
// logger, an observer).
func newServiceWith(t testing.TB, pipes *PipePool, loops *Loops, lo ListenOptions, edit func(*TCPConfig), st Settings, addrs ...netip.AddrPort) *testService {
	t.Helper()
	ln, err := ListenTCP(netip.MustParseAddrPort("127.0.0.1:0"), lo)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testService{store: &snapshot.Store{}, pipes: pipes}
	ts.setBackends(t, addrs...)
	cfg := TCPConfig{Listener: ln, Snapshots: ts.store, Pipes: ts.pipes, Settings: st, Loops: loops}
	edit(&cfg)
	if ts.TCPService, err = NewTCPService(cfg); err != nil {
		t.Fatal(err)
	}
	ts.addr = ln.Addr().(*net.TCPAddr).AddrPort()
	go ts.Serve()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ts.Drain(ctx)
		for _, b := range ts.backends {
			if b.LiveFlows() != 0 || b.Underflows() != 0 {
				t.Errorf("backend %s: %d live flows, %d underflows after drain", b.ID, b.LiveFlows(), b.Underflows())
			}
		}
	})
	return ts
}

// testLoops starts two event loops for a test's services, closed when the
// test ends (after the services: cleanups run last registered first).
func testLoops(t testing.TB, pipes *PipePool) *Loops {
	t.Helper()
	ls, err := NewLoops(2, pipes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	return ls
}

func (ts *testService) setBackends(t testing.TB, addrs ...netip.AddrPort) {
	t.Helper()
	ts.backends = equalBackends(t, ts.store, addrs)
}

// equalBackends makes one weight-1 backend per address, named b0, b1...,
// and stores their round-robin snapshot in store.
func equalBackends(t testing.TB, store *snapshot.Store, addrs []netip.AddrPort) []*l4.Backend {
	t.Helper()
	var bs []*l4.Backend
	var ms []balance.Member
	for i, a := range addrs {
		b := l4.NewBackend(l4.BackendID(fmt.Sprintf("b%d", i)), a, nil)
		bs = append(bs, b)
		ms = append(ms, balance.Member{Backend: b, Weight: 1})
	}
	snap, err := snapshot.Build(balance.Options{}, ms)
	if err != nil {
		t.Fatal(err)
	}
	store.Store(snap)
	return bs
}

func (ts *testService) dial(t testing.TB) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp4", ts.addr.String(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(waitBound)) // tests set shorter ones; none waits forever
	return c.(*net.TCPConn)
}

// readReset reads from c until its end (within 5 s) and fails unless the
// end was a reset (ECONNRESET): a claim of "reset" must not pass with a
// plain FIN. Whatever the peer sent before is returned. The caller must
// not have written since the reset may have come: a write after a FIN
// from a closed socket brings a reset of its own.
func readReset(t testing.TB, c net.Conn, what string) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%s: read ended with %v after %d bytes, want a reset (ECONNRESET)", what, err, len(b))
	}
	return b
}

// waitBound is how long any single wait in these tests may last before
// the test fails instead of hanging until the suite's timeout: generous
// (a 64 MiB transfer under the race detector on a busy machine fits).
const waitBound = 30 * time.Second

// rawDeadline bounds every blocking read on raw socket fd (SO_RCVTIMEO:
// EAGAIN after waitBound), so that a lost byte fails a test instead of
// hanging it; read it with rawRead. It allocates nothing.
func rawDeadline(fd int) {
	tv := unix.NsecToTimeval(int64(waitBound))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
}

// rawRead is unix.Read on a socket with SO_RCVTIMEO, which the kernel
// does not restart after a signal (the Go runtime sends them).
func rawRead(fd int, p []byte) (int, error) {
	for {
		n, err := unix.Read(fd, p)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// within receives from ch, failing the test if nothing comes within
// waitBound.
func within[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitBound):
		t.Fatalf("nothing within %v: %s", waitBound, what)
		var zero T
		return zero
	}
}

// drainSoon starts a drain of ts that runs out of time after d; the
// channel gets what it reset.
func drainSoon(t testing.TB, ts *testService, d time.Duration) <-chan int {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	done := make(chan int, 1)
	go func() { done <- ts.Drain(ctx) }()
	return done
}

// packageSources parses the package's non-test Go files.
func packageSources(t *testing.T, mode parser.Mode) (*token.FileSet, []*ast.File) {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, mode|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return fset, files
}
