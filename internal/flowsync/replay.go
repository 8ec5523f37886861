// Replay protection: a sliding window of sequence numbers per sender, and
// a bound on how far a datagram's timestamp may be from this clock.

package flowsync

import "time"

// MaxSkew is how far a datagram's timestamp may be from this balancer's
// clock: a recorded datagram replayed later than this is refused even by
// a receiver that restarted and forgot the sender's sequence numbers.
const MaxSkew = 30 * time.Second

// maxSenders bounds the senders remembered; past it the one heard from
// least recently is forgotten.
const maxSenders = 256

// window is one sender's sequence numbers: the highest seen and a bitmap
// of the 64 below it (RFC 4303's anti-replay window).
type window struct {
	top  uint64
	seen uint64 // bit i: top-i was seen
	last time.Time
}

// accept reports whether seq is new for the window, and records it.
func (w *window) accept(seq uint64) bool {
	switch {
	case seq == 0:
		return false
	case seq > w.top:
		shift := seq - w.top
		if shift >= 64 {
			w.seen = 1
		} else {
			w.seen = w.seen<<shift | 1
		}
		w.top = seq
		return true
	case w.top-seq >= 64:
		return false // too old to tell
	}
	bit := uint64(1) << (w.top - seq)
	if w.seen&bit != 0 {
		return false
	}
	w.seen |= bit
	return true
}

// replays holds the windows of the senders heard from.
type replays struct {
	self    uint64 // this process's own sender id: its datagrams are ignored
	senders map[uint64]*window
}

func newReplays(self uint64) *replays {
	return &replays{self: self, senders: map[uint64]*window{}}
}

// check reports whether a datagram of h, received at now, is fresh.
func (r *replays) check(h Header, now time.Time) bool {
	if h.Sender == r.self {
		return false
	}
	if d := now.Sub(time.Unix(0, h.Time)); d > MaxSkew || d < -MaxSkew {
		return false
	}
	w := r.senders[h.Sender]
	if w == nil {
		if len(r.senders) >= maxSenders {
			r.forgetOldest()
		}
		w = &window{}
		r.senders[h.Sender] = w
	}
	if !w.accept(h.Seq) {
		return false
	}
	w.last = now
	return true
}

func (r *replays) forgetOldest() {
	var oldest uint64
	var at time.Time
	first := true
	for id, w := range r.senders {
		if first || w.last.Before(at) {
			oldest, at, first = id, w.last, false
		}
	}
	delete(r.senders, oldest)
}
