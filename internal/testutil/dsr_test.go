// dsr_test.go: the DSR network works without l4lb: direct paths, a kernel-routed balancer with direct replies, its settings.

package testutil

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/netif"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestDSRDirect: the client reaches every backend at its own address over
// the bridge, in both families, TCP and UDP.
func TestDSRDirect(t *testing.T) {
	d := NewDSR(t, DSROptions{Backends: 3, IPv6: true})
	for _, b := range d.Backends {
		for _, a := range b.Addrs() {
			ap := netip.AddrPortFrom(a, 7001)
			d.ServeTCP(t, b, ap, NamedEcho(b.Name))
			d.ServeUDP(t, b, ap)
			if got := d.AskTCP(t, ap); got != b.Name {
				t.Errorf("tcp %s answered by %q, want %q", ap, got, b.Name)
			}
			if got := d.AskUDP(t, ap); got != b.Name {
				t.Errorf("udp %s answered by %q, want %q", ap, got, b.Name)
			}
		}
	}
}

// TestDSRVIPNeedsBalancer: as built, nothing but the lb's XDP program
// can carry client traffic to the VIP: served by every backend, it still
// goes unanswered. (A success in an XDP test therefore means XDP.)
func TestDSRVIPNeedsBalancer(t *testing.T) {
	d := NewDSR(t, DSROptions{Backends: 1, IPv6: true})
	for _, ap := range d.ServeVIPs(t, 7006) {
		c := d.DialUDP(t, ap)
		_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(make([]byte, 64)); err == nil {
			t.Errorf("udp %s answered (%d bytes) without a balancer", ap, n)
		}
	}
}

// TestDSRKernelBalancer stands in for the XDP program with a route in the
// lb (VIP via be2): the client's packets to the VIP go through the lb, the
// backend accepts them on its lo VIP and answers the client directly. The
// interface counters prove that the replies of a 1 MiB echo never passed
// the lb.
func TestDSRKernelBalancer(t *testing.T) {
	d := NewDSR(t, DSROptions{Backends: 2, IPv6: true})
	be := d.Backends[1] // not the first: the route decides, not the order
	for _, vip := range d.VIPs() {
		d.Run(t, d.LB.NS, "ip", "route", "add", netip.PrefixFrom(vip, vip.BitLen()).String(), "via", sameFamily(be, vip).String(), "dev", d.LB.Link)
	}
	for _, ap := range d.ServeVIPs(t, 7002) {
		t.Run(ap.Addr().String(), func(t *testing.T) {
			before := d.packetCounts(t, be)
			if got := bulkEcho(t, d, ap, 1<<20); got != be.Name {
				t.Fatalf("tcp %s answered by %q, want %q", ap, got, be.Name)
			}
			after := d.packetCounts(t, be)
			checkDirectReplies(t, before, after)
			if got := d.AskUDP(t, ap); got != be.Name {
				t.Errorf("udp %s answered by %q, want %q", ap, got, be.Name)
			}
		})
	}
}

func sameFamily(h *DSRHost, a netip.Addr) netip.Addr {
	if a.Is4() {
		return h.Addr4
	}
	return h.Addr6
}

// counts are packet counters of the three hosts on the path.
type counts struct{ clientTx, lbRx, beTx uint64 }

func (d *DSR) packetCounts(t *testing.T, be *DSRHost) counts {
	t.Helper()
	_, clientTx := d.Packets(t, d.Client)
	lbRx, _ := d.Packets(t, d.LB)
	_, beTx := d.Packets(t, be)
	return counts{clientTx: clientTx, lbRx: lbRx, beTx: beTx}
}

// checkDirectReplies: the lb received what the client sent (plus a few
// ARP/ND frames) and none of the backend's replies.
func checkDirectReplies(t *testing.T, before, after counts) {
	t.Helper()
	clientTx, lbRx, beTx := after.clientTx-before.clientTx, after.lbRx-before.lbRx, after.beTx-before.beTx
	t.Logf("packets: client sent %d, lb received %d, backend sent %d", clientTx, lbRx, beTx)
	if beTx < 100 {
		t.Errorf("backend sent %d packets for a 1 MiB echo; want >= 100", beTx)
	}
	if lbRx > clientTx+10 {
		t.Errorf("lb received %d packets, the client sent %d: replies went through the lb", lbRx, clientTx)
	}
	if lbRx+10 < clientTx {
		t.Errorf("lb received %d packets, the client sent %d: requests bypassed the lb", lbRx, clientTx)
	}
}

// bulkEcho sends size random bytes through a NamedEcho at addr, checks
// they come back intact and returns the backend's name.
func bulkEcho(t *testing.T, d *DSR, addr netip.AddrPort, size int) string {
	t.Helper()
	c := d.DialTCP(t, addr)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	name, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("greeting from %s: %v", addr, err)
	}
	data := make([]byte, size)
	_, _ = rand.Read(data)
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(br)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("echo through %s: %d of %d bytes back intact (%v)", addr, len(got), size, err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write to %s: %v", addr, err)
	}
	return strings.TrimSuffix(name, "\n")
}

// TestDSRSettings reads back what NewDSR promises: MACs, MTUs, checksum
// offload, peer XDP programs and sysctls.
func TestDSRSettings(t *testing.T) {
	d := NewDSR(t, DSROptions{Backends: 2, IPv6: true})
	for _, h := range d.Hosts() {
		checkLink(t, h)
		if TxChecksum(t, h.NS, h.Link) {
			t.Errorf("%s %s: tx checksum offload still on", h.Name, h.Link)
		}
		wantXDP := h != d.Client
		if got := xdpAttached(t, d.Switch, h.Port); got != wantXDP {
			t.Errorf("switch port %s: XDP attached %v, want %v", h.Port, got, wantXDP)
		}
	}
	checkSysctls(t, d.LB.NS, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1", "net.ipv4.conf.all.send_redirects=0")
	checkSysctls(t, d.Client.NS, "net.ipv4.conf.all.accept_redirects=0", "net.ipv6.conf.all.accept_redirects=0")
	for _, b := range d.Backends {
		checkSysctls(t, b.NS, "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.veth0.rp_filter=0",
			"net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2")
	}
}

func checkLink(t *testing.T, h *DSRHost) {
	t.Helper()
	h.NS.MustDo(t, func() error {
		ifc, err := net.InterfaceByName(h.Link)
		if err != nil {
			return err
		}
		if ifc.HardwareAddr.String() != h.MAC.String() || ifc.MTU != h.MTU {
			t.Errorf("%s %s: MAC %s MTU %d, want %s %d", h.Name, h.Link, ifc.HardwareAddr, ifc.MTU, h.MAC, h.MTU)
		}
		return nil
	})
}

func xdpAttached(t *testing.T, ns *Netns, ifname string) bool {
	t.Helper()
	var on bool
	ns.MustDo(t, func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		on = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
		return nil
	})
	return on
}

func checkSysctls(t *testing.T, ns *Netns, kvs ...string) {
	t.Helper()
	for _, kv := range kvs {
		k, want, _ := strings.Cut(kv, "=")
		var got string
		ns.MustDo(t, func() error {
			b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(k, ".", "/"))
			got = strings.TrimSpace(string(b))
			return err
		})
		if got != want {
			t.Errorf("%s: %s = %s, want %s", ns.Name, k, got, want)
		}
	}
}

// TestDSRVIPNotAnswered: no backend answers ARP or neighbour solicitation
// for the VIP (it would steal the VIP from the lb), while each answers for
// its own address. The client resolves the VIP as if it were on the link.
func TestDSRVIPNotAnswered(t *testing.T) {
	d := NewDSR(t, DSROptions{Backends: 2, IPv6: true})
	h, err := netif.OpenPath("/run/netns/" + d.Client.NS.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, vip := range d.VIPs() {
		d.Run(t, d.Client.NS, "ip", "route", "replace", netip.PrefixFrom(vip, vip.BitLen()).String(), "dev", d.Client.Link)
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		mac, err := h.MAC(ctx, vip)
		cancel()
		if !errors.Is(err, netif.ErrUnresolved) {
			t.Errorf("VIP %s resolved to %s (%v): a backend answers for it", vip, mac, err)
		}
	}
	for _, b := range d.Backends {
		for _, a := range b.Addrs() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			mac, err := h.MAC(ctx, a)
			cancel()
			if err != nil || mac.String() != b.MAC.String() {
				t.Errorf("%s %s: MAC %s (%v), want %s", b.Name, a, mac, err, b.MAC)
			}
		}
	}
}

// TestDSRBackendMTU: the lb reaches a backend with a full client-sized
// packet plus the largest outer header (IPv6, 40 bytes), unfragmented,
// while the client cannot send more than its own MTU.
func TestDSRBackendMTU(t *testing.T) {
	d := NewDSR(t, DSROptions{Backends: 1, IPv6: true})
	be := d.Backends[0]
	encapped := d.Client.MTU + 40
	for _, a := range be.Addrs() {
		ap := netip.AddrPortFrom(a, 7003)
		d.ServeUDP(t, be, ap)
		hdr := 28 // IPv4 + UDP
		if a.Is6() {
			hdr = 48
		}
		if err := sendDF(t, d.LB, ap, encapped-hdr); err != nil {
			t.Errorf("lb -> %s: %d-byte packet: %v", a, encapped, err)
		}
		if err := sendDF(t, d.Client, ap, d.Client.MTU-hdr+1); !errors.Is(err, syscall.EMSGSIZE) {
			t.Errorf("client -> %s: %d-byte packet with DF: %v, want EMSGSIZE", a, d.Client.MTU+1, err)
		}
	}
}

// sendDF sends one datagram of size bytes from h with fragmentation
// forbidden and waits for ServeUDP's echo of it.
func sendDF(t *testing.T, h *DSRHost, addr netip.AddrPort, size int) error {
	t.Helper()
	c := dialFrom(t, h, "udp", addr).(*net.UDPConn)
	defer c.Close()
	if err := forbidFragments(c, addr.Addr().Is4()); err != nil {
		return err
	}
	_ = c.SetDeadline(time.Now().Add(dsrIOTimeout))
	msg := bytes.Repeat([]byte{'m'}, size)
	if _, err := c.Write(msg); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if _, got, _ := bytes.Cut(buf[:n], []byte("\n")); len(got) != size {
		return fmt.Errorf("echo of %d bytes, sent %d", len(got), size)
	}
	return nil
}

func forbidFragments(c *net.UDPConn, v4 bool) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if v4 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
		}
	})
	return errors.Join(err, serr)
}

// TestDSRInNS: fn runs in the namespace, may fail the test, and the
// goroutine is back in its own namespace afterwards.
func TestDSRInNS(t *testing.T) {
	d := NewDSR(t, DSROptions{Backends: 1})
	before, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	var names []string
	d.InNS(t, d.Backends[0].NS, func() {
		ifcs, err := net.Interfaces()
		if err != nil {
			t.Fatal(err)
		}
		for _, ifc := range ifcs {
			names = append(names, ifc.Name)
		}
	})
	if want := []string{"lo", dsrLink}; !slices.Equal(names, want) {
		t.Errorf("interfaces inside: %v, want %v", names, want)
	}
	after, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if !after.Equal(before) {
		t.Errorf("still in namespace %v after InNS, was in %v", after, before)
	}
}
