// One direction of a proxied TCP connection, moved with splice(2).
package proxy

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// end says how one direction of a proxied connection stopped.
type end uint8

const (
	endEOF    end = iota // src sent FIN; dst was shut for writing
	endSrcErr            // src failed (reset, timeout): the peer of src must be reset
	endDstErr            // dst failed: src must be reset
	endIdle              // no bytes either way for the idle timeout
	endClosed            // the connection was torn down elsewhere
)

// direction moves bytes from src to dst until src ends or fails.
type direction struct {
	src, dst       *net.TCPConn
	srcRaw, dstRaw syscall.RawConn
	conn           *tcpConn
	pipes          *PipePool
	bytes          *atomic.Uint64 // the backend's counter for this direction
	moved          uint64         // bytes this direction moved
	err            error          // the failure behind endSrcErr / endDstErr
	writeDeadline  bool           // dst has its idle write deadline
}

func (d *direction) init(c *tcpConn, src, dst *net.TCPConn, bytes *atomic.Uint64) error {
	*d = direction{src: src, dst: dst, conn: c, pipes: c.svc.pipes, bytes: bytes}
	var err error
	if d.srcRaw, err = src.SyscallConn(); err != nil {
		return err
	}
	d.dstRaw, err = dst.SyscallConn()
	return err
}

// run moves bytes until src sends FIN (then dst is shut for writing) or
// something fails.
func (d *direction) run() end {
	for {
		p, n, err := d.fill()
		if err != nil {
			return d.classify(err, endSrcErr)
		}
		if n == 0 {
			if err := d.dst.CloseWrite(); err != nil {
				return d.classify(err, endDstErr)
			}
			return endEOF
		}
		if err := d.drain(p, n); err != nil {
			d.pipes.discard(p)
			return d.classify(err, endDstErr)
		}
		d.pipes.put(p)
	}
}

func (d *direction) classify(err error, e end) end {
	switch {
	case errors.Is(err, errIdle):
		return endIdle
	case errors.Is(err, net.ErrClosed):
		return endClosed
	}
	d.err = err
	return e
}

// fill waits until src is readable, then borrows a pipe and splices what the
// socket holds into it. n == 0 with a nil error is EOF. On EOF or error no
// pipe is held.
func (d *direction) fill() (*pipe, int, error) {
	for {
		p, n, err := d.fillOnce()
		if err != nil && os.IsTimeout(err) {
			if err := d.conn.extendRead(d.src); err != nil {
				return nil, 0, err
			}
			continue
		}
		return p, n, err
	}
}

func (d *direction) fillOnce() (*pipe, int, error) {
	var (
		p    *pipe
		n    int
		serr error
	)
	err := d.srcRaw.Read(func(fd uintptr) bool {
		if p == nil {
			if p, serr = d.pipes.get(); serr != nil {
				return true
			}
		}
		n, serr = spliceRetry(int(fd), p.w, d.pipes.size)
		if serr == unix.EAGAIN {
			// Nothing to read: give the pipe back before parking, so an
			// idle connection holds no pipe.
			d.pipes.put(p)
			p, serr = nil, nil
			return false
		}
		return true
	})
	if err == nil {
		err = serr
	}
	if err != nil || n == 0 {
		if p != nil {
			d.pipes.put(p) // a failed or EOF splice leaves the pipe empty
		}
		return nil, 0, err
	}
	return p, n, nil
}

// drain splices n bytes from the pipe to dst, waiting for writability as
// needed. The pipe is empty when it returns nil.
func (d *direction) drain(p *pipe, n int) error {
	for n > 0 {
		var (
			m    int
			serr error
		)
		err := d.dstRaw.Write(func(fd uintptr) bool {
			m, serr = spliceRetry(p.r, int(fd), n)
			// Before the first wait, come out to set the idle deadline.
			return serr != unix.EAGAIN || !d.writeDeadline
		})
		if err == nil {
			err = serr
		}
		if err == unix.EAGAIN {
			if err := d.armWriteDeadline(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			if !os.IsTimeout(err) {
				return err
			}
			if err := d.conn.extendWrite(d.dst); err != nil {
				return err
			}
			continue
		}
		n -= m
		d.moved += uint64(m)
		d.bytes.Add(uint64(m))
		d.conn.touch()
	}
	return nil
}

// armWriteDeadline gives dst its idle write deadline the first time a write
// must wait: request/response traffic rarely waits and pays nothing.
func (d *direction) armWriteDeadline() error {
	d.writeDeadline = true
	if d.conn.idle <= 0 {
		return nil
	}
	dl := d.conn.idleDeadline()
	if !time.Now().Before(dl) {
		return errIdle
	}
	return d.dst.SetWriteDeadline(dl)
}

// spliceRetry splices up to n bytes without blocking, retrying EINTR.
func spliceRetry(from, to, n int) (int, error) {
	for {
		w, err := unix.Splice(from, nil, to, nil, n, unix.SPLICE_F_NONBLOCK|unix.SPLICE_F_MOVE)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		return int(w), nil
	}
}
