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

// quarantineLen is how many freed structs of each kind a loop holds before
// reusing the oldest: far more than one callback chain can free.
const quarantineLen = 256

func (c *evConn) mustLive() {
	if c.state == evFreed {
		panic(fmt.Sprintf("proxy: use of a freed connection; it was freed at:\n%s", c.freedAt))
	}
}

func (sess *loopSession) mustLive() {
	if sess.freedAt != "" {
		panic(fmt.Sprintf("proxy: use of a freed UDP session; it was freed at:\n%s", sess.freedAt))
	}
}

func (l *loop) freeConn(c *evConn) {
	*c = evConn{gen: c.gen, state: evFreed, freedAt: freeSite()}
	l.quarantine.conns = append(l.quarantine.conns, c)
	if len(l.quarantine.conns) > quarantineLen {
		old := l.quarantine.conns[0]
		l.quarantine.conns = append(l.quarantine.conns[:0], l.quarantine.conns[1:]...)
		l.recycleConn(old)
	}
}

func (l *loop) freeSession(sess *loopSession) {
	*sess = loopSession{gen: sess.gen, freedAt: freeSite()}
	l.quarantine.sessions = append(l.quarantine.sessions, sess)
	if len(l.quarantine.sessions) > quarantineLen {
		old := l.quarantine.sessions[0]
		l.quarantine.sessions = append(l.quarantine.sessions[:0], l.quarantine.sessions[1:]...)
		l.recycleSession(old)
	}
}

// freeSite is the stack of the code that freed a struct.
func freeSite() string {
	pc := make([]uintptr, 12)
	n := runtime.Callers(3, pc)
	frames := runtime.CallersFrames(pc[:n])
	var b strings.Builder
	for {
		f, more := frames.Next()
		fmt.Fprintf(&b, "\t%s\n\t\t%s:%d\n", f.Function, f.File, f.Line)
		if !more {
			return b.String()
		}
	}
}
