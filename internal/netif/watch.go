// watch.go: noticing route, neighbour and link changes, for callers that keep state derived from them.

package netif

import (
	"fmt"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// resubscribeAfter is how long Watch waits before subscribing again to a
// group whose subscription ended (the kernel dropped messages on a full
// socket buffer, ENOBUFS, or the socket failed).
const resubscribeAfter = time.Second

// Watch reports changes of routes (IPv4 and IPv6), neighbours and links in
// h's namespace: the returned channel receives a value after any of them,
// coalesced (a burst gives one or a few values; a reader that is slow
// misses none, it only sees fewer). A subscription that ends (messages
// lost) is made again after a second, and that also sends a value, since
// changes may have been missed. Everything stops when done is closed.
// Watch reads no state itself: the caller asks again for what it keeps.
// It holds its own reference to the namespace, so h may be closed before
// done.
func (h *Handle) Watch(done <-chan struct{}) (<-chan struct{}, error) {
	fd, err := unix.FcntlInt(uintptr(h.ns), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("watch: namespace: %w", err)
	}
	ns := netns.NsHandle(fd)
	out := make(chan struct{}, 1)
	signal := func() {
		select {
		case out <- struct{}{}:
		default: // a value is pending already
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		watchGroup(done, signal, func(stop chan struct{}, errs func(error)) (<-chan netlink.RouteUpdate, error) {
			ch := make(chan netlink.RouteUpdate, 64)
			return ch, netlink.RouteSubscribeWithOptions(ch, stop, netlink.RouteSubscribeOptions{Namespace: &ns, ErrorCallback: errs})
		})
	})
	wg.Go(func() {
		watchGroup(done, signal, func(stop chan struct{}, errs func(error)) (<-chan netlink.NeighUpdate, error) {
			ch := make(chan netlink.NeighUpdate, 64)
			return ch, netlink.NeighSubscribeWithOptions(ch, stop, netlink.NeighSubscribeOptions{Namespace: &ns, ErrorCallback: errs})
		})
	})
	wg.Go(func() {
		watchGroup(done, signal, func(stop chan struct{}, errs func(error)) (<-chan netlink.LinkUpdate, error) {
			ch := make(chan netlink.LinkUpdate, 64)
			return ch, netlink.LinkSubscribeWithOptions(ch, stop, netlink.LinkSubscribeOptions{Namespace: &ns, ErrorCallback: errs})
		})
	})
	go func() {
		wg.Wait()
		ns.Close()
	}()
	return out, nil
}

// watchGroup keeps one subscription alive until done, calling signal for
// every message and after every (re)subscription but the first.
func watchGroup[T any](done <-chan struct{}, signal func(), subscribe func(stop chan struct{}, errs func(error)) (<-chan T, error)) {
	for first := true; ; first = false {
		stop := make(chan struct{})
		ch, err := subscribe(stop, func(error) {})
		if err == nil {
			if !first {
				signal()
			}
			ended := forward(done, ch, signal)
			close(stop)
			go drain(ch) // the subscription may still be sending
			if ended {
				return
			}
		} else {
			close(stop)
		}
		select {
		case <-done:
			return
		case <-time.After(resubscribeAfter):
		}
	}
}

// forward calls signal for every message on ch until done (true) or until
// the subscription closes ch (false).
func forward[T any](done <-chan struct{}, ch <-chan T, signal func()) bool {
	for {
		select {
		case <-done:
			return true
		case _, ok := <-ch:
			if !ok {
				return false
			}
			signal()
		}
	}
}

// drain reads ch until its subscription closes it.
func drain[T any](ch <-chan T) {
	for range ch {
	}
}
