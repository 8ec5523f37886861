// Native Go fuzzing of both programs through BPF_PROG_TEST_RUN. A plain
// go test runs the seed corpus only; go test -fuzz FuzzXDPLB ./bpf/ explores.
package bpf

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// fuzzMaxFrame keeps inputs inside what BPF_PROG_TEST_RUN accepts for
// XDP without fragments (a page minus head- and tailroom).
const fuzzMaxFrame = 2048

// fuzzSeeds are valid and near-valid frames of every shape the programs
// parse.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	for _, v := range vips {
		for _, tag := range tags {
			for _, fl := range []uint8{thSYN, thACK, thRST | thACK, thFIN | thACK} {
				frame, ip := frameSpec{flow: flowTo(v), flags: fl, tpid: tag.tpid, vlan: tag.vlan}.build()
				seeds = append(seeds, frame)
				src, dst := lbSrc4, be4Near
				if v.Addr.Addr().Is6() {
					src, dst = lbSrc6, be6Near
				}
				seeds = append(seeds, encapsulated(frame, len(frame)-len(ip), len(ip), src, dst, macNear, macLB))
			}
		}
		f := flowTo(v)
		router := router4
		if v.Addr.Addr().Is6() {
			router = router6
		}
		seeds = append(seeds, frameOf(icmpError(router, v.Addr.Addr(), reply(f, []byte("quoted"))), 0, 0))
	}
	for _, c := range passCases() {
		seeds = append(seeds, c.frame)
	}
	// The guard-only (proxy) VIPs of FuzzXDPLB, from a denied and an
	// allowed client, and an ICMP error quoting one of their flows.
	for _, v := range fuzzProxyVIPs {
		for _, src := range []string{"198.18.66.1", "198.18.50.5"} {
			for _, fl := range []uint8{thSYN, thACK, thSYN | thACK} {
				seeds = append(seeds, frame(flowFrom(src, 1234, v), fl))
			}
		}
		quote := reply(flowFrom("198.18.66.1", 1234, v), []byte("quoted"))
		seeds = append(seeds, frameOf(icmpError(router4, v.Addr.Addr(), quote), 0, 0))
	}
	return seeds
}

// fuzzProxyVIPs are guard-only VIPs in FuzzXDPLB.
var fuzzProxyVIPs = []l4.VIPKey{
	{Addr: netip.MustParseAddrPort("198.18.100.2:443"), Proto: l4.TCP},
	{Addr: netip.MustParseAddrPort("198.18.100.2:53"), Proto: l4.UDP},
}

// FuzzXDPLB: whatever the bytes, the program runs without error, returns
// DROP, PASS, TX or REDIRECT, and a PASS leaves the frame as it was.
func FuzzXDPLB(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	lb := newTestLB(f, testOptions)
	fn := newFibNet(f)
	must(f, lb.SetSource(lbSrc4, lbSrc6))
	addBackend(f, lb, 1, be4Near)
	addBackend(f, lb, 2, be6Far)
	for i, v := range vips {
		fwd := l4.ForwardIPIP
		if i%2 == 1 {
			fwd = l4.ForwardL2
		}
		addVIP(f, lb, v, uint32(i), fwd, l4.HashKey(i%3), []uint32{1, 2, 0, 1, 2})
	}
	// Every guard on: access lists (client4 denied on vip4TCP, client6
	// allowed on vip6TCP by a longer network), a new-flow rate, the SYN
	// rate, and guard-only proxy VIPs, whose PASS must leave frames as
	// they came.
	must(f, lb.SetVIP(vip4TCP, VIPEntry{Index: 0, Forward: l4.ForwardIPIP, ACL: mustACL(f, prefixes("198.18.0.0/15"), prefixes("198.18.50.0/24"))}))
	must(f, lb.SetVIP(vip4UDP, VIPEntry{Index: 1, Forward: l4.ForwardL2, HashKey: 1, NewFlowRate: 1}))
	must(f, lb.SetVIP(vip6TCP, VIPEntry{Index: 2, Forward: l4.ForwardIPIP, HashKey: 2, ACL: mustACL(f, prefixes("2001:db8:50::/48"), prefixes("::/0"))}))
	must(f, lb.SetSYNRate(5))
	proxyACL := mustACL(f, nil, prefixes("198.18.66.0/24"))
	for i, v := range fuzzProxyVIPs {
		must(f, lb.SetVIP(v, VIPEntry{Index: uint32(10 + i), GuardOnly: true, ACL: proxyACL}))
	}
	r := runner{prog: lb.objs.XdpLb, net: fn, ingress: fn.lb0}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 14 || len(in) > fuzzMaxFrame {
			t.Skip("outside what BPF_PROG_TEST_RUN accepts")
		}
		ret, out, err := r.try(append([]byte{}, in...))
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		switch ret {
		case xdpPass:
			if !bytes.Equal(out, in) {
				t.Fatalf("PASS changed the frame\n in: %x\nout: %x", in, out)
			}
		case xdpDrop, xdpTX, xdpRedirect:
		default:
			t.Fatalf("verdict %d", ret)
		}
	})
}

// FuzzXDPDecap: always PASS; the frame is unchanged or exactly one outer
// IPv4 (20 bytes) or IPv6 (40 bytes) header shorter behind the same MACs.
func FuzzXDPDecap(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	objs := testDecap(f)
	r := runner{prog: objs.XdpDecap}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 14 || len(in) > fuzzMaxFrame {
			t.Skip("outside what BPF_PROG_TEST_RUN accepts")
		}
		ret, out, err := r.try(append([]byte{}, in...))
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if ret != xdpPass {
			t.Fatalf("verdict %d", ret)
		}
		switch len(in) - len(out) {
		case 0:
			if !bytes.Equal(out, in) {
				t.Fatalf("frame changed without decapsulation\n in: %x\nout: %x", in, out)
			}
		case 20, 40:
			hdr, l3 := len(in)-len(out), 14
			if tpid := uint16(in[12])<<8 | uint16(in[13]); tpid == 0x8100 || tpid == 0x88a8 {
				l3 = 18
			}
			if !bytes.Equal(out[:l3-2], in[:l3-2]) || !bytes.Equal(out[l3:], in[l3+hdr:]) {
				t.Fatalf("decapsulation changed more than the outer header\n in: %x\nout: %x", in, out)
			}
		default:
			t.Fatalf("length %d -> %d", len(in), len(out))
		}
	})
}
