// handle.go: a netlink connection bound to one network namespace, and the errors callers branch on.

package netif

import (
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

var (
	// ErrNoInterface: no interface has the name or index asked for.
	ErrNoInterface = errors.New("no such interface")
	// ErrNoRoute: the kernel has no usable route to the address
	// (unreachable, prohibited or no matching route at all).
	ErrNoRoute = errors.New("no route")
	// ErrNotOnLink: the address is reached through a gateway, so it has no
	// MAC of its own on this segment (L2 forwarding needs one).
	ErrNotOnLink = errors.New("not on a directly connected segment")
	// ErrLocal: the address belongs to this host.
	ErrLocal = errors.New("address is local")
	// ErrUnresolved: the neighbour did not answer ARP/ND in time.
	ErrUnresolved = errors.New("neighbour not resolved")
	// ErrNotSupported: the kernel lacks a feature (managed neighbours need
	// Linux >= 5.16).
	ErrNotSupported = errors.New("not supported by this kernel")
	// ErrMTU: the path cannot carry a full packet plus the encapsulation.
	ErrMTU = errors.New("path MTU too small for encapsulation")
)

// requestTimeout bounds every netlink request, so that a wedged socket
// turns into an error instead of a stuck control loop.
const requestTimeout = 5 * time.Second

// dumpRetries is how often a dump that the kernel interrupted (the table
// changed while it was read) is asked for again before giving up.
const dumpRetries = 5

// Handle is a route-netlink connection bound to one network namespace. Its
// methods may be called from any goroutine. Close it when done.
type Handle struct {
	nl *netlink.Handle
	// raw is a second route-netlink socket in the same namespace, for
	// requests the netlink package cannot express (a neighbour entry's
	// NDA_PROTOCOL mark: neighproto.go).
	raw map[int]*nl.SocketHandle
	ns  netns.NsHandle // the namespace, for subscriptions (Watch)
}

// Open binds a Handle to the network namespace of the calling thread, as
// it is at the time of the call.
func Open() (*Handle, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("netns of the calling thread: %w", err)
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	return newHandle(h, ns)
}

// OpenPath binds a Handle to the network namespace at path, such as
// /run/netns/NAME or /proc/PID/ns/net. The calling thread's namespace is
// left unchanged.
func OpenPath(path string) (*Handle, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", path, err)
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netlink handle in %s: %w", path, err)
	}
	return newHandle(h, ns)
}

// newHandle wraps h, opening the raw socket in ns; the Handle keeps ns
// (both are closed on failure).
func newHandle(h *netlink.Handle, ns netns.NsHandle) (*Handle, error) {
	if err := h.SetSocketTimeout(requestTimeout); err != nil {
		h.Close()
		ns.Close()
		return nil, fmt.Errorf("netlink socket timeout: %w", err)
	}
	raw, err := openRaw(ns)
	if err != nil {
		h.Close()
		ns.Close()
		return nil, err
	}
	return &Handle{nl: h, raw: raw, ns: ns}, nil
}

// openRaw opens a route-netlink socket in ns with the request timeout.
func openRaw(ns netns.NsHandle) (map[int]*nl.SocketHandle, error) {
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	tv := unix.NsecToTimeval(requestTimeout.Nanoseconds())
	if err := errors.Join(s.SetSendTimeout(&tv), s.SetReceiveTimeout(&tv)); err != nil {
		s.Close()
		return nil, fmt.Errorf("netlink socket timeout: %w", err)
	}
	return map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: s}}, nil
}

// Close releases the netlink sockets.
func (h *Handle) Close() {
	h.nl.Close()
	for _, s := range h.raw {
		s.Close()
	}
	h.ns.Close()
}

// dump retries fn while the kernel reports the dump as interrupted.
func dump[T any](fn func() ([]T, error)) ([]T, error) {
	var (
		res []T
		err error
	)
	for range dumpRetries {
		res, err = fn()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return res, err
		}
	}
	return res, err
}
