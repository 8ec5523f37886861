// Established connections of one client, for an operator's question (l4lb explain).

package proxy

import (
	"net/netip"
	"sync"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// ConnInfo is one established connection as its loop sees it.
type ConnInfo struct {
	Flow    l4.Flow     // client to the VIP address it reached
	Backend *l4.Backend // where its bytes go
	Idle    time.Duration
}

// ConnsFrom lists up to limit established connections from client (from
// any port when port is 0), asking each event loop on its own thread. It
// changes nothing; connections still connecting to a backend are not
// listed (their backend may change on a retry).
func (s *TCPService) ConnsFrom(client netip.Addr, port uint16, limit int) []ConnInfo {
	var mu sync.Mutex
	var out []ConnInfo
	client = client.Unmap()
	s.ev.loops.each(func(l *loop) {
		for c := range l.conns {
			src := c.flow.Src
			if c.svc != s || src.Addr().Unmap() != client || (port != 0 && src.Port() != port) {
				continue
			}
			mu.Lock()
			if len(out) < limit {
				out = append(out, ConnInfo{Flow: c.flow, Backend: c.chosen, Idle: time.Duration(l.now() - c.lastActive())})
			}
			mu.Unlock()
		}
	})
	return out
}
