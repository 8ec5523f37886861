// Pipes for splice(2), pooled so that a burst of traffic does not open and
// close descriptors per chunk.
package proxy

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// DefaultPipeSize is the pipe capacity asked of the kernel (F_SETPIPE_SZ).
const DefaultPipeSize = 1 << 20

// pipe is a kernel pipe used to splice one chunk from a socket to another.
// It is empty whenever it is in the pool.
type pipe struct {
	r, w    int
	cleanup runtime.Cleanup
}

// PipePool lends empty pipes. Pipes dropped by the pool under memory
// pressure are closed by a runtime cleanup, so descriptors never leak.
type PipePool struct {
	size int
	pool sync.Pool
	open atomic.Int64 // pipes whose descriptors are open
	lent atomic.Int64 // pipes out of the pool right now
}

// NewPipePool makes a pool of pipes of size bytes (DefaultPipeSize if 0).
func NewPipePool(size int) *PipePool {
	if size <= 0 {
		size = DefaultPipeSize
	}
	return &PipePool{size: size}
}

// Size is the capacity of the pool's pipes as asked of the kernel.
func (pp *PipePool) Size() int { return pp.size }

// Open returns the number of pipes with open descriptors (lent or pooled).
func (pp *PipePool) Open() int64 { return pp.open.Load() }

// Lent returns the number of pipes in use by connections right now; an
// idle connection holds none.
func (pp *PipePool) Lent() int64 { return pp.lent.Load() }

func (pp *PipePool) get() (*pipe, error) {
	p, ok := pp.pool.Get().(*pipe)
	if !ok {
		var err error
		if p, err = pp.newPipe(); err != nil {
			return nil, err
		}
	}
	pp.lent.Add(1)
	return p, nil
}

// put returns an empty pipe to the pool.
func (pp *PipePool) put(p *pipe) {
	pp.lent.Add(-1)
	pp.pool.Put(p)
}

// discard closes a pipe that may still hold data (its peer failed).
func (pp *PipePool) discard(p *pipe) {
	pp.lent.Add(-1)
	p.cleanup.Stop()
	closePipe([2]int{p.r, p.w})
	pp.open.Add(-1)
}

func (pp *PipePool) newPipe() (*pipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, fmt.Errorf("pipe2: %w", err)
	}
	// A smaller pipe than asked for still works, only with more syscalls,
	// so a refused F_SETPIPE_SZ (pipe-max-size) is not an error.
	_, _ = unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, pp.size)
	p := &pipe{r: fds[0], w: fds[1]}
	open := &pp.open
	open.Add(1)
	p.cleanup = runtime.AddCleanup(p, func(fds [2]int) {
		closePipe(fds)
		open.Add(-1)
	}, fds)
	return p, nil
}

func closePipe(fds [2]int) {
	_ = unix.Close(fds[0])
	_ = unix.Close(fds[1])
}
