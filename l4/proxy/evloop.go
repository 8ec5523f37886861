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
		out[i] = l.shared.sessions.Load()
	}
	return out
}

// Conns returns the connections each loop owns now (all services).
func (ls *Loops) Conns() []int64 {
	out := make([]int64, len(ls.loops))
	for i, l := range ls.loops {
		out[i] = l.shared.live.Load()
	}
	return out
}

// SetBusyPoll sets how long each loop polls for events before it sleeps
// (0: it sleeps at once). Loops read it before each wait.
func (ls *Loops) SetBusyPoll(d time.Duration) {
	for _, l := range ls.loops {
		l.shared.busyPoll.Store(int64(d))
	}
}

// BusyPoll returns what SetBusyPoll set.
func (ls *Loops) BusyPoll() time.Duration {
	if len(ls.loops) == 0 {
		return 0
	}
	return time.Duration(ls.loops[0].shared.busyPoll.Load())
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

// loop is one event loop. Its fields are grouped by concern into
// sub-structs, and by owner (STYLE 7): the loop's thread owns everything
// but posted (other goroutines post work there, under its lock) and
// shared (atomics other goroutines read or set).
type loop struct {
	id     int
	epfd   int
	wakefd int // eventfd: another goroutine posted a task
	base   time.Time
	clock  int64 // nanoseconds since base at the start of this round (see now)

	slots   loopSlots
	timers  timerQueue
	scratch loopScratch
	pipes   pipeCache
	// conns are the open connections (proxying or closing); waiting,
	// the ones in a pre-read stage or waiting for a backend slot: not in
	// conns (they have no backend), but a drain's final reset must reach
	// them; handing, the ones frozen for an upgrade's handover, still
	// flushing.
	conns    map[*evConn]struct{}
	waiting  map[*evConn]struct{}
	handing  []handingConn
	kern     map[*evConn]*kernConn // connections forwarded in the kernel (evkernel.go)
	free     loopFree
	gen      uint32 // the last generation handed out (nextGen)
	stopping bool
	stall    stallGuard
	hooks    loopHooks    // fault injection (tests only; evstall.go)
	again    []againEntry // work left over: another turn after this round's events
	again2   []againEntry // the list being worked through (reused)
	flushes  []*udpSock   // UDP sockets with replies to send at the end of the round
	replays  replayTable  // client bytes kept for a retry after an early reset (evretry.go)

	posted loopPosted
	shared loopShared
}

// loopSlots are the descriptors registered with a loop, by slot: an
// epoll event carries its slot and the slot's generation, so an event
// for a descriptor closed earlier in the same batch finds a new
// generation and is dropped.
type loopSlots struct {
	handlers []handler // nil = free
	gens     []uint32  // bumped when the slot is freed
	free     []int32   // free slots
}

// timerQueue is a loop's timers, earliest first.
type timerQueue struct {
	heap      timerHeap
	compactAt int // compact the heap when it holds this many (compactTimers)
}

// loopScratch are buffers the loop's connections and sessions share, each
// for the length of one call: nothing per connection, nothing allocated.
type loopScratch struct {
	events    [128]unix.EpollEvent
	peer      unix.RawSockaddrInet6   // accept4 writes the client's address here
	hdr       [maxProxyHeader]byte    // a PROXY header being sent
	buf       []byte                  // copy-mode bounce buffer; pre-read peeks
	logFields [maxLogFields]zap.Field // a connection's log line being written
	logText   [64]byte                // its client address
}

// pipeCache is a loop's share of the pipe pool: a few empty pipes of its
// own before the shared pool's shard.
type pipeCache struct {
	free  []*pipe // a small local free list before the shared pool
	pool  *PipePool
	shard int
}

// loopFree holds the structs of ended connections and sessions for
// reuse.
type loopFree struct {
	conns      []*evConn
	apps       []*appConn // app_protocol trackers (evboundary.go)
	sessions   []*loopSession
	quarantine *quarantine // freed structs not yet reused (l4lbpoison builds only)
}

// stallGuard is a loop's state of the guard against a lost EPOLLOUT edge
// (evstall.go).
type stallGuard struct {
	armed bool        // a stallCheck timer is armed
	kicks []stallKick // connections the stall check moves on
}

// loopPosted is work other goroutines post to the loop: mu guards tasks,
// inbox and ended; inbox2 and ended2 are the lists being worked through,
// the loop's own (reused, so that a handoff allocates nothing); woken is
// set without the lock.
type loopPosted struct {
	mu     sync.Mutex
	tasks  []func()
	inbox  []handoff      // connections other loops accepted for this one
	ended  []endedSession // UDP sessions other goroutines ended, for this loop to close
	inbox2 []handoff
	ended2 []endedSession
	woken  atomic.Bool // a wake is pending: posters need not write the eventfd again
}

// loopShared are what other goroutines read or set of a loop, atomically.
type loopShared struct {
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
	l := &loop{id: id, epfd: epfd, wakefd: wakefd, base: base,
		timers:  timerQueue{compactAt: minCompactTimers},
		scratch: loopScratch{buf: make([]byte, copyChunk)},
		pipes:   pipeCache{pool: pipes, shard: pipes.nextShard()},
		conns:   map[*evConn]struct{}{}, waiting: map[*evConn]struct{}{}, kern: map[*evConn]*kernConn{}}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		l.release()
		return nil, fmt.Errorf("epoll_ctl eventfd: %w", err)
	}
	return l, nil
}

func (l *loop) release() {
	for _, h := range l.posted.inbox { // handed over as the loops stopped: nobody will serve them
		unix.Close(h.fd)
	}
	l.posted.inbox = nil
	for _, p := range l.pipes.free {
		l.pipes.pool.put(l.pipes.shard, p)
	}
	l.pipes.free = nil
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
	l.posted.mu.Lock()
	l.posted.tasks = append(l.posted.tasks, fn)
	l.posted.mu.Unlock()
	l.wake()
}

// run is the loop: wait for events and timers, dispatch, run tasks.
func (l *loop) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	l.shared.tid.Store(int32(unix.Gettid()))
	l.tick()
	yielded := l.clock
	for !l.stopping {
		l.shared.awakeSince.Store(0)
		n, err := l.poll()
		l.tick()
		l.shared.awakeSince.Store(l.clock)
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
			l.dispatch(&l.scratch.events[i])
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
	spin := time.Duration(l.shared.busyPoll.Load())
	if t == 0 || spin <= 0 {
		return unix.EpollWait(l.epfd, l.scratch.events[:], t)
	}
	start := time.Now()
	for {
		n, err := unix.EpollWait(l.epfd, l.scratch.events[:], 0)
		if n != 0 || err != nil {
			return n, err
		}
		if time.Since(start) >= spin {
			break
		}
	}
	l.tick() // the timers' wait counts from now
	return unix.EpollWait(l.epfd, l.scratch.events[:], l.timeout())
}

// timeout is how long epoll_wait may sleep: until the next timer.
func (l *loop) timeout() int {
	if len(l.again) > 0 {
		return 0
	}
	if len(l.timers.heap) == 0 {
		return -1
	}
	d := l.timers.heap[0].at - l.now()
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
	if int(slot) >= len(l.slots.handlers) || l.slots.gens[slot] != uint32(ev.Pad) || l.slots.handlers[slot] == nil {
		return // the descriptor was closed earlier in this batch
	}
	l.slots.handlers[slot].onEvent(l, ev.Events)
}

// handOff gives the loop a connection another loop accepted.
func (l *loop) handOff(h handoff) {
	l.posted.mu.Lock()
	l.posted.inbox = append(l.posted.inbox, h)
	l.posted.mu.Unlock()
	l.wake()
}

func (l *loop) wake() {
	if !l.posted.woken.Swap(true) {
		one := [8]byte{1}
		_, _ = writeRetry(l.wakefd, one[:])
	}
}

func (l *loop) runTasks() {
	l.posted.woken.Store(false)
	l.posted.mu.Lock()
	tasks := l.posted.tasks
	l.posted.tasks = nil
	in := l.posted.inbox
	l.posted.inbox = l.posted.inbox2[:0]
	ended := l.posted.ended
	l.posted.ended = l.posted.ended2[:0]
	l.posted.mu.Unlock()
	l.closeEnded(ended)
	l.posted.ended2 = ended[:0]
	for i, h := range in {
		h.s.startConn(l, h.fd, h.src)
		in[i] = handoff{}
	}
	l.posted.inbox2 = in
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
	if n := len(l.slots.free); n > 0 {
		slot, l.slots.free = l.slots.free[n-1], l.slots.free[:n-1]
	} else {
		slot = int32(len(l.slots.handlers))
		l.slots.handlers = append(l.slots.handlers, nil)
		l.slots.gens = append(l.slots.gens, 0)
	}
	ev := unix.EpollEvent{Events: events, Fd: slot, Pad: int32(l.slots.gens[slot])}
	if err := epollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.slots.free = append(l.slots.free, slot)
		return reg{}, err
	}
	l.slots.handlers[slot] = h
	return reg{fd: fd, slot: slot, events: events}, nil
}

// modify changes the events r is registered for (same slot, same
// generation).
func (l *loop) modify(r *reg, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: r.slot, Pad: int32(l.slots.gens[r.slot])}
	if err := epollCtl(l.epfd, unix.EPOLL_CTL_MOD, r.fd, &ev); err != nil {
		return err
	}
	r.events = events
	return nil
}

// forget frees r's slot; closing the descriptor takes it out of the epoll
// set (withdraw does that for a descriptor that stays open).
func (l *loop) forget(r *reg) {
	if r.slot < 0 {
		return
	}
	l.slots.handlers[r.slot] = nil
	l.slots.gens[r.slot]++
	l.slots.free = append(l.slots.free, r.slot)
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
	if len(l.timers.heap) >= l.timers.compactAt {
		l.compactTimers()
	}
	l.timers.heap.push(timerEntry{at: l.now() + int64(d), t: t, gen: gen})
}

// compactTimers drops the timers that no longer matter. An ended
// connection's idle timer would otherwise stay in the heap until its
// deadline (an hour by default): at thousands of connections a second,
// millions of entries. Compacting when the heap has doubled since the
// last compaction keeps it within about twice the timers that matter, at
// an amortized constant cost per timer.
func (l *loop) compactTimers() {
	live := l.timers.heap[:0]
	for _, e := range l.timers.heap {
		if e.t.pending(e.gen) {
			live = append(live, e)
		}
	}
	clear(l.timers.heap[len(live):])
	l.timers.heap = live
	l.timers.heap.init()
	l.timers.compactAt = max(2*len(live), minCompactTimers)
}

// minCompactTimers is the heap size below which timers are never compacted.
const minCompactTimers = 1024

func (l *loop) fireTimers() {
	now := l.now()
	for len(l.timers.heap) > 0 && l.timers.heap[0].at <= now {
		e := l.timers.heap.pop()
		e.t.onTimer(l, e.gen)
	}
}

// getPipe lends a pipe: from the loop's own list, else the shared pool.
func (l *loop) getPipe() (*pipe, error) {
	if n := len(l.pipes.free); n > 0 {
		p := l.pipes.free[n-1]
		l.pipes.free = l.pipes.free[:n-1]
		l.pipes.pool.lent.Add(1)
		return p, nil
	}
	return l.pipes.pool.get(l.pipes.shard)
}

// putPipe takes back an empty pipe.
func (l *loop) putPipe(p *pipe) {
	if len(l.pipes.free) < loopPipes && !l.pipes.pool.overMax() {
		l.pipes.pool.lent.Add(-1)
		l.pipes.free = append(l.pipes.free, p)
		return
	}
	l.pipes.pool.put(l.pipes.shard, p)
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
