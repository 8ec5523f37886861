// The per-connection log (log_connections): one line when a TCP
// connection or a UDP session ends, written on its loop as it is freed,
// never on the per-chunk or per-datagram path, and rate-limited per VIP.

package proxy

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/l4lb/l4lb/l4"
)

// Messages of the log lines, for whoever reads them.
const (
	connLogMsg    = "connection"
	sessionLogMsg = "udp session"
)

// lineLimit bounds a service's log lines to a rate a second, over windows
// of one second of the loops' shared clock. Any loop may take a line; the
// counters are atomics, so a window's count can be off by a line or two
// where two loops cross a second together.
type lineLimit struct {
	lost    *atomic.Uint64 // the service's count of dropped lines
	window  atomic.Int64   // the second the counts are for
	used    atomic.Int64   // lines written in that second
	dropped atomic.Uint64  // lines dropped since the last summary
}

// take reports whether a line may be written at loop clock now (rate <= 0:
// always). When a new second starts it also returns how many lines were
// dropped since the last summary, for the caller to say so in one warning.
func (r *lineLimit) take(now int64, rate int) (ok bool, dropped uint64) {
	if rate <= 0 {
		return true, 0
	}
	sec := now / int64(time.Second)
	if w := r.window.Load(); w != sec && r.window.CompareAndSwap(w, sec) {
		r.used.Store(0)
		dropped = r.dropped.Swap(0)
	}
	if r.used.Add(1) > int64(rate) {
		r.dropped.Add(1)
		r.lost.Add(1)
		return false, dropped
	}
	return true, dropped
}

// check returns the entry of a line about to be written on loop l, or nil
// when the log level hides it or it is over the rate (then it is counted,
// and reported in the first line of a later second). The entry is taken
// last: one taken and not written would be lost to zap's pool.
func (r *lineLimit) check(l *loop, log *zap.Logger, msg string, rate int) *zapcore.CheckedEntry {
	if !log.Core().Enabled(zap.InfoLevel) {
		return nil
	}
	ok, n := r.take(l.now(), rate)
	if n > 0 {
		log.Warn("connection log lines dropped: over log_connections_rate", zap.Uint64("dropped", n), zap.Int("log_connections_rate", rate))
	}
	if !ok {
		return nil
	}
	return log.Check(zap.InfoLevel, msg)
}

// logConn writes c's line, if its settings ask for one: who, where to,
// how long, how many bytes each way, and why it ended. It runs once per
// connection, as the loop frees it; off, it costs a branch. The VIP's name
// comes from the service logger's context (the runtime's vip key).
func (s *TCPService) logConn(l *loop, c *evConn, why l4.EndReason) {
	c.mustLive()
	if !c.st.LogConnections {
		return
	}
	ce := s.logs.lines.check(l, s.log, connLogMsg, s.settings.Load().LogRate) // the rate in force now
	if ce == nil {
		return
	}
	now := l.now()
	f := l.scratch.logFields[:0]
	f = append(f, zap.String("client", string(c.flow.Src.AppendTo(l.scratch.logText[:0]))))
	if c.pick.lastTried != nil {
		f = append(f, zap.String("backend", string(c.pick.lastTried.ID)))
	}
	f = append(f, zap.String("end", why.String()))
	if c.times.connectAt != 0 {
		f = append(f, zap.Duration("connect_time", time.Duration(c.times.connectAt-c.times.acceptAt)))
	}
	f = append(f, zap.Duration("duration", time.Duration(now-c.times.acceptAt)),
		zap.Uint64("bytes_in", c.up.n), zap.Uint64("bytes_out", c.down.n), zap.Int("retries", max(int(c.pick.attempts)-1, 0)))
	if c.pick.early > 0 {
		f = append(f, zap.Int("early_resets", int(c.pick.early))) // of the retries, those after an early reset (evretry.go)
	}
	ce.Write(f...)
	clear(f)
}

// logSession writes a UDP session's line, if its VIP's settings asked for
// one when the session began: datagrams and bytes each way.
func (s *UDPService) logSession(l *loop, sess *loopSession, why l4.EndReason) {
	if !sess.log {
		return
	}
	st := s.settings.Load()
	ce := s.connLog.check(l, s.log, sessionLogMsg, st.LogRate)
	if ce == nil {
		return
	}
	f := append(l.scratch.logFields[:0],
		zap.String("client", string(sess.client.AppendTo(l.scratch.logText[:0]))),
		zap.String("backend", string(sess.backend.ID)), zap.String("end", why.String()),
		zap.Duration("duration", time.Duration(l.now()-sess.startAt)),
		zap.Uint64("datagrams_in", sess.datagramsIn), zap.Uint64("datagrams_out", uint64(sess.sent)),
		zap.Uint64("bytes_in", sess.bytesIn), zap.Uint64("bytes_out", sess.bytesOut))
	ce.Write(f...)
	clear(f)
}

// maxLogFields is the most fields a connection's line has.
const maxLogFields = 10
