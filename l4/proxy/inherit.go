// Listening sockets that outlive a process (an upgrade): a running VIP's
// sockets are duplicated for the next l4lb, which adopts them instead of
// binding; meanwhile the old process pauses accepting on the shared
// socket, so the kernel's listen queue is never without a reader.

package proxy

import (
	"errors"
	"fmt"
	"net"
	"os"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// dupFD duplicates fd with close-on-exec.
func dupFD(fd int) (int, error) {
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("dup: %w", err)
	}
	return nfd, nil
}

// ListenerFD returns a duplicate of the VIP's listening socket for
// another process; the caller closes it. The runtime calls it while no
// reload can close the service.
func (s *TCPService) ListenerFD() (int, error) {
	if s.ev.closed.Load() {
		return -1, net.ErrClosed
	}
	return dupFD(s.ev.fd)
}

// PauseAccepting stops (true) or resumes (false) this process accepting on
// the VIP's listener, which stays open: another process that holds the
// same socket accepts meanwhile, and clients wait in the shared listen
// queue, never refused. It returns once every loop has applied it.
func (s *TCPService) PauseAccepting(pause bool) {
	e := s.ev
	e.paused.Store(pause)
	e.loops.each(func(l *loop) { s.syncAccept(l) })
}

// AdoptTCPListener takes a listening TCP socket another process passed
// (fd is consumed either way) and applies opts to it as ListenTCP would:
// the accepted sockets inherit the listener's options.
func AdoptTCPListener(fd int, opts ListenOptions) (*net.TCPListener, error) {
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
		unix.Close(fd)
		return nil, errors.New("adopt listener: not a listening socket")
	}
	f := os.NewFile(uintptr(fd), "listener")
	ln, err := net.FileListener(f) // a dup of its own
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("adopt listener: %w", err)
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		ln.Close()
		return nil, errors.New("adopt listener: not a TCP socket")
	}
	raw, err := tl.SyscallConn()
	if err == nil {
		err = deferAcceptRaw(raw, opts.DeferAccept)
	}
	if err == nil {
		err = setNoDelayRaw(raw)
	}
	if err == nil {
		err = setKeepAliveRaw(raw, opts.KeepAlive)
	}
	if err != nil {
		tl.Close()
		return nil, fmt.Errorf("adopt listener %s: %w", tl.Addr(), err)
	}
	return tl, nil
}

// GroupFDs returns duplicates of the VIP's sockets, one per loop in loop
// order (a SO_REUSEPORT group: the kernel hashes a flow to a member by its
// position, so the next process keeps the order); the caller closes them.
func (s *UDPService) GroupFDs() ([]int, error) {
	var out []int
	for _, vs := range s.ev.socks {
		fd, err := dupFD(vs.fd)
		if err != nil {
			for _, f := range out {
				unix.Close(f)
			}
			return nil, err
		}
		out = append(out, fd)
	}
	return out, nil
}

// PauseReading stops (true) or resumes (false) this process reading the
// VIP's sockets, which stay open: another process holding the same
// sockets reads them meanwhile. Sessions keep relaying replies. It
// returns once every loop has applied it.
func (s *UDPService) PauseReading(pause bool) {
	e := s.ev
	e.paused.Store(pause)
	e.loops.each(func(l *loop) {
		vs := e.socks[l.id]
		switch {
		case vs.closed:
		case pause && vs.reg.slot >= 0:
			l.withdraw(&vs.reg)
			vs.readable = false // an again turn queued before finds nothing to do
		case !pause && vs.reg.slot < 0:
			r, err := l.add(vs.fd, udpEvents, vs)
			if err != nil {
				s.log.Error("cannot watch the udp socket again", zap.Stringer("listen", s.key), zap.Error(err))
				return
			}
			vs.reg = r
			vs.readable = true // datagrams may have queued meanwhile
			vs.read(l)
		}
	})
}
