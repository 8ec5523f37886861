// End to end on a two-arm host: clients on one interface, backends behind
// another; the XDP program runs on both and forwards from one to the
// other (XDP_REDIRECT), and a reload adds and removes interfaces one by
// one.

package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// twoArmNet is a two-arm network whose backends serve the VIP on port 80
// (TCP and UDP named echo), a health listener on their own address, port
// 8080, and decapsulate with `l4lb decap attach`.
type twoArmNet struct {
	*testutil.TwoArm
	vip netip.AddrPort
}

func newTwoArmNet(t *testing.T) *twoArmNet {
	t.Helper()
	testutil.RequirePriv(t, "XDP programs and network namespaces")
	ta := testutil.NewTwoArm(t, 2)
	vip := ta.ServeVIPs(t, 80)[0]
	for _, b := range ta.Backends {
		ta.ServeTCP(t, b, netip.AddrPortFrom(b.Addr4, 8080), testutil.NamedEcho(b.Name))
		if out, err := b.NS.Command(mustBin(t), "decap", "attach", "--iface", b.Link).CombinedOutput(); err != nil {
			t.Fatalf("decap attach on %s: %v\n%s", b.Name, err, out)
		}
	}
	return &twoArmNet{TwoArm: ta, vip: vip}
}

// config is xdp VIPs web (tcp) and dns (udp) over both backends, with
// [xdp] on the interfaces given (a TOML value).
func (n *twoArmNet) config(interfaces string) string {
	c := newConf(`drain_timeout = "2s"`).raw("[xdp]\ninterface = " + interfaces + "\n")
	for _, v := range []struct{ name, proto string }{{"web", "tcp"}, {"dns", "udp"}} {
		c.vip(v.name, n.vip.String(), `mode = "xdp"`, fmt.Sprintf("protocol = %q", v.proto)).health(xdpProbe...)
		for _, b := range n.Backends {
			c.at(b.Name, netip.AddrPortFrom(b.Addr4, 80))
		}
	}
	return c.String()
}

// programOn returns the id of the XDP program on ifname in the lb, and
// whether it is l4lb's balancer (0, false: none).
func (n *twoArmNet) programOn(t *testing.T, ifname string) (uint32, bool) {
	t.Helper()
	var id uint32
	var name string
	n.InNS(t, n.LB.NS, func() {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			t.Fatal(err)
		}
		if name, id, err = bpf.AttachedProgram(ifc.Index); err != nil {
			t.Fatal(err)
		}
	})
	return id, bpf.IsBalancer(name)
}

// udpEcho sends a datagram of random bytes to the VIP and wants it back
// byte for byte after the answering backend's name.
func (n *twoArmNet) udpEcho(t *testing.T, size int) {
	t.Helper()
	c := n.DialUDP(t, n.vip)
	defer c.Close()
	msg := make([]byte, size)
	rand.Read(msg)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	m, err := c.Read(buf)
	if err != nil {
		t.Fatalf("udp echo of %d bytes: %v", size, err)
	}
	if !bytes.HasSuffix(buf[:m], msg) {
		t.Fatalf("udp echo of %d bytes came back different (%d bytes)", size, m)
	}
}

// TestXDPTwoArm: with the program on the client arm and the backend arm,
// TCP (1 MiB each way) and UDP reach the backends through the client arm
// byte for byte, redirected to the backend arm; status shows both
// interfaces; a reload that drops the backend arm detaches only it (the
// client arm keeps its program and an established flow), and one that
// adds it back attaches it again.
func TestXDPTwoArm(t *testing.T) {
	n := newTwoArmNet(t)
	front, back := n.LB.Link, n.Back.Link
	lb := startLBIn(t, n.LB.NS, n.config(fmt.Sprintf("[%q, %q]", front, back)))
	lb.waitHealth(t, "web", "be2", "up")

	c, r, first := (&xdpNet{DSR: n.DSR}).askTCPConn(t, n.vip)
	msg := make([]byte, 1<<20)
	rand.Read(msg)
	echo(t, c, r, msg)
	n.udpEcho(t, 1200)
	st := lb.status(t)
	want := []plane.XDPInterface{{Name: front, Attach: "driver"}, {Name: back, Attach: "driver"}}
	if st.XDP == nil || fmt.Sprint(st.XDP.Interfaces) != fmt.Sprint(want) || st.XDP.Counters["redirect"] == 0 {
		t.Fatalf("xdp status %+v: want interfaces %v and packets redirected", st.XDP, want)
	}
	if text := lb.statusText(t); !strings.Contains(text, fmt.Sprintf("xdp: on %s (driver mode), %s (driver mode)", front, back)) {
		t.Errorf("text status lacks both interfaces:\n%s", text)
	}
	frontID, ok := n.programOn(t, front)
	if _, onBack := n.programOn(t, back); !ok || !onBack {
		t.Fatalf("balancer on %s %v, on %s %v", front, ok, back, onBack)
	}

	lb.writeConfig(t, n.config(fmt.Sprintf("%q", front)))
	if out, _, _ := lb.run(t, "check", "--diff", lb.cfg); !strings.Contains(out, "xdp.interface") {
		t.Errorf("check --diff does not show the interface change:\n%s", out)
	}
	lb.reloadOK(t)
	if id, _ := n.programOn(t, back); id != 0 {
		t.Errorf("%s still runs program %d after the reload dropped it", back, id)
	}
	if id, ok := n.programOn(t, front); !ok || id != frontID {
		t.Errorf("%s runs program %d (balancer %v) after the reload, want the same program %d", front, id, ok, frontID)
	}
	echo(t, c, r, []byte("after the reload, still on "+first))
	n.udpEcho(t, 1200)
	if x := lb.status(t).XDP; x.Interface != front || x.Interfaces != nil {
		t.Errorf("xdp status after dropping %s: %+v", back, x)
	}

	lb.writeConfig(t, n.config(fmt.Sprintf("[%q, %q]", front, back)))
	lb.reloadOK(t)
	if _, ok := n.programOn(t, back); !ok {
		t.Errorf("%s has no balancer after the reload added it back", back)
	}
	echo(t, c, r, msg)

	// An interface that cannot take the program refuses the reload whole.
	lb.writeConfig(t, n.config(fmt.Sprintf("[%q, \"nosuch0\"]", front)))
	prev := lb.status(t).Process.LastReload.Time
	lb.signal(t, syscall.SIGHUP)
	lb.waitStatus(t, 10*time.Second, "the reload refused", func(st plane.Status) bool {
		r := st.Process.LastReload
		return r != nil && !r.Time.Equal(prev) && !r.OK && strings.Contains(r.Error, "nosuch0")
	})
	if _, ok := n.programOn(t, back); !ok {
		t.Errorf("a refused reload took the balancer off %s", back)
	}
}
