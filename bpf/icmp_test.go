// ICMP errors about a VIP's flows reach the flow's backend, unchanged
// inside the tunnel, without touching conntrack.

package bpf

import (
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

var (
	router4 = netip.MustParseAddr("198.18.9.9")
	router6 = netip.MustParseAddr("2001:db8:9::9")
)

// icmpCase is an ICMP error about a flow of vip: the flow is pinned to
// near, the table then moves to far.
type icmpCase struct {
	vip               l4.VIPKey
	router            netip.Addr
	near, far         uint32
	nearAddr, farAddr netip.Addr
	quoteBytes        int // bytes of the reply quoted; 0 = all
}

// TestICMPForward: v4 fragmentation-needed and v6 packet-too-big quoting
// a backend's reply (VIP -> client) go, whole and encapsulated, to the
// backend conntrack holds for the client's flow, or to the Maglev choice
// if it holds none; nothing is inserted or refreshed.
func TestICMPForward(t *testing.T) {
	lb := newTestLB(t, testOptions)
	fn := newFibNet(t)
	must(t, lb.SetSource(lbSrc4, lbSrc6))
	r := runner{prog: lb.objs.XdpLb, net: fn, ingress: fn.lb0}
	for i, a := range []netip.Addr{be4Near, be4Far, be6Near, be6Far} {
		addBackend(t, lb, uint32(i+1), a)
	}
	for vi, c := range []icmpCase{
		{vip4TCP, router4, 1, 2, be4Near, be4Far, 28}, // v4 quote: header + 8 bytes
		{vip4UDP, router4, 1, 2, be4Near, be4Far, 0},
		{vip6TCP, router6, 3, 4, be6Near, be6Far, 0},
		{vip6UDP, router6, 3, 4, be6Near, be6Far, 48}, // header + 8 bytes
	} {
		t.Run(c.vip.String(), func(t *testing.T) {
			addVIP(t, lb, c.vip, uint32(vi), l4.ForwardIPIP, l4.HashFiveTuple, []uint32{c.near})
			f := flowTo(c.vip)
			frame, _ := frameSpec{flow: f, flags: thSYN}.build()
			if ret, _ := r.run(t, frame); ret != xdpTX {
				t.Fatalf("syn: verdict %s", verdictName(ret))
			}
			must(t, lb.SetMaglev(uint32(vi), []uint32{c.far}))
			icmpToPinned(t, lb, r, fn, c, f)
			icmpToTable(t, lb, r, fn, c, f)
		})
	}
}

// icmpToPinned: an error about the pinned flow goes to its backend and
// leaves its entry as it was.
func icmpToPinned(t *testing.T, lb *LB, r runner, fn *fibNet, c icmpCase, f l4.Flow) {
	before, err := lb.LookupFlow(f)
	must(t, err)
	quote := reply(f, []byte("0123456789abcdef"))
	if c.quoteBytes != 0 {
		quote = quote[:c.quoteBytes]
	}
	icmp := icmpError(c.router, c.vip.Addr.Addr(), quote)
	in := frameOf(icmp, 0, 0)
	d := counterDelta(t, lb, func() {
		ret, out := r.run(t, in)
		if ret != xdpTX {
			t.Fatalf("icmp: verdict %s, want TX to the flow's backend", verdictName(ret))
		}
		sameBytes(t, "icmp frame", out, encapsulated(in, 14, len(icmp), srcFor(c.nearAddr), c.nearAddr, macNear, fn.mac0))
	})
	onlyCounters(t, d, CounterCTHit, CounterICMPForwarded, CounterTX)
	if after, _ := lb.LookupFlow(f); after != before {
		t.Errorf("icmp changed the entry: %+v -> %+v", before, after)
	}
}

// icmpToTable: an error about a client without an entry goes to the
// table's choice, and inserts nothing.
func icmpToTable(t *testing.T, lb *LB, r runner, fn *fibNet, c icmpCase, f l4.Flow) {
	f.Src = netip.AddrPortFrom(f.Src.Addr(), 999)
	icmp := icmpError(c.router, c.vip.Addr.Addr(), reply(f, nil))
	in := frameOf(icmp, 0, 0)
	ret, out := r.run(t, in)
	if ret != xdpRedirect {
		t.Fatalf("icmp, no entry: verdict %s, want REDIRECT to the far backend", verdictName(ret))
	}
	sameBytes(t, "icmp frame, no entry", out, encapsulated(in, 14, len(icmp), srcFor(c.farAddr), c.farAddr, macFar, fn.mac1))
	if fe, err := lb.LookupFlow(f); err == nil {
		t.Errorf("icmp inserted %+v", fe)
	}
}

// srcFor is the balancer's source address for an outer header to dst.
func srcFor(dst netip.Addr) netip.Addr {
	if dst.Is6() {
		return lbSrc6
	}
	return lbSrc4
}

// TestICMPPass: ICMP the balancer does not own passes untouched.
func TestICMPPass(t *testing.T) {
	lb := newTestLB(t, testOptions)
	r := runner{prog: lb.objs.XdpLb}
	addBackend(t, lb, 1, netip.MustParseAddr("198.18.0.11"))
	addVIP(t, lb, vip4TCP, 0, l4.ForwardL2, l4.HashFiveTuple, []uint32{1})
	addVIP(t, lb, vip6TCP, 1, l4.ForwardL2, l4.HashFiveTuple, []uint32{1})
	f4, f6 := flowTo(vip4TCP), flowTo(vip6TCP)
	notVIP := l4.Flow{Src: client4, Dst: netip.MustParseAddrPort("198.18.100.1:22"), Proto: l4.TCP}
	timeExceeded := icmpError(router4, vip4TCP.Addr.Addr(), reply(f4, nil))
	timeExceeded[20] = 11 // type: time exceeded (checksum irrelevant here)
	optQuote := reply(f4, nil)
	optQuote[0] = 0x46
	cases := []struct {
		name string
		ip   []byte
		want Counter
	}{
		{"quote not a vip", icmpError(router4, vip4TCP.Addr.Addr(), reply(notVIP, nil)), CounterPassNotVIP},
		{"v4 time exceeded", timeExceeded, CounterPassICMP},
		{"v4 quote without ports", icmpError(router4, vip4TCP.Addr.Addr(), reply(f4, nil)[:22]), CounterPassICMP},
		{"v4 quote with options", icmpError(router4, vip4TCP.Addr.Addr(), optQuote), CounterPassICMP},
		{"v4 quote cut in header", icmpError(router4, vip4TCP.Addr.Addr(), reply(f4, nil)[:12]), CounterPassICMP},
		{"v6 quote without ports", icmpError(router6, vip6TCP.Addr.Addr(), reply(f6, nil)[:42]), CounterPassICMP},
		{"v6 quote not a vip", icmpError(router6, vip6TCP.Addr.Addr(), reply(l4.Flow{Src: client6, Dst: netip.MustParseAddrPort("[2001:db8:100::1]:22"), Proto: l4.TCP}, nil)), CounterPassNotVIP},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := frameOf(c.ip, 0, 0)
			d := counterDelta(t, lb, func() {
				ret, out := r.run(t, in)
				if ret != xdpPass {
					t.Errorf("verdict %s, want PASS", verdictName(ret))
				}
				sameBytes(t, "frame", out, in)
			})
			onlyCounters(t, d, c.want)
		})
	}
}
