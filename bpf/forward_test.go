// Forwarding: exact output frames of ipip (through the FIB) and l2.

package bpf

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

var tags = []struct {
	name       string
	tpid, vlan uint16
}{{"untagged", 0, 0}, {"8021q", 0x8100, 0x0123}, {"8021ad", 0x88a8, 0x0fff}}

var vips = []l4.VIPKey{vip4TCP, vip4UDP, vip6TCP, vip6UDP}

// fibBackend is a backend of the FIB namespace with what forwarding to it
// must do: the verdict and the MACs the FIB gives.
type fibBackend struct {
	addr    netip.Addr
	verdict uint32
	smac    net.HardwareAddr
	dmac    net.HardwareAddr
}

// fibBackends are the near (XDP_TX) and far (XDP_REDIRECT) backends of fn.
func fibBackends(fn *fibNet) []fibBackend {
	return []fibBackend{
		{be4Near, xdpTX, fn.mac0, macNear},
		{be6Near, xdpTX, fn.mac0, macNear},
		{be4Far, xdpRedirect, fn.mac1, macFar},
		{be6Far, xdpRedirect, fn.mac1, macFar},
	}
}

// TestForwardIPIP: a packet to a VIP leaves encapsulated towards its
// backend: outer header exactly as the RFCs build it (valid checksum, TTL
// 64, no DF, TOS copied), MACs from the FIB's neighbour entry, inner packet
// byte for byte, XDP_TX out of lb0 or XDP_REDIRECT to lb1.
func TestForwardIPIP(t *testing.T) {
	lb := newTestLB(t, testOptions)
	fn := newFibNet(t)
	must(t, lb.SetSource(lbSrc4, lbSrc6))
	r := runner{prog: lb.objs.XdpLb, net: fn, ingress: fn.lb0}
	backends := fibBackends(fn)
	for bi, be := range backends {
		addBackend(t, lb, uint32(bi+1), be.addr)
	}
	for vi, v := range vips {
		for bi, be := range backends {
			for _, tag := range tags {
				name := fmt.Sprintf("%v/to-%v/%s", v, be.addr, tag.name)
				t.Run(name, func(t *testing.T) {
					addVIP(t, lb, v, uint32(vi), l4.ForwardIPIP, l4.HashFiveTuple, []uint32{uint32(bi + 1)})
					if _, err := lb.PurgeVIP(v); err != nil { // UDP flows stay pinned otherwise
						t.Fatal(err)
					}
					spec := frameSpec{flow: flowTo(v), flags: thSYN, tos: 0xb8, tpid: tag.tpid, vlan: tag.vlan}
					frame, ip := spec.build()
					ret, out := r.run(t, frame)
					if ret != be.verdict {
						t.Fatalf("verdict %s, want %s", verdictName(ret), verdictName(be.verdict))
					}
					l3 := len(frame) - len(ip)
					src := lbSrc4
					if be.addr.Is6() {
						src = lbSrc6
					}
					sameBytes(t, "frame", out, encapsulated(frame, l3, len(ip), src, be.addr, be.dmac, be.smac))
					if be.addr.Is4() && !ipv4HeaderValid(out[l3:]) {
						t.Error("outer IPv4 checksum invalid")
					}
				})
			}
		}
	}
}

// TestForwardL2: l2 mode changes only the MACs: destination = backend's,
// source = the frame's old destination.
func TestForwardL2(t *testing.T) {
	lb := newTestLB(t, testOptions)
	r := runner{prog: lb.objs.XdpLb}
	addBackend(t, lb, 7, netip.MustParseAddr("198.18.0.77"))
	for vi, v := range vips {
		addVIP(t, lb, v, uint32(vi), l4.ForwardL2, l4.HashSrcIP, []uint32{7, 7, 7})
		for _, tag := range tags {
			t.Run(fmt.Sprintf("%v/%s", v, tag.name), func(t *testing.T) {
				frame, _ := frameSpec{flow: flowTo(v), flags: thACK, tpid: tag.tpid, vlan: tag.vlan}.build()
				ret, out := r.run(t, frame)
				if ret != xdpTX {
					t.Fatalf("verdict %s, want TX", verdictName(ret))
				}
				want := append(append(append([]byte{}, macFor(7)...), macLB...), frame[12:]...)
				sameBytes(t, "frame", out, want)
			})
		}
	}
}

// TestForwardDrops: the FIB's and the tables' failures drop with their
// counter, and the frame never leaves half-built.
func TestForwardDrops(t *testing.T) {
	lb := newTestLB(t, testOptions)
	fn := newFibNet(t)
	r := runner{prog: lb.objs.XdpLb, net: fn, ingress: fn.lb0}
	addBackend(t, lb, 1, be4Near)
	addBackend(t, lb, 2, be4NoNeigh)
	addBackend(t, lb, 3, be4NoRoute)
	addBackend(t, lb, 4, be6Near)
	must(t, lb.SetBackend(5, BackendEntry{Addr: be4Near, Active: true})) // no MAC
	must(t, lb.SetBackend(6, BackendEntry{Addr: be4Near, MAC: macNear})) // inactive
	// A packet too big once encapsulated is answered (icmp_gen_test.go).
	cases := []struct {
		name    string
		fwd     l4.Forward
		table   []uint32
		source  bool
		payload []byte
		want    Counter
	}{
		{"empty slot", l4.ForwardIPIP, []uint32{0}, true, nil, CounterDropNoBackend},
		{"missing backend", l4.ForwardIPIP, []uint32{9}, true, nil, CounterDropNoBackend},
		{"inactive backend", l4.ForwardIPIP, []uint32{6}, true, nil, CounterDropNoBackend},
		{"no source v4", l4.ForwardIPIP, []uint32{1}, false, nil, CounterDropNoSource},
		{"no source v6", l4.ForwardIPIP, []uint32{4}, false, nil, CounterDropNoSource},
		{"no neighbour", l4.ForwardIPIP, []uint32{2}, true, nil, CounterDropNoNeigh},
		{"no route", l4.ForwardIPIP, []uint32{3}, true, nil, CounterDropFIB},
		{"l2 without mac", l4.ForwardL2, []uint32{5}, true, nil, CounterDropNoNeigh},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.source {
				must(t, lb.SetSource(lbSrc4, lbSrc6))
			} else {
				must(t, lb.SetSource(netip.Addr{}, netip.Addr{}))
			}
			addVIP(t, lb, vip4TCP, 1, c.fwd, l4.HashFiveTuple, c.table)
			frame, _ := frameSpec{flow: flowTo(vip4TCP), flags: thSYN, payload: c.payload}.build()
			vs0, _ := lb.VIPStats(1)
			d := counterDelta(t, lb, func() {
				if ret, _ := r.run(t, frame); ret != xdpDrop {
					t.Errorf("verdict %s, want DROP", verdictName(ret))
				}
			})
			if d[c.want] != 1 {
				t.Errorf("counter %v moved %d, want 1 (all: %v)", c.want, d[c.want], nonZero(d))
			}
			vs1, _ := lb.VIPStats(1)
			if vs1.Drops != vs0.Drops+1 || vs1.Packets != vs0.Packets {
				t.Errorf("vip stats %+v -> %+v, want one more drop", vs0, vs1)
			}
		})
	}
}

// TestNoTableDrops: a VIP without a Maglev table drops.
func TestNoTableDrops(t *testing.T) {
	lb := newTestLB(t, testOptions)
	r := runner{prog: lb.objs.XdpLb}
	must(t, lb.SetVIP(vip4UDP, VIPEntry{Index: 3, Forward: l4.ForwardL2}))
	frame, _ := frameSpec{flow: flowTo(vip4UDP)}.build()
	d := counterDelta(t, lb, func() {
		if ret, _ := r.run(t, frame); ret != xdpDrop {
			t.Errorf("verdict %s, want DROP", verdictName(ret))
		}
	})
	onlyCounters(t, d, CounterDropNoBackend)
}

// TestOuterTOSv6: an IPv6 inner traffic class reaches the outer header.
func TestOuterTOSv6(t *testing.T) {
	frame, ip := frameSpec{flow: flowTo(vip6UDP), tos: 0xa5}.build()
	out := encapsulated(frame, 14, len(ip), lbSrc4, be4Near, macNear, macLB)
	if out[15] != 0xa5 {
		t.Fatalf("builder: outer tos %#x", out[15])
	}
	if tc := uint8(binary.BigEndian.Uint16(ip) >> 4); tc != 0xa5 {
		t.Fatalf("builder: inner tc %#x", tc)
	}
}
