// One direction of a proxied TCP connection, moved with splice(2).
package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
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

	// State of the RawConn callbacks, which are method values bound once in
	// init: a closure per call would allocate per chunk.
	pipe           *pipe // the pipe borrowed for the chunk in flight
	n              int   // bytes spliced in (fill) or still to write (drain)
	wrote          int   // bytes the last drain call wrote
	serr           error // the callback's syscall error
	fillFn, sendFn func(fd uintptr) bool
	shard          int  // the pipe pool's free list this direction uses
	noPipe         bool // the last fill failed to get a pipe
}

func (d *direction) init(c *tcpConn, src, dst *net.TCPConn, bytes *atomic.Uint64) error {
	*d = direction{src: src, dst: dst, conn: c, pipes: c.svc.pipes, bytes: bytes}
	d.fillFn, d.sendFn = d.fillCallback, d.sendCallback
	d.shard = d.pipes.nextShard()
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
		if noPipe, ok := err.(*noPipeError); ok {
			eof, failed, e := d.copyWithoutPipe(noPipe.err)
			if failed {
				return e
			}
			if !eof {
				continue
			}
			err, n = nil, 0
		}
		if err != nil {
			return d.classify(err, endSrcErr)
		}
		if n == 0 {
			if d.conn.running.Load() == 1 {
				// The other direction is done: the close that follows
				// sends dst its FIN, so a shutdown would be one more
				// syscall for nothing.
				return endEOF
			}
			if err := d.dst.CloseWrite(); err != nil {
				return d.classify(err, endDstErr)
			}
			return endEOF
		}
		if err := d.drain(p, n); err != nil {
			d.pipes.discard(p)
			return d.classify(err, endDstErr)
		}
		d.pipes.put(d.shard, p)
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
		if err != nil && d.noPipe && (localFailure(err) || err == errPipeLimit) {
			return nil, 0, &noPipeError{err}
		}
		return p, n, err
	}
}

// noPipeError is a pipe that could not be opened: max_pipes are open, or
// local resources (descriptors, memory) ran out.
type noPipeError struct{ err error }

func (e *noPipeError) Error() string { return e.err.Error() }
func (e *noPipeError) Unwrap() error { return e.err }

// copyWithoutPipe moves one chunk through a user-space buffer when no pipe
// can be opened: slower, but a descriptor shortage must not reset healthy
// connections, and copying frees the very descriptors others wait for.
// It returns eof when src has sent FIN, failed with how the direction
// ended when it failed.
func (d *direction) copyWithoutPipe(cause error) (eof, failed bool, e end) {
	svc := d.conn.svc
	svc.Stats.PipelessCopies.Add(1)
	if cause == errPipeLimit {
		svc.rateLog("max_pipes reached: copying in user space", zap.Int("max_pipes", d.pipes.Max()))
	} else {
		svc.Stats.LocalErrors.Add(1)
		svc.pressure.Store(time.Now().UnixNano())
		svc.rateLog("cannot open a pipe: local resources exhausted; copying in user space, accepting paused", zap.Error(cause))
	}
	buf := svc.copyBufs.Get().(*[]byte)
	defer svc.copyBufs.Put(buf)
	var n int
	for {
		var err error
		n, err = d.src.Read(*buf)
		if n > 0 {
			break
		}
		switch {
		case err == io.EOF:
			return true, false, 0
		case err != nil && os.IsTimeout(err):
			if err := d.conn.extendRead(d.src); err != nil {
				return false, true, d.classify(err, endSrcErr)
			}
		case err != nil:
			return false, true, d.classify(err, endSrcErr)
		}
	}
	if !d.writeDeadline {
		// A peer that stops reading must not hold this copy past the
		// idle timeout.
		if err := d.armWriteDeadline(); err != nil {
			return false, true, d.classify(err, endDstErr)
		}
	}
	for off := 0; off < n; {
		m, err := d.dst.Write((*buf)[off:n])
		off += m
		d.moved += uint64(m)
		d.bytes.Add(uint64(m))
		if err == nil {
			continue
		}
		if !os.IsTimeout(err) {
			return false, true, d.classify(err, endDstErr)
		}
		if err := d.conn.extendWrite(d.dst); err != nil {
			return false, true, d.classify(err, endDstErr)
		}
	}
	d.conn.touch()
	return false, false, 0
}

func (d *direction) fillOnce() (*pipe, int, error) {
	d.pipe, d.n, d.serr, d.noPipe = nil, 0, nil, false
	err := d.srcRaw.Read(d.fillFn)
	if err == nil {
		err = d.serr
	}
	p, n := d.pipe, d.n
	d.pipe = nil
	if err != nil || n == 0 {
		if p != nil {
			d.pipes.put(d.shard, p) // a failed or EOF splice leaves the pipe empty
		}
		return nil, 0, err
	}
	return p, n, nil
}

// fillCallback is the src read callback: false parks until readable.
func (d *direction) fillCallback(fd uintptr) bool {
	if d.pipe == nil {
		if d.pipe, d.serr = d.pipes.get(d.shard); d.serr != nil {
			d.noPipe = true
			return true
		}
	}
	d.n, d.serr = spliceRetry(int(fd), d.pipe.w, d.pipes.size)
	if d.serr == unix.EAGAIN {
		// Nothing to read: give the pipe back before parking, so an idle
		// connection holds no pipe.
		d.pipes.put(d.shard, d.pipe)
		d.pipe, d.serr = nil, nil
		return false
	}
	return true
}

// drain splices n bytes from the pipe to dst, waiting for writability as
// needed. The pipe is empty when it returns nil.
func (d *direction) drain(p *pipe, n int) error {
	d.pipe, d.n = p, n
	defer func() { d.pipe = nil }()
	for d.n > 0 {
		d.wrote, d.serr = 0, nil
		err := d.dstRaw.Write(d.sendFn)
		if err == nil {
			err = d.serr
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
		m := uint64(d.wrote)
		d.n -= d.wrote
		d.moved += m
		d.bytes.Add(m)
		d.conn.touch()
	}
	return nil
}

// sendCallback is the dst write callback: false parks until writable.
func (d *direction) sendCallback(fd uintptr) bool {
	d.wrote, d.serr = spliceRetry(d.pipe.r, int(fd), d.n)
	// Before the first wait, come out to set the idle deadline.
	return d.serr != unix.EAGAIN || !d.writeDeadline
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
