// Pipes for splice(2), pooled so that a burst of traffic does not open and
// close descriptors per chunk.

package proxy

import (
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// DefaultPipeSize is the pipe capacity asked of the kernel (F_SETPIPE_SZ).
const DefaultPipeSize = 1 << 20

// maxIdlePipes bounds the pool's free lists: enough for every core to have
// several transfers in flight, small enough that idle pipes cost little
// (two descriptors and a few KiB of kernel memory each).
const maxIdlePipes = 256

// pipeShards splits the free list so that directions on different cores
// rarely meet on one lock: each direction keeps to one shard.
const pipeShards = 16

// pipe is a kernel pipe used to splice one chunk from a socket to another.
// It is empty whenever it is in the pool.
type pipe struct {
	r, w int
}

// PipePool lends empty pipes from bounded free lists. Unlike a sync.Pool,
// the lists survive garbage collections: a GC that emptied them would make
// every busy connection open and size a new pipe, which profiling showed
// as 15% of the CPU at a high connection rate. The lists are sharded, so
// the hot path takes no process-wide lock.
type PipePool struct {
	size  int
	max   atomic.Int64 // pipes open at once at most; 0 = no cap
	free  [pipeShards]chan *pipe
	shard atomic.Uint32 // hands out shards to directions in turn
	open  atomic.Int64  // pipes whose descriptors are open
	lent  atomic.Int64  // pipes out of the pool right now
}

// NewPipePool makes a pool of pipes of size bytes (DefaultPipeSize if 0).
func NewPipePool(size int) *PipePool {
	if size <= 0 {
		size = DefaultPipeSize
	}
	pp := &PipePool{size: size}
	for i := range pp.free {
		pp.free[i] = make(chan *pipe, maxIdlePipes/pipeShards)
	}
	return pp
}

// nextShard assigns a free list to a new direction.
func (pp *PipePool) nextShard() int { return int(pp.shard.Add(1) % pipeShards) }

// Size is the capacity of the pool's pipes as asked of the kernel.
func (pp *PipePool) Size() int { return pp.size }

// Open returns the number of pipes with open descriptors (lent or pooled).
func (pp *PipePool) Open() int64 { return pp.open.Load() }

// Lent returns the number of pipes in use by connections right now; an
// idle connection holds none.
func (pp *PipePool) Lent() int64 { return pp.lent.Load() }

// errPipeLimit is a pipe refused because max_pipes are open.
var errPipeLimit = errors.New("max_pipes pipes are open")

// SetMax caps the pipes open at once (0 = no cap). Pipes already open
// above a lowered cap close as they come back.
func (pp *PipePool) SetMax(n int) { pp.max.Store(int64(max(n, 0))) }

// Max returns the cap on open pipes; 0 = none.
func (pp *PipePool) Max() int { return int(pp.max.Load()) }

func (pp *PipePool) get(shard int) (*pipe, error) {
	var p *pipe
	select {
	case p = <-pp.free[shard]:
	default:
		if m := pp.max.Load(); m > 0 && pp.open.Load() >= m {
			return nil, errPipeLimit
		}
		var err error
		if p, err = pp.newPipe(); err != nil {
			return nil, err
		}
	}
	pp.lent.Add(1)
	return p, nil
}

// put returns an empty pipe to the pool, or closes it when the free list
// is full.
func (pp *PipePool) put(shard int, p *pipe) {
	pp.lent.Add(-1)
	if m := pp.max.Load(); m > 0 && pp.open.Load() > m {
		pp.close(p)
		return
	}
	select {
	case pp.free[shard] <- p:
	default:
		pp.close(p)
	}
}

// overMax reports whether more pipes are open than the cap allows.
func (pp *PipePool) overMax() bool {
	m := pp.max.Load()
	return m > 0 && pp.open.Load() > m
}

// adopt takes in a pipe another process handed over with bytes in it (an
// upgrade), as lent: it comes back by put once empty, or discard.
func (pp *PipePool) adopt(r, w int) *pipe {
	pp.open.Add(1)
	pp.lent.Add(1)
	return &pipe{r: r, w: w}
}

// discard closes a pipe that may still hold data (its peer failed).
func (pp *PipePool) discard(p *pipe) {
	pp.lent.Add(-1)
	pp.close(p)
}

// Close closes the pooled pipes. Pipes lent out close when returned.
func (pp *PipePool) Close() {
	for _, free := range pp.free {
	drain:
		for {
			select {
			case p := <-free:
				pp.close(p)
			default:
				break drain
			}
		}
	}
}

func (pp *PipePool) close(p *pipe) {
	_ = unix.Close(p.r)
	_ = unix.Close(p.w)
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
	pp.open.Add(1)
	return &pipe{r: fds[0], w: fds[1]}, nil
}
