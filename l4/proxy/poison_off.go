//go:build !l4lbpoison

// Without the l4lbpoison build tag, a finished connection or session
// struct goes straight back to its loop's free list and the liveness
// assertions cost nothing (see poison_on.go).

package proxy

// poisoning reports whether this build poisons freed structs.
const poisoning = false

// mustLive asserts that c was not freed (a no-op in this build).
func (c *evConn) mustLive() {}

// mustLive asserts that sess was not freed (a no-op in this build).
func (sess *loopSession) mustLive() {}

// freeConn takes a finished connection struct back.
func (l *loop) freeConn(c *evConn) { l.recycleConn(c) }

// freeSession takes a closed session struct back.
func (l *loop) freeSession(sess *loopSession) { l.recycleSession(sess) }
