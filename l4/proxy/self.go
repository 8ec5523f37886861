// Self: the addresses l4lb itself listens on, so that a connection from
// l4lb to l4lb (a backend that is a VIP, directly or through a local
// address) is caught as a backend failure instead of looping.

package proxy

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/l4lb/l4lb/l4"
)

// errSelfConnect fails a backend connect that reached one of l4lb's own
// listeners: following it would loop until the connection budget is full.
var errSelfConnect = errors.New("the backend address is l4lb's own listener (a loop)")

// Listeners is the set of VIP addresses this process listens on, and the
// host's own addresses, shared by every service. A backend that is one of
// our listeners is refused before the connect: after it, the kernel has
// already queued the connection on our listener, whose handler would loop
// again. Reads are lock-free (the sets are rebuilt on change).
type Listeners struct {
	mu    sync.Mutex // serialises Add, Remove and RefreshLocal
	keys  []l4.VIPKey
	set   atomic.Pointer[[]l4.VIPKey]
	local atomic.Pointer[[]netip.Addr] // this host's addresses, as of the last refresh
}

// RefreshLocal reads the host's interface addresses again. Call it when
// they may have changed (on reload); a connect that loops through an
// address added since then refreshes them too.
func (ls *Listeners) RefreshLocal() error {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return err
	}
	addrs := make([]netip.Addr, 0, len(ifaddrs))
	for _, a := range ifaddrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				addrs = append(addrs, ip.Unmap())
			}
		}
	}
	ls.local.Store(&addrs)
	return nil
}

// isLocal reports whether a is this host's, as of the last refresh.
func (ls *Listeners) isLocal(a netip.Addr) bool {
	if a.IsLoopback() {
		return true
	}
	if local := ls.local.Load(); local != nil {
		return slices.Contains(*local, a)
	}
	return false
}

// wouldLoop reports whether a connect to backend would land on one of our
// listeners, judged before connecting.
func (ls *Listeners) wouldLoop(proto l4.Protocol, backend netip.AddrPort) bool {
	return ls != nil && ls.isLocal(backend.Addr().Unmap()) && ls.covers(proto, backend)
}

// Add records a listening VIP.
func (ls *Listeners) Add(k l4.VIPKey) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.keys = append(ls.keys, k)
	ls.publish()
}

// Remove forgets a VIP that stopped listening.
func (ls *Listeners) Remove(k l4.VIPKey) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if i := slices.Index(ls.keys, k); i >= 0 {
		ls.keys = slices.Delete(ls.keys, i, i+1)
	}
	ls.publish()
}

func (ls *Listeners) publish() {
	keys := slices.Clone(ls.keys)
	ls.set.Store(&keys)
}

// loops reports whether a connection from local to remote (a backend
// socket just connected) lands on one of our listeners: the destination is
// this host (loopback, or the kernel picked the destination itself as the
// source, as it does for a local address) and a VIP of this protocol
// listens on that address and port, or on its family's wildcard.
func (ls *Listeners) loops(proto l4.Protocol, local, remote netip.AddrPort) bool {
	if ls == nil {
		return false
	}
	dst := remote.Addr().Unmap()
	if !dst.IsLoopback() && local.Addr().Unmap() != dst {
		return false
	}
	if !ls.covers(proto, remote) {
		return false
	}
	if !ls.isLocal(dst) {
		_ = ls.RefreshLocal() // an address added since: judge before connecting next time
	}
	return true
}

// covers reports whether a VIP of proto listens on dst's address and port,
// or on its family's wildcard and port.
func (ls *Listeners) covers(proto l4.Protocol, remote netip.AddrPort) bool {
	if ls == nil {
		return false
	}
	dst := remote.Addr().Unmap()
	keys := ls.set.Load()
	if keys == nil {
		return false
	}
	for _, k := range *keys {
		a := k.Addr.Addr()
		if k.Proto == proto && k.Addr.Port() == remote.Port() && (a == dst || a.IsUnspecified() && a.Is4() == dst.Is4()) {
			return true
		}
	}
	return false
}
