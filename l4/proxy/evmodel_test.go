package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
)

// The model-based test of the event loop: random scripts of what a
// client and a backend do (send a little or a lot, stop and resume
// reading, half-close, reset, go quiet past the idle timeout), run on
// real sockets through the loops with small socket buffers (so the loop
// meets EAGAIN and short writes, copy and splice both) and, for some
// scripts, with the loop's thread signalled every 50µs (short splices).
// A simple reference says what each side must end up with: the bytes the
// other sent, in order (all of them when nobody reset, a prefix
// otherwise), how its reads end (EOF, or a reset), and why the proxy
// ended the connection. Several scripts run at once on shared loops, so
// their events interleave too.

// modelPeer is one end of a proxied connection driven by a script.
type modelPeer struct {
	name string
	conn *net.TCPConn
	out  chan []byte // the writer's queue; closed by fin
	// reading gates the reader: off, the peer reads nothing (the proxy's
	// writes to it meet a full socket).
	reading atomic.Bool

	mu       sync.Mutex
	sent     []byte // every byte queued to send, in order
	recv     []byte // every byte read
	readErr  error  // how reading ended
	writeErr error

	readDone, writeDone chan struct{}
	finned, reset       bool // script state (the script's goroutine only)
}

func newModelPeer(name string, c *net.TCPConn) *modelPeer {
	p := &modelPeer{name: name, conn: c, out: make(chan []byte, 1024), readDone: make(chan struct{}), writeDone: make(chan struct{})}
	c.SetDeadline(time.Now().Add(2 * waitBound)) // a backstop: nothing here waits for ever
	go p.write()
	go p.read()
	return p
}

// write sends what the script queues, then half-closes once the queue is
// closed (a fin).
func (p *modelPeer) write() {
	defer close(p.writeDone)
	for b := range p.out {
		if _, err := p.conn.Write(b); err != nil {
			p.mu.Lock()
			p.writeErr = err
			p.mu.Unlock()
			for range p.out { // drain: the script may still queue
			}
			return
		}
	}
	if err := p.conn.CloseWrite(); err != nil {
		p.mu.Lock()
		p.writeErr = err
		p.mu.Unlock()
	}
}

// read reads while reading is on, until EOF or an error.
func (p *modelPeer) read() {
	defer close(p.readDone)
	buf := make([]byte, 64<<10)
	for {
		if !p.reading.Load() {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		p.conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		n, err := p.conn.Read(buf)
		p.mu.Lock()
		p.recv = append(p.recv, buf[:n]...)
		p.mu.Unlock()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			p.mu.Lock()
			p.readErr = err
			p.mu.Unlock()
			return
		}
	}
}

func (p *modelPeer) send(rng *rand.Rand, n int) {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	p.sent = append(p.sent, b...) // the script's copy; the writer gets b
	p.out <- b
}

func (p *modelPeer) fin() {
	p.finned = true
	close(p.out)
}

// hardReset closes with SO_LINGER 0: the peer gets a reset. The socket
// is closed before the writer's queue: a writer that found its queue
// closed first would half-close, and a FIN could reach the proxy before
// the reset (the peer then reads EOF, which the script did not ask for).
func (p *modelPeer) hardReset() {
	p.reset = true
	p.conn.SetLinger(0)
	p.conn.Close()
	if !p.finned {
		p.finned = true
		close(p.out)
	}
}

func (p *modelPeer) received() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.recv...)
}

func (p *modelPeer) readEnd() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.readErr
}

// modelRig is a service for scripts: its own backend listener (so each
// script knows its backend connection) on the shared loops, with small
// socket buffers on both ends and the connection log observed.
type modelRig struct {
	ts      *testService
	backend chan *net.TCPConn
	logs    *observer.ObservedLogs
}

// smallBuffers gives a socket 4 KiB buffers (the kernel doubles them).
func smallBuffers(_, _ string, rc syscall.RawConn) error {
	return rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096)
		unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 4096)
	})
}

func newModelRig(t *testing.T, pipes *PipePool, ls *Loops, st Settings) *modelRig {
	t.Helper()
	lc := net.ListenConfig{Control: smallBuffers}
	ln, err := lc.Listen(t.Context(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &modelRig{backend: make(chan *net.TCPConn, 1)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.backend <- c.(*net.TCPConn)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	core, logs := observer.New(zapcore.InfoLevel)
	r.logs = logs
	st.LogConnections = true
	r.ts = newServiceLog(t, pipes, ls, ListenOptions{}, zap.New(core), st, ln.Addr().(*net.TCPAddr).AddrPort())
	return r
}

// modelScript is one script's outcome as the reference sees it.
type modelScript struct {
	seed    uint64
	idle    bool // runs on the idle-timeout service and ends quiet
	storm   bool // the loop's thread is signalled throughout
	steps   []string
	client  *modelPeer
	backend *modelPeer
}

func (s *modelScript) logf(format string, args ...any) {
	s.steps = append(s.steps, fmt.Sprintf(format, args...))
}

// TestLoopModel runs the scripts.
func TestLoopModel(t *testing.T) {
	const scripts, parallel = 48, 6
	pipes := NewPipePool(0)
	ls := newLoopsForTest(t, 2, pipes)
	base := uint64(time.Now().UnixNano())
	if s := os.Getenv("L4LB_MODEL_SEED"); s != "" {
		fmt.Sscan(s, &base)
	}
	t.Logf("seed base %d (L4LB_MODEL_SEED=%d repeats this run)", base, base)
	// parallel workers call t.Run at once (not t.Parallel, which -parallel
	// would cap at GOMAXPROCS): their scripts' events interleave.
	next := make(chan int)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				seed := base + uint64(i)
				t.Run(fmt.Sprint(seed), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(seed, 0x5eed))
					runModelScript(t, pipes, ls, rng, &modelScript{seed: seed, idle: i%8 == 7, storm: i%3 == 1})
				})
			}
		}()
	}
	for i := range scripts {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		return
	}
	testutil.Eventually(t, 5*time.Second, "every pipe back in the pool", func() bool { return pipes.Lent() == 0 })
	var conns atomic.Int64
	ls.each(func(l *loop) { conns.Add(int64(len(l.conns) + len(l.waiting))) })
	if conns := conns.Load(); conns != 0 {
		t.Fatalf("%d connections still on the loops", conns)
	}
}

// modelIdle is the idle timeout of the idle scripts' service.
const modelIdle = 1500 * time.Millisecond

func runModelScript(t *testing.T, pipes *PipePool, ls *Loops, rng *rand.Rand, s *modelScript) {
	st := Settings{}
	if s.idle {
		st.IdleTimeout = modelIdle
	}
	rig := newModelRig(t, pipes, ls, st)
	if s.storm {
		signalStorm(t, ls.loops[0])
		signalStorm(t, ls.loops[1])
	}
	d := net.Dialer{Control: smallBuffers, Timeout: 5 * time.Second}
	cc, err := d.Dial("tcp4", rig.ts.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	bc := within(t, rig.backend, "the backend connection")
	t.Cleanup(func() { bc.Close() })
	s.client, s.backend = newModelPeer("client", cc.(*net.TCPConn)), newModelPeer("backend", bc)
	defer func() {
		if t.Failed() {
			t.Logf("script %d (idle %v, signals %v):\n  %s", s.seed, s.idle, s.storm, strings.Join(s.steps, "\n  "))
		}
	}()
	// A script starts once the proxy has connected (a backend that reset
	// before would be a failed connect, retried elsewhere).
	testutil.Eventually(t, 10*time.Second, "the proxy connected", func() bool { return rig.ts.backends[0].Stats.Flows.Load() == 1 })
	s.client.reading.Store(s.idle || rng.IntN(2) == 0) // idle scripts read throughout: bytes always move
	s.backend.reading.Store(s.idle || rng.IntN(2) == 0)
	s.logf("reading: client %v, backend %v", s.client.reading.Load(), s.backend.reading.Load())
	resetBy := s.play(rng)
	switch {
	case resetBy != nil:
		s.checkReset(t, rig, resetBy)
	case s.idle:
		s.checkIdle(t, rig)
	default:
		s.checkFIN(t, rig)
	}
	testutil.Eventually(t, 10*time.Second, "the connection ends", func() bool { return rig.ts.Stats.Active.Load() == 0 })
	if n := rig.ts.Stats.LostWakeups.Load(); n != 0 {
		t.Fatalf("the stall guard counted %d lost wake-ups", n)
	}
}

// play runs the script's random steps; it returns the peer that reset,
// if one did (the last step then).
func (s *modelScript) play(rng *rand.Rand) *modelPeer {
	steps := 5 + rng.IntN(20)
	for range steps {
		p, other := s.client, s.backend
		if rng.IntN(2) == 0 {
			p, other = other, p
		}
		switch k := rng.IntN(100); {
		case k < 40 && !p.finned:
			n := 1 + rng.IntN(300)
			s.logf("%s sends %d", p.name, n)
			p.send(rng, n)
		case k < 52 && !p.finned:
			n := 16<<10 + rng.IntN(1<<20)
			s.logf("%s sends %d", p.name, n)
			p.send(rng, n)
		case k < 62 && !s.idle: // idle scripts read throughout: bytes always move
			on := !p.reading.Load()
			s.logf("%s reading %v", p.name, on)
			p.reading.Store(on)
		case k < 80:
			d := time.Duration(1+rng.IntN(20)) * time.Millisecond
			s.logf("pause %v", d)
			time.Sleep(d)
		case k < 92 && !p.finned && !(s.idle && other.finned):
			s.logf("%s half-closes", p.name)
			p.fin()
		case k >= 97 && !s.idle && !(p.finned && other.finned):
			s.logf("%s resets", p.name)
			p.hardReset()
			return p
		}
	}
	return nil
}

// checkFIN: nobody reset. Both read everything the other sent and then
// EOF; the proxy names whoever's FIN passed first.
func (s *modelScript) checkFIN(t *testing.T, rig *modelRig) {
	s.client.reading.Store(true)
	s.backend.reading.Store(true)
	first := s.client
	switch {
	case s.client.finned && s.backend.finned:
		first = nil // both sent theirs during the script: either may pass first
	case s.backend.finned:
		first = s.backend
	case !s.client.finned:
		s.logf("client half-closes (end)")
		s.client.fin()
	}
	if first != nil {
		second := s.backend
		if first == s.backend {
			second = s.client
		}
		within(t, second.readDone, second.name+" reads to the first FIN")
		s.logf("%s half-closes (end)", second.name)
		second.fin()
	}
	for _, p := range []*modelPeer{s.client, s.backend} {
		within(t, p.readDone, p.name+" reads to its end")
		if err := p.readEnd(); err != io.EOF {
			t.Fatalf("%s: reading ended with %v, want EOF", p.name, err)
		}
	}
	s.checkBytes(t, true)
	want := []string{"client_fin", "backend_fin"}
	if first != nil {
		want = []string{first.name + "_fin"}
	}
	s.checkEnd(t, rig, want...)
}

// checkReset: one peer reset. The other reads a prefix of what it was
// sent, and its reading ends with the reset (or EOF, when the peer that
// reset had half-closed first and the FIN came through before the reset).
func (s *modelScript) checkReset(t *testing.T, rig *modelRig, by *modelPeer) {
	other := s.backend
	if by == s.backend {
		other = s.client
	}
	other.reading.Store(true)
	within(t, other.readDone, other.name+" reads to its end")
	// The kernel reports a reset once, to whichever call meets it first:
	// the reader, or a write in progress (the reader then sees EOF).
	finFirst := strings.Contains(strings.Join(s.steps, "\n"), by.name+" half-closes")
	seen := func() bool {
		other.mu.Lock()
		defer other.mu.Unlock()
		return errors.Is(other.readErr, syscall.ECONNRESET) || errors.Is(other.writeErr, syscall.ECONNRESET) ||
			finFirst && other.readErr == io.EOF
	}
	deadline := time.Now().Add(5 * time.Second)
	for !seen() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !seen() {
		other.mu.Lock()
		t.Fatalf("%s: no reset seen after %s reset: read ended with %v, write with %v", other.name, by.name, other.readErr, other.writeErr)
	}
	s.checkBytes(t, false)
	s.checkEnd(t, rig, by.name+"_reset")
}

// checkIdle: the script ends with every byte delivered, then goes quiet;
// the proxy closes after the idle timeout, both read EOF.
func (s *modelScript) checkIdle(t *testing.T, rig *modelRig) {
	s.client.reading.Store(true)
	s.backend.reading.Store(true)
	testutil.Eventually(t, waitBound, "every byte delivered", func() bool {
		return len(s.client.received()) == len(s.backend.sent) && len(s.backend.received()) == len(s.client.sent)
	})
	s.logf("quiet")
	for _, p := range []*modelPeer{s.client, s.backend} {
		within(t, p.readDone, p.name+" is closed after the idle timeout")
		if err := p.readEnd(); err != io.EOF {
			t.Fatalf("%s: reading ended with %v, want EOF (the idle close)", p.name, err)
		}
	}
	s.checkBytes(t, true)
	s.checkEnd(t, rig, "idle_timeout")
}

// checkBytes: each peer received what the other sent, in order: all of
// it (exact), or a prefix.
func (s *modelScript) checkBytes(t *testing.T, exact bool) {
	t.Helper()
	for _, pair := range [2][2]*modelPeer{{s.client, s.backend}, {s.backend, s.client}} {
		from, to := pair[0], pair[1]
		got := to.received()
		if !bytes.HasPrefix(from.sent, got) {
			i := 0
			for i < len(got) && i < len(from.sent) && got[i] == from.sent[i] {
				i++
			}
			t.Fatalf("%s received %d bytes that differ from what %s sent at byte %d", to.name, len(got), from.name, i)
		}
		if exact && len(got) != len(from.sent) {
			t.Fatalf("%s received %d of the %d bytes %s sent", to.name, len(got), len(from.sent), from.name)
		}
	}
}

// checkEnd: the proxy's connection line names one of the reasons want.
func (s *modelScript) checkEnd(t *testing.T, rig *modelRig, want ...string) {
	t.Helper()
	var lines []observer.LoggedEntry
	testutil.Eventually(t, 10*time.Second, "the connection's log line", func() bool {
		lines = rig.logs.FilterMessage(connLogMsg).All()
		return len(lines) > 0
	})
	if len(lines) != 1 {
		t.Fatalf("%d connection lines, want 1", len(lines))
	}
	end := lines[0].ContextMap()["end"]
	for _, w := range want {
		if end == w {
			return
		}
	}
	t.Fatalf("the connection ended %v, want one of %v", end, want)
}
