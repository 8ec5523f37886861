// delayline.go: a user-space delay line on a TUN device (netem's delay, which this kernel lacks).

package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// delayQueueLen bounds the packets held at once: about 6 MB of full
	// frames, more than 20 ms at the line's ~1 Gbit/s ceiling.
	delayQueueLen = 4096
	// tunReadBuf fits any packet a TUN without offloads hands out.
	tunReadBuf = 65536
)

// delayedPacket is a packet read from the TUN and the CLOCK_MONOTONIC time
// at which it goes back.
type delayedPacket struct {
	data    []byte
	release unix.Timespec
}

// delayLine reads every packet the kernel routes into its TUN device, holds
// it for delay and writes it back, so the kernel forwards it on. Packets
// keep their order: one line has one delay, so FIFO is release order.
type delayLine struct {
	name    string
	delay   time.Duration
	tun     *os.File
	queue   chan delayedPacket
	done    chan struct{}
	wg      sync.WaitGroup
	readErr error // set by readLoop before it closes queue

	passed  atomic.Uint64
	dropped atomic.Uint64
}

// openTUN creates TUN device name (IFF_TUN|IFF_NO_PI) in the calling
// thread's network namespace. The device lives as long as the file.
func openTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("tun %s: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	// Non-blocking, so the file is pollable and Close wakes a blocked Read.
	return os.NewFile(uintptr(fd), "tun:"+name), nil
}

// startDelayLine runs a delay line on tun until stop.
func startDelayLine(tun *os.File, name string, delay time.Duration) *delayLine {
	l := &delayLine{
		name:  name,
		delay: delay,
		tun:   tun,
		queue: make(chan delayedPacket, delayQueueLen),
		done:  make(chan struct{}),
	}
	l.wg.Add(2)
	go l.readLoop()
	go l.writeLoop()
	return l
}

// readLoop timestamps each packet on arrival and queues it, dropping (and
// counting) when the queue is full. It ends when the TUN is closed.
func (l *delayLine) readLoop() {
	defer l.wg.Done()
	defer close(l.queue)
	buf := make([]byte, tunReadBuf)
	for {
		n, err := l.tun.Read(buf)
		if err != nil {
			l.readErr = err
			return
		}
		p := delayedPacket{data: bytes.Clone(buf[:n]), release: monotonicAfter(l.delay)}
		select {
		case l.queue <- p:
		default:
			l.dropped.Add(1)
		}
	}
}

// writeLoop writes each packet back at its release time. It sleeps with
// clock_nanosleep on a locked OS thread: a Go timer would add ~0.2 ms.
func (l *delayLine) writeLoop() {
	defer l.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for p := range l.queue {
		if l.stopping() {
			continue // drain without sleeping so stop is quick
		}
		sleepUntil(p.release)
		if _, err := l.tun.Write(p.data); err != nil {
			l.dropped.Add(1)
			continue
		}
		l.passed.Add(1)
	}
}

// stopping reports whether stop has begun.
func (l *delayLine) stopping() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// stop closes the TUN (removing the device), waits for both goroutines and
// returns a read error other than the close itself.
func (l *delayLine) stop() error {
	close(l.done)
	cerr := l.tun.Close()
	l.wg.Wait()
	if cerr != nil {
		return fmt.Errorf("delay line %s: close: %w", l.name, cerr)
	}
	if l.readErr != nil && !errors.Is(l.readErr, os.ErrClosed) {
		return fmt.Errorf("delay line %s: read: %w", l.name, l.readErr)
	}
	return nil
}

// monotonicAfter returns CLOCK_MONOTONIC now plus d.
func monotonicAfter(d time.Duration) unix.Timespec {
	var now unix.Timespec
	// CLOCK_MONOTONIC cannot fail on Linux; a zero time would only mean no wait.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &now)
	return unix.NsecToTimespec(now.Nano() + d.Nanoseconds())
}

// sleepUntil blocks the calling thread until CLOCK_MONOTONIC reaches at;
// an absolute deadline makes retrying after EINTR exact.
func sleepUntil(at unix.Timespec) {
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &at, nil) == unix.EINTR {
	}
}
