// The daemon's signals, read as the requests they are: a stop is never
// lost behind other signals, and SIGHUPs that arrive while a reload waits
// or runs make one more reload, not one each.

package daemon

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/l4lb/l4lb/internal/upgrade"
)

// signals holds one channel per kind of request. signal.Notify never
// blocks: it drops a signal whose channel is full, so one channel shared
// by every kind let a few SIGHUPs crowd a SIGTERM out.
type signals struct {
	// stop: SIGTERM and SIGINT. Room for two, so that a second one sent
	// right after the first still cuts the drain short.
	stop chan os.Signal
	// reload: SIGHUP, and reloads the previous l4lb passed on. One slot:
	// those that arrive while one waits coalesce into it.
	reload chan os.Signal
	// upgrade: SIGUSR2, one slot.
	upgrade chan os.Signal
	// passed: a stop the previous l4lb received during or after the
	// upgrade that started this one, and passed on (upgrade.PassedOn). It
	// stops this process like a SIGTERM but is never a second signal.
	passed chan os.Signal
}

// notifySignals starts catching the daemon's signals.
func notifySignals() *signals {
	s := &signals{stop: make(chan os.Signal, 2), reload: make(chan os.Signal, 1),
		upgrade: make(chan os.Signal, 1), passed: make(chan os.Signal, 1)}
	signal.Notify(s.stop, syscall.SIGTERM, syscall.SIGINT)
	signal.Notify(s.reload, syscall.SIGHUP)
	signal.Notify(s.upgrade, syscall.SIGUSR2)
	return s
}

// close stops catching them.
func (s *signals) close() {
	signal.Stop(s.stop)
	signal.Stop(s.reload)
	signal.Stop(s.upgrade)
}

// pendingStop takes a stop already asked for, without waiting; nil if
// there is none.
func (s *signals) pendingStop() os.Signal {
	select {
	case sig := <-s.stop:
		return sig
	case sig := <-s.passed:
		return sig
	default:
		return nil
	}
}

// TakeStop waits for a stop until done is closed (then nil): an upgrade
// that a stop cancels while the new process starts (upgrade.Stops).
func (s *signals) TakeStop(done <-chan struct{}) os.Signal {
	select {
	case <-done:
		return nil
	case sig := <-s.stop:
		return sig
	case sig := <-s.passed:
		return sig
	}
}

// PutBack returns a stop taken while something else ran (an upgrade it
// cancelled) for the loop to act on.
func (s *signals) PutBack(sig os.Signal) {
	ch := s.stop
	if _, ok := sig.(upgrade.PassedOn); ok {
		ch = s.passed
	}
	select {
	case ch <- sig:
	default: // a stop is pending already
	}
}

// offer queues a request without waiting; a full slot already holds one.
func offer(ch chan os.Signal, sig os.Signal) {
	select {
	case ch <- sig:
	default:
	}
}
