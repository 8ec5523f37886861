//go:build l4lbpoison

// Built with the l4lbpoison tag (as `make test` builds), a freed
// connection or UDP session is poisoned: its state says freed, its
// pointers are nil, it records where it was freed, and it waits in a
// quarantine of its loop before anything reuses it. Every method of a
// connection or session asserts it is live first (TestMethodsAssertLive
// holds that), so code that goes on using one after a call that ended it
// panics at once with both stacks, instead of reading a zeroed struct or,
// worse, acting on the next connection that reuses it.

package proxy

import (
	"fmt"
	"runtime"
	"strings"
)

const poisoning = true

func (c *evConn) mustLive() {
	if c.state == evFreed {
		panic("proxy: use of a freed connection; it was freed at:\n" + c.freed.String())
	}
}

func (sess *loopSession) mustLive() {
	if sess.freed != nil {
		panic("proxy: use of a freed UDP session; it was freed at:\n" + sess.freed.String())
	}
}

func (l *loop) freeConn(c *evConn) {
	q := l.quarantined()
	e := &q.conns[q.nc]
	q.nc = (q.nc + 1) % quarantineLen
	if e.c != nil {
		l.recycleConn(e.c) // the oldest leaves the quarantine
	}
	e.c = c
	e.rec.n = runtime.Callers(2, e.rec.pcs[:])
	*c = evConn{gen: c.gen, state: evFreed, freed: &e.rec}
}

func (l *loop) freeSession(sess *loopSession) {
	q := l.quarantined()
	e := &q.sessions[q.ns]
	q.ns = (q.ns + 1) % quarantineLen
	if e.s != nil {
		l.recycleSession(e.s)
	}
	e.s = sess
	e.rec.n = runtime.Callers(2, e.rec.pcs[:])
	*sess = loopSession{gen: sess.gen, freed: &e.rec}
}

// quarantined returns the loop's quarantine, made on first use.
func (l *loop) quarantined() *quarantine {
	if l.free.quarantine == nil {
		l.free.quarantine = new(quarantine)
	}
	return l.free.quarantine
}

// String formats the stack.
func (r *freeRecord) String() string {
	var b strings.Builder
	frames := runtime.CallersFrames(r.pcs[:r.n])
	for {
		f, more := frames.Next()
		fmt.Fprintf(&b, "\t%s\n\t\t%s:%d\n", f.Function, f.File, f.Line)
		if !more {
			return b.String()
		}
	}
}
