// xdp_decap: strips exactly the outer header, passes everything else
// untouched; attach/detach by interface, idempotent, across processes.

package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/vishvananda/netlink"
)

// testDecap loads xdp_decap for test runs (not attached).
func testDecap(t testing.TB) *decapObjects {
	t.Helper()
	testutil.RequirePriv(t, "loads BPF programs")
	var objs decapObjects
	must(t, loadDecapObjects(&objs, nil))
	t.Cleanup(func() { objs.Close() })
	return &objs
}

func decapCounts(t testing.TB, m *ebpf.Map) [decapDecapCounterDECAP_MAX]uint64 {
	t.Helper()
	pc, err := newPerCPU(8)
	must(t, err)
	var c [decapDecapCounterDECAP_MAX]uint64
	for i := range c {
		must(t, pc.sum(m, uint32(i), c[i:i+1]))
	}
	return c
}

// TestDecapFrames: every family combination, with and without a tag:
// the output is the original frame (with the tunnel frame's MACs).
func TestDecapFrames(t *testing.T) {
	objs := testDecap(t)
	r := runner{prog: objs.XdpDecap}
	outer := []netip.Addr{be4Near, be6Near}
	for _, v := range vips {
		for _, dst := range outer {
			for _, tag := range tags {
				t.Run(fmt.Sprintf("%v/in-%v/%s", v, dst, tag.name), func(t *testing.T) {
					frame, ip := frameSpec{flow: flowTo(v), flags: thACK, tpid: tag.tpid, vlan: tag.vlan}.build()
					l3 := len(frame) - len(ip)
					src := lbSrc4
					if dst.Is6() {
						src = lbSrc6
					}
					in := encapsulated(frame, l3, len(ip), src, dst, macNear, macLB)
					before := decapCounts(t, objs.DecapCounters)
					ret, out := r.run(t, in)
					if ret != xdpPass {
						t.Fatalf("verdict %s", verdictName(ret))
					}
					want := append(append([]byte{}, in[:12]...), frame[12:]...)
					sameBytes(t, "decapsulated", out, want)
					after := decapCounts(t, objs.DecapCounters)
					k := decapDecapCounterDECAP_OUTER_V4
					if dst.Is6() {
						k = decapDecapCounterDECAP_OUTER_V6
					}
					if after[k] != before[k]+1 {
						t.Errorf("counter %d did not move: %v -> %v", k, before, after)
					}
				})
			}
		}
	}
}

// TestDecapPassUntouched: not IP-in-IP, or IP-in-IP it will not strip.
func TestDecapPassUntouched(t *testing.T) {
	objs := testDecap(t)
	r := runner{prog: objs.XdpDecap}
	frame, ip := frameSpec{flow: flowTo(vip4TCP), flags: thACK}.build()
	tunnel := func(edit func(out []byte)) []byte {
		in := encapsulated(frame, 14, len(ip), lbSrc4, be4Near, macNear, macLB)
		edit(in[14:])
		return in
	}
	frame6, ip6 := frameSpec{flow: flowTo(vip6TCP), flags: thACK}.build()
	in6 := encapsulated(frame6, 14, len(ip6), lbSrc6, be6Near, macNear, macLB)
	in6[14+40] = 0x45 // says IPv6-in-IPv6, carries a version-4 header
	cases := []struct {
		name  string
		frame []byte
		want  decapDecapCounter
	}{
		{"plain tcp", frame, decapDecapCounterDECAP_PASS_NOT_ENCAP},
		{"arp", append(ethHeader(macLB, macRouter, 0, 0, 0x0806), make([]byte, 28)...), decapDecapCounterDECAP_PASS_NOT_ENCAP},
		{"outer options", tunnel(func(o []byte) { o[0] = 0x46; fixIPv4(o) }), decapDecapCounterDECAP_PASS_MALFORMED},
		{"outer fragment", tunnel(func(o []byte) { o[6] = 0x20; fixIPv4(o) }), decapDecapCounterDECAP_PASS_MALFORMED},
		{"outer length beyond frame", tunnel(func(o []byte) { o[2] = 0x10; fixIPv4(o) }), decapDecapCounterDECAP_PASS_MALFORMED},
		{"inner version wrong", in6, decapDecapCounterDECAP_PASS_MALFORMED},
		{"outer gre", tunnel(func(o []byte) { o[9] = 47; fixIPv4(o) }), decapDecapCounterDECAP_PASS_NOT_ENCAP},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := decapCounts(t, objs.DecapCounters)
			ret, out := r.run(t, c.frame)
			if ret != xdpPass {
				t.Fatalf("verdict %s", verdictName(ret))
			}
			sameBytes(t, "frame", out, c.frame)
			if after := decapCounts(t, objs.DecapCounters); after[c.want] != before[c.want]+1 {
				t.Errorf("counter %d: %v -> %v", c.want, before, after)
			}
		})
	}
	// Every cut of a tunnel frame passes untouched.
	in := tunnel(func([]byte) {})
	for n := 14; n < len(in); n++ {
		cut := append([]byte{}, in[:n]...)
		if ret, out := r.run(t, cut); ret != xdpPass {
			t.Errorf("cut %d: verdict %s", n, verdictName(ret))
		} else {
			sameBytes(t, fmt.Sprintf("cut %d", n), out, cut)
		}
	}
}

// TestLBThenDecap: what xdp_lb sends, xdp_decap turns back into the
// client's packet: only the MACs differ from what the client sent.
func TestLBThenDecap(t *testing.T) {
	lb := newTestLB(t, testOptions)
	fn := newFibNet(t)
	objs := testDecap(t)
	must(t, lb.SetSource(lbSrc4, lbSrc6))
	addBackend(t, lb, 1, be4Far)
	addBackend(t, lb, 2, be6Near)
	r := runner{prog: lb.objs.XdpLb, net: fn, ingress: fn.lb0}
	d := runner{prog: objs.XdpDecap}
	for vi, v := range vips {
		for b := uint32(1); b <= 2; b++ {
			addVIP(t, lb, v, uint32(vi), l4.ForwardIPIP, l4.HashSrcIP, []uint32{b})
			purge(t, lb, v)
			frame, _ := frameSpec{flow: flowTo(v), flags: thSYN, tpid: 0x8100, vlan: 42}.build()
			ret, tunnel := r.run(t, frame)
			if ret != xdpTX && ret != xdpRedirect {
				t.Fatalf("%v to %d: lb verdict %s", v, b, verdictName(ret))
			}
			_, out := d.run(t, tunnel)
			sameBytes(t, fmt.Sprintf("%v via %d", v, b), out[12:], frame[12:])
		}
	}
}

// decapNet is a namespace with a veth to attach to.
func decapNet(t *testing.T) (*testutil.Netns, int) {
	ns := testutil.NewNetns(t, "dcap")
	testutil.Veth(t, ns, "be0", "198.18.1.2/24", ns, "peer0", "")
	var idx int
	ns.MustDo(t, func() error {
		l, err := netlink.LinkByName("be0")
		if err == nil {
			idx = l.Attrs().Index
		}
		return err
	})
	return ns, idx
}

// attachedName is the name of ifindex's XDP program ("" if none).
func attachedName(t *testing.T, ns *testutil.Netns, ifindex int) (string, AttachMode) {
	var name string
	var mode AttachMode
	ns.MustDo(t, func() error {
		_, cur, err := attachedXDP(ifindex)
		if err != nil || cur == nil {
			return err
		}
		mode, _ = attachedMode(cur.AttachMode)
		name, _, err = progNameTag(ebpf.ProgramID(cur.ProgId))
		return err
	})
	return name, mode
}

// TestDecapAttach: attach is idempotent and adopts the running program
// (its counters go on), detach works from "another process" (no handle),
// twice, and a mode switch replaces the program.
func TestDecapAttach(t *testing.T) {
	ns, idx := decapNet(t)
	var d1, d2 *Decap
	ns.MustDo(t, func() (err error) {
		if d1, err = AttachDecap(idx, AttachGeneric); err != nil {
			return err
		}
		d2, err = AttachDecap(idx, AttachGeneric)
		return err
	})
	t.Cleanup(func() { d1.Close(); d2.Close() })
	if name, mode := attachedName(t, ns, idx); name != decapProgName || mode != AttachGeneric {
		t.Fatalf("attached %q %v", name, mode)
	}
	if did, _ := d1.Did(); did != DecapAttached {
		t.Errorf("first attach did %v, want DecapAttached", did)
	}
	if did, _ := d2.Did(); did != DecapKept {
		t.Errorf("second attach did %v, want DecapKept", did)
	}
	if progIDOf(t, d1.prog) != progIDOf(t, d2.prog) {
		t.Error("second attach replaced the program instead of adopting it")
	}
	frame, ip := frameSpec{flow: flowTo(vip4UDP)}.build()
	tunnel := encapsulated(frame, 14, len(ip), lbSrc4, be4Near, macNear, macLB)
	runner{prog: d1.prog}.run(t, tunnel)
	var s DecapStats
	ns.MustDo(t, func() error {
		o, err := OpenDecap(idx)
		if err != nil {
			return err
		}
		defer o.Close()
		s, err = o.Stats()
		return err
	})
	if s.OuterV4 != 1 {
		t.Errorf("stats via OpenDecap %+v, want one v4 decap", s)
	}

	ns.MustDo(t, func() error { // mode switch
		d3, err := AttachDecap(idx, AttachDriver)
		if err != nil {
			return err
		}
		defer d3.Close()
		if did, was := d3.Did(); did != DecapModeChanged || was != AttachGeneric {
			return fmt.Errorf("mode switch did %v (was %v), want DecapModeChanged from generic", did, was)
		}
		return nil
	})
	if name, mode := attachedName(t, ns, idx); name != decapProgName || mode != AttachDriver {
		t.Fatalf("after mode switch: %q %v", name, mode)
	}
	for i, want := range []bool{true, false} {
		ns.MustDo(t, func() error {
			got, err := DetachDecap(idx)
			if err == nil && got != want {
				err = fmt.Errorf("detach %d: detached=%v, want %v", i, got, want)
			}
			return err
		})
	}
	if name, _ := attachedName(t, ns, idx); name != "" {
		t.Fatalf("still attached: %q", name)
	}
}

func progIDOf(t *testing.T, p *ebpf.Program) ebpf.ProgramID {
	info, err := p.Info()
	must(t, err)
	id, _ := info.ID()
	return id
}

// TestDecapForeign: decap neither replaces nor detaches a program it did
// not attach (here the balancer's bpf_link); a missing interface is
// ErrNotFound, native mode on a bridge ErrNotSupported.
func TestDecapForeign(t *testing.T) {
	ns, idx := decapNet(t)
	ns.MustExec(t, "ip", "link", "add", "br0", "type", "bridge")
	lb := newTestLB(t, testOptions)
	ns.MustDo(t, func() error { return lb.Attach(idx, AttachGeneric) })
	ns.MustDo(t, func() error {
		if _, err := AttachDecap(idx, AttachGeneric); !errors.Is(err, ErrForeignProgram) {
			return fmt.Errorf("attach over xdp_lb: %v, want ErrForeignProgram", err)
		}
		if _, err := DetachDecap(idx); !errors.Is(err, ErrForeignProgram) {
			return fmt.Errorf("detach of xdp_lb: %v, want ErrForeignProgram", err)
		}
		if _, err := AttachDecap(1<<30, AttachGeneric); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("missing interface: %v, want ErrNotFound", err)
		}
		br, err := netlink.LinkByName("br0")
		if err != nil {
			return err
		}
		if _, err := AttachDecap(br.Attrs().Index, AttachDriver); !errors.Is(err, ErrNotSupported) {
			return fmt.Errorf("native on a bridge: %v, want ErrNotSupported", err)
		}
		return nil
	})
	if name, _ := attachedName(t, ns, idx); name != "xdp_lb" {
		t.Fatalf("xdp_lb gone: %q attached", name)
	}
}

// TestDecapFailedModeChangeRestores: a mode change that the driver
// refuses (native XDP on a bridge) puts the decap back as it was and says
// so, instead of leaving the interface without one.
func TestDecapFailedModeChangeRestores(t *testing.T) {
	ns, _ := decapNet(t)
	ns.MustExec(t, "ip", "link", "add", "br0", "type", "bridge")
	ns.MustDo(t, func() error {
		br, err := netlink.LinkByName("br0")
		if err != nil {
			return err
		}
		idx := br.Attrs().Index
		d, err := AttachDecap(idx, AttachGeneric)
		if err != nil {
			return err
		}
		before := progIDOf(t, d.prog)
		d.Close()
		defer DetachDecap(idx)
		if _, err := AttachDecap(idx, AttachDriver); !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "attached again") {
			return fmt.Errorf("native on a bridge over generic: %v, want ErrNotSupported saying the old one is back", err)
		}
		_, cur, err := attachedXDP(idx)
		if err != nil || cur == nil || ebpf.ProgramID(cur.ProgId) != before {
			return fmt.Errorf("after the refused mode change: %+v, %v; want program %d back", cur, err, before)
		}
		return nil
	})
}
