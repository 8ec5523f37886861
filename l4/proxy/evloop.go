// Event loops: one locked OS thread per loop with its own epoll set, the
// data plane's scheduler for TCP connections (see evconn.go).

package proxy

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Loops is a set of event loops, one per core by default. Each loop owns
// the connections it accepted end to end: their sockets, pipes and timers
// are touched by its thread only, so the per-connection path takes no lock
// and wakes no goroutine. Other goroutines (reloads, drains, status) reach
// a loop by posting it a task.
type Loops struct {
	loops []*loop
	wg    sync.WaitGroup
}

// NewLoops starts n event loops (n <= 0: one per GOMAXPROCS).
func NewLoops(n int, pipes *PipePool) (*Loops, error) {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	ls := &Loops{}
	base := time.Now() // one clock for all loops: they compare each other's times (see saturated)
	for i := range n {
		l, err := newLoop(i, pipes, base)
		if err != nil {
			ls.Close()
			return nil, err
		}
		ls.loops = append(ls.loops, l)
		ls.wg.Add(1)
		go func() { defer ls.wg.Done(); l.run() }()
	}
	return ls, nil
}

// Len returns the number of loops.
func (ls *Loops) Len() int { return len(ls.loops) }

// Sessions returns the UDP sessions each loop owns now (all services).
func (ls *Loops) Sessions() []int64 {
	out := make([]int64, len(ls.loops))
	for i, l := range ls.loops {
		out[i] = l.sessions.Load()
	}
	return out
}

// Conns returns the connections each loop owns now (all services).
func (ls *Loops) Conns() []int64 {
	out := make([]int64, len(ls.loops))
	for i, l := range ls.loops {
		out[i] = l.live.Load()
	}
	return out
}

// SetBusyPoll sets how long each loop polls for events before it sleeps
// (0: it sleeps at once). Loops read it before each wait.
func (ls *Loops) SetBusyPoll(d time.Duration) {
	for _, l := range ls.loops {
		l.busyPoll.Store(int64(d))
	}
}

// BusyPoll returns what SetBusyPoll set.
func (ls *Loops) BusyPoll() time.Duration {
	if len(ls.loops) == 0 {
		return 0
	}
	return time.Duration(ls.loops[0].busyPoll.Load())
}

// Close stops the loops (after the services on them closed) and waits.
func (ls *Loops) Close() {
	for _, l := range ls.loops {
		l.post(func() { l.stopping = true })
	}
	ls.wg.Wait()
	for _, l := range ls.loops {
		l.release()
	}
}

// each runs fn on every loop and waits until all have run it.
func (ls *Loops) each(fn func(l *loop)) {
	var wg sync.WaitGroup
	for _, l := range ls.loops {
		wg.Add(1)
		l.post(func() { defer wg.Done(); fn(l) })
	}
	wg.Wait()
}

// handler receives a registered descriptor's events on its loop.
type handler interface {
	onEvent(l *loop, events uint32)
}

// timed receives a timer on its loop. gen is the value it gave when it
// armed the timer; a timed that re-armed since ignores older ones.
type timed interface {
	onTimer(l *loop, gen uint32)
	// pending reports whether a timer armed with gen still matters: one
	// that does not (its connection ended or re-armed) may be dropped
	// before it fires.
	pending(gen uint32) bool
}

// loop is one event loop.
type loop struct {
	id     int
	epfd   int
	wakefd int // eventfd: another goroutine posted a task
	base   time.Time
	clock  int64 // nanoseconds since base at the start of this round (see now)

	// Owned by the loop's thread.
	handlers   []handler // by slot; nil = free
	gens       []uint32  // by slot: bumped when the slot is freed
	free       []int32   // free slots
	timers     timerHeap
	compactAt  int // compact the timers when there are this many (compactTimers)
	events     [128]unix.EpollEvent
	peer       unix.RawSockaddrInet6 // accept4 writes the client's address here
	hdr        [maxProxyHeader]byte  // a PROXY header being sent
	buf        []byte                // copy-mode bounce buffer, shared by the loop's connections
	pipes      []*pipe               // a small local free list before the shared pool
	pool       *PipePool
	shard      int
	conns      map[*evConn]struct{}
	freeConns  []*evConn
	gen        uint32
	stopping   bool
	stallArmed bool        // a stallCheck timer is armed (evstall.go)
	kicks      []stallKick // connections the stall check moves on (evstall.go)
	hooks      loopHooks   // fault injection (tests only; evstall.go)
	// waiting are the connections waiting for a PROXY header or a first
	// byte, before any backend: not in conns (they have no backend), but
	// a drain's final reset must reach them.
	waiting      map[*evConn]struct{}
	again        []againEntry // work left over: another turn after this round's events
	again2       []againEntry // the list being worked through (reused)
	flushes      []*udpSock   // UDP sockets with replies to send at the end of the round
	freeSessions []*loopSession
	logFields    [maxLogFields]zap.Field // a connection's log line being written
	logText      [64]byte                // its client address
	handing      []handingConn           // connections frozen for an upgrade's handover, still flushing
	quarantine   *quarantine             // freed structs not yet reused (l4lbpoison builds only)

	mu     sync.Mutex // guards tasks and inbox
	tasks  []func()
	inbox  []handoff      // connections other loops accepted for this one
	ended  []endedSession // UDP sessions other goroutines ended, for this loop to close
	ended2 []endedSession
	inbox2 []handoff   // the inbox being worked through (reused, so that a handoff allocates nothing)
	woken  atomic.Bool // a wake is pending: posters need not write the eventfd again
	// awakeSince is the loop clock when the loop last left epoll_wait; 0
	// while it waits there (see saturated).
	awakeSince atomic.Int64
	busyPoll   atomic.Int64 // nanoseconds to poll before sleeping (see poll); set by SetBusyPoll
	live       atomic.Int64 // connections owned: connecting or proxying
	tid        atomic.Int32 // the loop's OS thread (a test signals it)
	sessions   atomic.Int64 // UDP sessions owned
}

func newLoop(id int, pipes *PipePool, base time.Time) (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	l := &loop{id: id, epfd: epfd, wakefd: wakefd, base: base, compactAt: minCompactTimers, buf: make([]byte, copyChunk),
		pool: pipes, shard: pipes.nextShard(), conns: map[*evConn]struct{}{}, waiting: map[*evConn]struct{}{}}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		l.release()
		return nil, fmt.Errorf("epoll_ctl eventfd: %w", err)
	}
	return l, nil
}

func (l *loop) release() {
	for _, h := range l.inbox { // handed over as the loops stopped: nobody will serve them
		unix.Close(h.fd)
	}
	l.inbox = nil
	for _, p := range l.pipes {
		l.pool.put(l.shard, p)
	}
	l.pipes = nil
	unix.Close(l.wakefd)
	unix.Close(l.epfd)
}

// now is the loop's monotonic clock in nanoseconds, read once per round
// of events (connections arm timers and note activity many times a
// round; the clock needs no finer grain than the timers' milliseconds).
func (l *loop) now() int64 { return l.clock }

func (l *loop) tick() { l.clock = int64(time.Since(l.base)) + 1 } // never 0: awakeSince uses 0

// post runs fn on the loop's thread soon.
func (l *loop) post(fn func()) {
	l.mu.Lock()
	l.tasks = append(l.tasks, fn)
	l.mu.Unlock()
	l.wake()
}

// run is the loop: wait for events and timers, dispatch, run tasks.
func (l *loop) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	l.tid.Store(int32(unix.Gettid()))
	l.tick()
	yielded := l.clock
	for !l.stopping {
		l.awakeSince.Store(0)
		n, err := l.poll()
		l.tick()
		l.awakeSince.Store(l.clock)
		if err != nil && err != unix.EINTR {
			panic(fmt.Sprintf("proxy: epoll_wait: %v", err)) // a bad epoll fd: nothing can go on
		}
		if l.clock-yielded > int64(yieldEvery) {
			// A goroutine that never yields looks stuck to the runtime:
			// after 10ms it signals the thread to preempt it, takes its
			// P away in the middle of a syscall and keeps its monitor
			// thread polling every 20µs, which costs more than this.
			runtime.Gosched()
			yielded = l.clock
		}
		for i := 0; i < n; i++ {
			l.dispatch(&l.events[i])
		}
		l.fireTimers()
		l.runTasks()
		l.runAgain()
		l.flushAll()
	}
}

// againer is something that used its turn with work left: a connection
// with bytes to move, a socket with datagrams to read.
type againer interface {
	again(l *loop, gen uint32)
}

// againEntry is an againer waiting for its next turn.
type againEntry struct {
	t   againer
	gen uint32 // which use of a reused struct it was
}

// runAgain gives the connections on the again list another turn.
func (l *loop) runAgain() {
	if len(l.again) == 0 {
		return
	}
	turn := l.again
	l.again = l.again2[:0]
	for i, e := range turn {
		e.t.again(l, e.gen)
		turn[i] = againEntry{}
	}
	l.again2 = turn
}

// poll waits for events. With busy polling on, a loop that would sleep
// first polls without a timeout for up to busyPoll: an event that comes
// meanwhile is served without the sleep and the wake-up, which on a
// virtual machine cost tens of microseconds each.
func (l *loop) poll() (int, error) {
	t := l.timeout()
	spin := time.Duration(l.busyPoll.Load())
	if t == 0 || spin <= 0 {
		return unix.EpollWait(l.epfd, l.events[:], t)
	}
	start := time.Now()
	for {
		n, err := unix.EpollWait(l.epfd, l.events[:], 0)
		if n != 0 || err != nil {
			return n, err
		}
		if time.Since(start) >= spin {
			break
		}
	}
	l.tick() // the timers' wait counts from now
	return unix.EpollWait(l.epfd, l.events[:], l.timeout())
}

// timeout is how long epoll_wait may sleep: until the next timer.
func (l *loop) timeout() int {
	if len(l.again) > 0 {
		return 0
	}
	if len(l.timers) == 0 {
		return -1
	}
	d := l.timers[0].at - l.now()
	if d <= 0 {
		return 0
	}
	return int((d + int64(time.Millisecond) - 1) / int64(time.Millisecond))
}

func (l *loop) dispatch(ev *unix.EpollEvent) {
	slot := ev.Fd
	if slot < 0 {
		var b [8]byte
		_, _ = readRetry(l.wakefd, b[:])
		return
	}
	if int(slot) >= len(l.handlers) || l.gens[slot] != uint32(ev.Pad) || l.handlers[slot] == nil {
		return // the descriptor was closed earlier in this batch
	}
	l.handlers[slot].onEvent(l, ev.Events)
}

// handOff gives the loop a connection another loop accepted.
func (l *loop) handOff(h handoff) {
	l.mu.Lock()
	l.inbox = append(l.inbox, h)
	l.mu.Unlock()
	l.wake()
}

func (l *loop) wake() {
	if !l.woken.Swap(true) {
		one := [8]byte{1}
		_, _ = writeRetry(l.wakefd, one[:])
	}
}

func (l *loop) runTasks() {
	l.woken.Store(false)
	l.mu.Lock()
	tasks := l.tasks
	l.tasks = nil
	in := l.inbox
	l.inbox = l.inbox2[:0]
	ended := l.ended
	l.ended = l.ended2[:0]
	l.mu.Unlock()
	l.closeEnded(ended)
	l.ended2 = ended[:0]
	for i, h := range in {
		h.s.startConn(l, h.fd, h.src)
		in[i] = handoff{}
	}
	l.inbox2 = in
	for _, t := range tasks {
		t()
	}
}

// reg is a descriptor registered with a loop.
type reg struct {
	fd     int
	slot   int32
	events uint32 // the interest set in force
}

// add registers fd with events for h.
func (l *loop) add(fd int, events uint32, h handler) (reg, error) {
	var slot int32
	if n := len(l.free); n > 0 {
		slot, l.free = l.free[n-1], l.free[:n-1]
	} else {
		slot = int32(len(l.handlers))
		l.handlers = append(l.handlers, nil)
		l.gens = append(l.gens, 0)
	}
	ev := unix.EpollEvent{Events: events, Fd: slot, Pad: int32(l.gens[slot])}
	if err := epollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.free = append(l.free, slot)
		return reg{}, err
	}
	l.handlers[slot] = h
	return reg{fd: fd, slot: slot, events: events}, nil
}

// forget frees r's slot; closing the descriptor takes it out of the epoll
// set (withdraw does that for a descriptor that stays open).
func (l *loop) forget(r *reg) {
	if r.slot < 0 {
		return
	}
	l.handlers[r.slot] = nil
	l.gens[r.slot]++
	l.free = append(l.free, r.slot)
	r.slot = -1
}

// withdraw takes an open descriptor out of the epoll set and frees its slot.
func (l *loop) withdraw(r *reg) {
	if r.slot < 0 {
		return
	}
	_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, r.fd, nil)
	l.forget(r)
}

// after arms a timer for t in d.
func (l *loop) after(d time.Duration, t timed, gen uint32) {
	if len(l.timers) >= l.compactAt {
		l.compactTimers()
	}
	l.timers.push(timerEntry{at: l.now() + int64(d), t: t, gen: gen})
}

// compactTimers drops the timers that no longer matter. An ended
// connection's idle timer would otherwise stay in the heap until its
// deadline (an hour by default): at thousands of connections a second,
// millions of entries. Compacting when the heap has doubled since the
// last compaction keeps it within about twice the timers that matter, at
// an amortized constant cost per timer.
func (l *loop) compactTimers() {
	live := l.timers[:0]
	for _, e := range l.timers {
		if e.t.pending(e.gen) {
			live = append(live, e)
		}
	}
	clear(l.timers[len(live):])
	l.timers = live
	l.timers.init()
	l.compactAt = max(2*len(live), minCompactTimers)
}

// minCompactTimers is the heap size below which timers are never compacted.
const minCompactTimers = 1024

func (l *loop) fireTimers() {
	now := l.now()
	for len(l.timers) > 0 && l.timers[0].at <= now {
		e := l.timers.pop()
		e.t.onTimer(l, e.gen)
	}
}

// getPipe lends a pipe: from the loop's own list, else the shared pool.
func (l *loop) getPipe() (*pipe, error) {
	if n := len(l.pipes); n > 0 {
		p := l.pipes[n-1]
		l.pipes = l.pipes[:n-1]
		l.pool.lent.Add(1)
		return p, nil
	}
	return l.pool.get(l.shard)
}

// putPipe takes back an empty pipe.
func (l *loop) putPipe(p *pipe) {
	if len(l.pipes) < loopPipes && !l.pool.overMax() {
		l.pool.lent.Add(-1)
		l.pipes = append(l.pipes, p)
		return
	}
	l.pool.put(l.shard, p)
}

// yieldEvery is how often a loop yields to the Go scheduler (under the
// runtime's 10ms preemption threshold).
const yieldEvery = 8 * time.Millisecond

// loopPipes is how many empty pipes a loop keeps for itself.
const loopPipes = 8

// timerEntry is one armed timer.
type timerEntry struct {
	at  int64
	t   timed
	gen uint32
}

// timerHeap is a binary min-heap of timers by deadline (typed, so that
// arming a timer does not box an interface value).
type timerHeap []timerEntry

func (h *timerHeap) push(e timerEntry) {
	*h = append(*h, e)
	t := *h
	for i := len(t) - 1; i > 0; {
		up := (i - 1) / 2
		if t[up].at <= t[i].at {
			break
		}
		t[up], t[i] = t[i], t[up]
		i = up
	}
}

func (h *timerHeap) pop() timerEntry {
	t := *h
	e := t[0]
	last := len(t) - 1
	t[0] = t[last]
	t[last] = timerEntry{}
	t = t[:last]
	t.down(0)
	*h = t
	return e
}

// init restores the heap order of any slice of timers.
func (h timerHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// down moves the timer at i down to its place.
func (t timerHeap) down(i int) {
	for {
		small, l, r := i, 2*i+1, 2*i+2
		if l < len(t) && t[l].at < t[small].at {
			small = l
		}
		if r < len(t) && t[r].at < t[small].at {
			small = r
		}
		if small == i {
			break
		}
		t[i], t[small] = t[small], t[i]
		i = small
	}
}

// errLoopsClosed: the loops were stopped.
var errLoopsClosed = errors.New("event loops closed")

// quarantine holds a loop's freed connection and session structs for a
// while before they are reused, each with where it was freed, in
// l4lbpoison builds (poison_on.go); others have none. Rings allocated
// once: freeing allocates nothing, in either build.
type quarantine struct {
	conns    [quarantineLen]freedConn
	sessions [quarantineLen]freedSession
	nc, ns   int // the next slot of each ring
}

// quarantineLen is how many freed structs of each kind a loop holds
// before reusing the oldest: far more than one callback chain frees.
const quarantineLen = 256

type freedConn struct {
	c   *evConn
	rec freeRecord
}

type freedSession struct {
	s   *loopSession
	rec freeRecord
}

// freeRecord is the stack that freed a struct.
type freeRecord struct {
	pcs [16]uintptr
	n   int
}
