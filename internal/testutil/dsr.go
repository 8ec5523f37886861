// dsr.go: a one-arm direct-server-return network: client, balancer and backends on one bridged segment.

package testutil

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
)

// DSROptions shape a DSR network. The zero value is a usable default.
type DSROptions struct {
	// Backends is the number of backend hosts (be1..beN); 0 means 2.
	Backends int
	// IPv6 gives every host and the VIP an IPv6 address as well.
	IPv6 bool
	// MTU of the balancer's and the backends' links; 0 means 1600, so
	// that a full 1500-byte packet plus a 40-byte IPv6 outer header fits.
	MTU int
	// ClientMTU is the client's link MTU; 0 means 1500.
	ClientMTU int
	// NoPeerXDP leaves the bridge-side peers without their XDP_PASS
	// program, to show what native XDP_TX on a veth does without one.
	NoPeerXDP bool
	// Unmodified leaves the backends as any host is: no VIP on lo, the
	// kernel's ARP and rp_filter defaults (forward = "nat", where
	// backends answer the balancer's own address on the segment).
	Unmodified bool
}

// Address plan of a DSR network. Each host has the same last byte in both
// families and its MAC: lb 1, client 2, backend i (from 1) 10+i.
var (
	dsrNet4 = netip.MustParsePrefix("198.18.10.0/24")
	dsrNet6 = netip.MustParsePrefix("2001:db8:10::/64")
	dsrVIP4 = netip.MustParseAddr("198.18.100.1")
	dsrVIP6 = netip.MustParseAddr("2001:db8:100::1")
)

const (
	dsrLink        = "veth0"  // every host's one interface
	dsrBridge      = "br0"    // in the switch namespace
	dsrMaxBackends = 200      // host parts stay below 255
	dsrMinMTU      = 1280     // IPv6's minimum
	dsrMaxMTU      = 3000     // native XDP on a veth needs a frame in one page
	dsrMACPrefix   = "02:4c:" // locally administered; then 34:10:00:<host>
)

// DSRHost is one host of a DSR network: a namespace with one veth whose
// peer is a port of the bridge in the switch namespace.
type DSRHost struct {
	Name  string // "client", "lb", "be1", ...
	NS    *Netns
	Link  string // the host's veth inside NS ("veth0")
	Port  string // its peer, a bridge port inside the switch namespace
	MAC   net.HardwareAddr
	Addr4 netip.Addr
	Addr6 netip.Addr // zero without DSROptions.IPv6
	MTU   int
}

// Addrs returns the host's addresses, IPv4 first.
func (h *DSRHost) Addrs() []netip.Addr { return validAddrs(h.Addr4, h.Addr6) }

// DSR is the one-arm shape of an edge host running the balancer in XDP
// mode, every host in its own namespace on one L2 segment:
//
//	lb     198.18.10.1/24       2001:db8:10::1/64  ─┐
//	client 198.18.10.2/24       2001:db8:10::2/64  ─┼─ br0 (namespace sw)
//	be<i>  198.18.10.(10+i)/24  2001:db8:10::(10+i in hex)/64 ─┘
//	        (be1: 198.18.10.11, 2001:db8:10::b; MAC 02:4c:34:10:00:<last byte>)
//
// The client routes the VIP (198.18.100.1, 2001:db8:100::1) to the lb.
// Every backend (unless DSROptions.Unmodified) has the VIP on lo and
// rp_filter=0, arp_ignore=1, arp_announce=2, so it accepts packets for the VIP and answers the client
// directly, but never answers ARP for it. The lb forwards (ip_forward,
// IPv6 forwarding) and sends no redirects; the client accepts none. The lb
// has neither the VIP nor a route to it (nor a default route): its kernel
// cannot deliver a VIP packet that the XDP program passes up, so traffic
// that reaches a backend went through XDP. Every
// host's veth has tx checksum offload off, and the bridge-side peers of
// the lb and the backends have an XDP_PASS program (see AttachPassXDP).
// Duplicate address detection is off, so IPv6 works at once. Everything is
// removed on cleanup.
type DSR struct {
	Switch   *Netns
	Bridge   string
	Client   *DSRHost
	LB       *DSRHost
	Backends []*DSRHost
	VIP4     netip.Addr
	VIP6     netip.Addr // zero without IPv6
	Net4     netip.Prefix
	Net6     netip.Prefix // zero without IPv6

	unmodified bool // DSROptions.Unmodified
}

// Hosts returns the client, the lb and the backends.
func (d *DSR) Hosts() []*DSRHost { return append([]*DSRHost{d.Client, d.LB}, d.Backends...) }

// VIPs returns the VIP's addresses, IPv4 first.
func (d *DSR) VIPs() []netip.Addr { return validAddrs(d.VIP4, d.VIP6) }

// Namespaces returns every namespace of the network, the switch's last.
func (d *DSR) Namespaces() []*Netns {
	var out []*Netns
	for _, h := range d.Hosts() {
		out = append(out, h.NS)
	}
	return append(out, d.Switch)
}

func validAddrs(as ...netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range as {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

// NewDSR builds a DSR network. Commands go in one `ip -batch` per
// namespace; sysctls and ethtool settings are written from Go.
func NewDSR(t testing.TB, opts DSROptions) *DSR {
	t.Helper()
	RequirePriv(t, "network namespaces, veth, bridge and XDP")
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		t.Fatalf("dsr: %v", err)
	}
	d := planDSR(opts)
	d.makeNamespaces(t)
	d.presetSysctls(t)
	d.makeLinks(t)
	d.configure(t)
	d.hostSysctls(t)
	for _, h := range d.Hosts() {
		TxChecksumOff(t, h.NS, h.Link)
	}
	if !opts.NoPeerXDP {
		for _, h := range append([]*DSRHost{d.LB}, d.Backends...) {
			AttachPassXDP(t, d.Switch, h.Port)
		}
	}
	return d
}

func (o DSROptions) withDefaults() DSROptions {
	if o.Backends == 0 {
		o.Backends = 2
	}
	if o.MTU == 0 {
		o.MTU = 1600
	}
	if o.ClientMTU == 0 {
		o.ClientMTU = 1500
	}
	return o
}

func (o DSROptions) validate() error {
	if o.Backends < 0 || o.Backends > dsrMaxBackends {
		return fmt.Errorf("%d backends: want 1..%d", o.Backends, dsrMaxBackends)
	}
	for _, m := range []int{o.MTU, o.ClientMTU} {
		if m < dsrMinMTU || m > dsrMaxMTU {
			return fmt.Errorf("MTU %d: want %d..%d", m, dsrMinMTU, dsrMaxMTU)
		}
	}
	return nil
}

// planDSR fills in names and addresses; nothing is created yet.
func planDSR(opts DSROptions) *DSR {
	d := &DSR{Bridge: dsrBridge, VIP4: dsrVIP4, Net4: dsrNet4, unmodified: opts.Unmodified}
	if opts.IPv6 {
		d.VIP6, d.Net6 = dsrVIP6, dsrNet6
	}
	d.LB = d.plan("lb", 1, opts.MTU)
	d.Client = d.plan("client", 2, opts.ClientMTU)
	for i := 1; i <= opts.Backends; i++ {
		d.Backends = append(d.Backends, d.plan(fmt.Sprintf("be%d", i), 10+i, opts.MTU))
	}
	return d
}

func (d *DSR) plan(name string, hostPart, mtu int) *DSRHost {
	h := &DSRHost{Name: name, Link: dsrLink, Port: "sw-" + name, MTU: mtu}
	h.Addr4 = hostAddr(d.Net4, hostPart)
	if d.Net6.IsValid() {
		h.Addr6 = hostAddr(d.Net6, hostPart)
	}
	h.MAC, _ = net.ParseMAC(fmt.Sprintf("%s34:10:00:%02x", dsrMACPrefix, hostPart))
	return h
}

// hostAddr puts hostPart (< 256) in the last byte of p's address.
func hostAddr(p netip.Prefix, hostPart int) netip.Addr {
	b := p.Addr().AsSlice()
	b[len(b)-1] = byte(hostPart)
	a, _ := netip.AddrFromSlice(b)
	return a
}

func (d *DSR) makeNamespaces(t testing.TB) {
	t.Helper()
	d.Switch = NewNetns(t, "sw")
	for _, h := range d.Hosts() {
		h.NS = NewNetns(t, h.Name)
	}
}

// presetSysctls runs before any link exists: new links copy the "default"
// values. DAD off, so IPv6 addresses and neighbour discovery work at once
// (solicitations go out from the link-local address, which DAD would keep
// tentative for a second or two); no IPv6 at all in the switch.
func (d *DSR) presetSysctls(t testing.TB) {
	t.Helper()
	setSysctls(t, d.Switch, "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	for _, h := range d.Hosts() {
		setSysctls(t, h.NS, "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
}

// makeLinks creates every veth pair directly inside its two namespaces.
func (d *DSR) makeLinks(t testing.TB) {
	t.Helper()
	var lines []string
	for _, h := range d.Hosts() {
		lines = append(lines, fmt.Sprintf("link add %s netns %s mtu %d address %s type veth peer name %s netns %s mtu %d",
			h.Link, h.NS.Name, h.MTU, h.MAC, h.Port, d.Switch.Name, h.MTU))
	}
	rootBatch(t, lines...)
}

// configure sets up the bridge and every host's addresses and routes.
func (d *DSR) configure(t testing.TB) {
	t.Helper()
	sw := []string{fmt.Sprintf("link add %s type bridge mcast_snooping 0", d.Bridge), "link set " + d.Bridge + " up"}
	for _, h := range d.Hosts() {
		sw = append(sw, fmt.Sprintf("link set %s master %s", h.Port, d.Bridge), "link set "+h.Port+" up")
	}
	ipBatch(t, d.Switch, sw...)
	for _, h := range d.Hosts() {
		ipBatch(t, h.NS, d.hostLines(h)...)
	}
}

// hostLines are the ip commands that configure one host.
func (d *DSR) hostLines(h *DSRHost) []string {
	lines := []string{fmt.Sprintf("addr add %s/%d dev %s", h.Addr4, d.Net4.Bits(), h.Link)}
	if h.Addr6.IsValid() {
		lines = append(lines, fmt.Sprintf("addr add %s/%d dev %s nodad", h.Addr6, d.Net6.Bits(), h.Link))
	}
	lines = append(lines, "link set "+h.Link+" up")
	switch {
	case h == d.Client:
		for _, vip := range d.VIPs() {
			lines = append(lines, fmt.Sprintf("route add %s via %s dev %s", netip.PrefixFrom(vip, vip.BitLen()), d.lbAddr(vip), h.Link))
		}
	case h != d.LB && !d.unmodified:
		for _, vip := range d.VIPs() {
			// nodad: an IPv6 address is tentative (bind fails with
			// "cannot assign requested address") until duplicate address
			// detection ends, which a loaded machine can delay past the
			// test's first bind.
			nodad := ""
			if vip.Is6() {
				nodad = " nodad"
			}
			lines = append(lines, fmt.Sprintf("addr add %s dev lo%s", netip.PrefixFrom(vip, vip.BitLen()), nodad))
		}
	}
	return lines
}

// lbAddr returns the lb's address in vip's family.
func (d *DSR) lbAddr(vip netip.Addr) netip.Addr {
	if vip.Is4() {
		return d.LB.Addr4
	}
	return d.LB.Addr6
}

// hostSysctls gives each role its settings (see DSR).
func (d *DSR) hostSysctls(t testing.TB) {
	t.Helper()
	// ip_forward first: writing it resets accept_redirects and friends.
	lb := []string{"net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf." + d.LB.Link + ".send_redirects=0"}
	if d.VIP6.IsValid() {
		lb = append(lb, "net.ipv6.conf.all.forwarding=1")
	}
	setSysctls(t, d.LB.NS, lb...)
	setSysctls(t, d.Client.NS, "net.ipv4.conf.all.accept_redirects=0", "net.ipv4.conf."+d.Client.Link+".accept_redirects=0",
		"net.ipv6.conf.all.accept_redirects=0", "net.ipv6.conf."+d.Client.Link+".accept_redirects=0")
	for _, b := range d.Backends {
		if d.unmodified {
			break
		}
		var kvs []string
		for _, dev := range []string{"all", b.Link} {
			kvs = append(kvs, "net.ipv4.conf."+dev+".rp_filter=0", "net.ipv4.conf."+dev+".arp_ignore=1", "net.ipv4.conf."+dev+".arp_announce=2")
		}
		setSysctls(t, b.NS, kvs...)
	}
}
