// A reload that changes a VIP's mode drains the old plane: its
// established connections go on while new ones take the new plane.

package main

import (
	"bufio"
	"crypto/rand"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4/plane"
)

// modeConn is a connection through the VIP with the backend that
// answered it.
type modeConn struct {
	c    *net.TCPConn
	r    *bufio.Reader
	name string
}

// openModeConns opens n connections to the IPv4 VIP and echoes a little
// on each.
func (n *xdpNet) openModeConns(t *testing.T, count int) []modeConn {
	t.Helper()
	out := make([]modeConn, count)
	for i := range out {
		c, r, name := n.askTCPConn(t, n.vip4)
		if !strings.HasPrefix(name, "be") {
			t.Fatalf("answered by %q", name)
		}
		echo(t, c, r, []byte("hello"))
		out[i] = modeConn{c, r, name}
	}
	return out
}

// echoAll sends a fresh 128 KiB on each connection and wants it back byte
// for byte.
func echoAll(t *testing.T, conns []modeConn, what string) {
	t.Helper()
	msg := make([]byte, 128<<10)
	for i, mc := range conns {
		_, _ = rand.Read(msg)
		t.Logf("%s: connection %d (%s)", what, i, mc.name)
		echo(t, mc.c, mc.r, msg)
	}
}

func closeAll(conns []modeConn) {
	for _, mc := range conns {
		mc.c.Close()
	}
}

// modeLeft is the draining status entry of web that a mode change left
// (zero if none).
func modeLeft(st plane.Status) plane.VIPStatus {
	for _, v := range st.VIPs {
		if v.Name == "web" && v.ModeChange != nil {
			return v
		}
	}
	return plane.VIPStatus{}
}

// TestXDPModeChangeDrains: proxy -> xdp -> proxy by reload with
// connections open across each. The proxy's connections keep moving
// bytes, intact both ways, after the VIP went to xdp (the XDP program
// leaves their segments to the kernel), while new connections are
// forwarded by XDP (its new-flow counter); status lists the proxy plane
// draining with its connections until they close. Back to proxy, the
// XDP flows keep their backends (conntrack only) while new connections
// are the proxy's (accepted); the xdp plane drains as its flows end. A
// second change before the first drained cuts the first's flows.
func TestXDPModeChangeDrains(t *testing.T) {
	n := newXDPNet(t, 2)
	n.LB.NS.MustExec(t, "ip", "addr", "add", n.VIP4.String()+"/32", "dev", "lo") // proxy mode needs the VIP local
	cfg := func(mode string, port int) string {
		return n.modeConf([]string{`drain_timeout = "120s"`}, mode, port, `algorithm = "maglev"`)
	}
	lb := startLBIn(t, n.LB.NS, cfg("proxy", 8080))
	reload := func(text string) {
		t.Helper()
		lb.writeConfig(t, text)
		lb.reloadOK(t)
	}

	proxied := n.openModeConns(t, 3)
	defer closeAll(proxied)
	reload(cfg("xdp", 80))
	echoAll(t, proxied, "proxy connection after the move to xdp")
	st := lb.status(t)
	left, web := modeLeft(st), mustVIP(t, st, "web")
	if m := left.ModeChange; m == nil || m.From != "proxy" || m.To != "xdp" || !left.Draining || left.Active != 3 || left.TCP == nil {
		t.Fatalf("status lists no proxy plane draining 3 connections: %+v", left)
	}
	if web.XDP == nil || web.ModeChange != nil {
		t.Fatalf("web runs on no xdp plane: %+v", web)
	}
	forwarded := web.XDP.NewFlows
	fresh := n.openModeConns(t, 3)
	defer closeAll(fresh)
	echoAll(t, fresh, "new connection on xdp")
	st = lb.status(t)
	if got := mustVIP(t, st, "web").XDP.NewFlows; got < forwarded+3 {
		t.Errorf("xdp new flows %d -> %d: the new connections were not forwarded by XDP", forwarded, got)
	}
	if got := modeLeft(st).Accepted; got != 3 {
		t.Errorf("the draining proxy plane accepted %d connections, want the 3 of before the reload", got)
	}
	if st.XDP.Counters["pass_handover"] == 0 {
		t.Errorf("no pass_handover counted: %v", st.XDP.Counters)
	}
	if text := lb.statusText(t); !strings.Contains(text, "DRAINING (mode changed to xdp: the proxy plane keeps its established flows") {
		t.Errorf("status text says nothing of the mode change:\n%s", text)
	}
	closeAll(proxied)
	lb.waitStatus(t, 15*time.Second, "the proxy plane to drain", func(st plane.Status) bool { return modeLeft(st).Name == "" })
	lb.waitLog(t, "vip mode change done")

	reload(cfg("proxy", 8080))
	echoAll(t, fresh, "xdp flow after the move to proxy")
	lb.waitStatus(t, 10*time.Second, "the xdp plane draining 3 flows", func(st plane.Status) bool {
		m := modeLeft(st)
		return m.ModeChange != nil && m.ModeChange.From == "xdp" && m.ModeChange.To == "proxy" && m.XDP != nil && m.Active == 3
	})
	later := n.openModeConns(t, 3)
	defer closeAll(later)
	echoAll(t, later, "new connection on proxy")
	if web := lb.vip(t, "web"); web.XDP != nil || web.TCP == nil || web.Accepted != 3 {
		t.Errorf("new connections not accepted by the proxy plane: %+v", web)
	}
	echoAll(t, fresh, "xdp flow beside new proxy connections")
	closeAll(fresh)
	lb.waitStatus(t, 15*time.Second, "the xdp plane to drain", func(st plane.Status) bool { return modeLeft(st).Name == "" })
	lb.waitLogN(t, "vip mode change done", 2)
	echoAll(t, later, "proxy connection after the xdp plane drained")

	// Two changes in a row: the second cuts the drain the first began
	// (the proxy's connections), and the VIP serves on.
	reload(cfg("xdp", 80))
	reload(cfg("proxy", 8080))
	lb.waitLog(t, "vip mode change cut short")
	for _, mc := range later {
		mc.c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := mc.r.ReadByte(); err == nil {
			t.Fatal("a proxy connection outlived the cut drain")
		}
	}
	echoAll(t, n.openModeConns(t, 1), "new connection after two changes")
	lb.waitStatus(t, 15*time.Second, "nothing left draining", func(st plane.Status) bool { return modeLeft(st).Name == "" })
}
