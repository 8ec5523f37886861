// After the handover, until the old process exits: the stops and reloads
// it still gets are passed on to the new one, which acts on them.

package upgrade

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Successor is the process an upgrade handed over to, as the old one sees
// it while it drains what it kept: the stops and reloads this one still
// gets are the service's, and go to the new one over the socketpair (a
// message, not a signal: a stop sent to both processes at once, by
// `kill $(pidof l4lb)`, must not reach the new one as a second stop that
// resets its connections). A new process that no longer reads the
// socketpair (an older l4lb) gets the signal itself.
type Successor struct {
	child *upgradeChild
	log   *zap.Logger
}

// PassStop passes a stop (SIGTERM, SIGINT) on; nil-safe.
func (s *Successor) PassStop(sig os.Signal) { s.pass(opStop, sig) }

// PassReload passes a reload (SIGHUP) on; nil-safe.
func (s *Successor) PassReload(sig os.Signal) { s.pass(opReload, sig) }

// pass sends op (opStop or opReload), asked by sig, on; nil-safe.
func (s *Successor) pass(op string, sig os.Signal) {
	if s == nil {
		return
	}
	pid := s.child.pid()
	err := s.child.conn.send(&handoffMsg{Op: op, Signal: sig.String(), PID: os.Getpid()}, nil)
	if err != nil {
		fallback := syscall.SIGHUP
		if op == opStop {
			fallback = syscall.SIGTERM
		}
		if serr := s.child.cmd.Process.Signal(fallback); serr != nil {
			s.log.Warn("signal not passed on: the new process is gone", zap.Stringer("signal", sig), zap.Int("new_pid", pid), zap.Error(serr))
			return
		}
	}
	s.log.Info("signal passed on to the new process, which serves", zap.Stringer("signal", sig), zap.String("request", op), zap.Int("new_pid", pid))
}

// Close ends the socketpair; nil-safe.
func (s *Successor) Close() {
	if s != nil {
		s.child.conn.Close()
	}
}

// heedPredecessor takes the stops and reloads the old process passes on
// (it got them during the upgrade, or while it drains what it kept) until
// it exits and the socketpair closes.
func (h *Heir) heedPredecessor(c *handoffConn) {
	defer c.Close()
	for {
		m, fds, err := c.recv(time.Time{})
		if err != nil {
			return
		}
		closeFDs(fds)
		sig := PassedOn{Name: m.Signal, PID: m.PID}
		switch m.Op {
		case opStop:
			h.Log.Info("the previous l4lb passed a stop on", zap.Stringer("signal", sig))
			h.Passed(true, sig)
		case opReload:
			h.Log.Info("the previous l4lb passed a reload on", zap.Stringer("signal", sig))
			h.Passed(false, sig)
		default:
			h.Log.Error("upgrade: unexpected message from the old process", zap.String("op", m.Op))
		}
	}
}

// PassedOn is a signal that the previous l4lb received after it started
// this one, and passed on: the stop or reload of the service, whichever
// process holds it.
type PassedOn struct {
	Name string // the signal's, as the previous process named it
	PID  int    // the previous process
}

func (p PassedOn) String() string { return fmt.Sprintf("%s (passed on by pid %d)", p.Name, p.PID) }

// Signal makes PassedOn an os.Signal.
func (PassedOn) Signal() {}
