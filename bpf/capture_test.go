// Capture: the ring gets the frame as received with its verdict and
// backend, for the captured VIP only, within the filter's rate, backend
// and lease; nothing when no capture runs.

package bpf

import (
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/l4lb/l4lb/l4"
)

// fastCapture is a rate no test reaches.
const fastCapture = 100000

// captureEnv is a balancer with two l2 VIPs, one backend each, and a
// non-VIP flow.
func captureEnv(t *testing.T) (*LB, runner) {
	lb := newTestLB(t, testOptions)
	addBackend(t, lb, 7, netip.MustParseAddr("198.18.0.77"))
	addBackend(t, lb, 8, netip.MustParseAddr("2001:db8::88"))
	addVIP(t, lb, vip4TCP, 3, l4.ForwardL2, l4.HashFiveTuple, []uint32{7})
	addVIP(t, lb, vip6TCP, 4, l4.ForwardL2, l4.HashFiveTuple, []uint32{8})
	addVIP(t, lb, vip4UDP, 5, l4.ForwardL2, l4.HashFiveTuple, []uint32{0}) // drops: no backend
	return lb, runner{prog: lb.objs.XdpLb}
}

// ringEmpty fails when the ring holds a record.
func ringEmpty(t *testing.T, lb *LB, why string) {
	t.Helper()
	rd, err := ringbuf.NewReader(lb.objs.CaptureRing)
	must(t, err)
	defer rd.Close()
	if n := rd.AvailableBytes(); n != 0 {
		t.Errorf("%s: the ring holds %d bytes", why, n)
	}
}

// nextPacket reads the capture's next packet, failing on none.
func nextPacket(t *testing.T, c *Capture) CapturedPacket {
	t.Helper()
	p, err := c.Next(time.Now().Add(2 * time.Second))
	if err != nil {
		t.Fatalf("no record: %v", err)
	}
	return p
}

// noPacket fails when the capture has a packet to read.
func noPacket(t *testing.T, c *Capture, why string) {
	t.Helper()
	if p, err := c.Next(time.Now().Add(20 * time.Millisecond)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("%s: got %+v, %v; want no record", why, p, err)
	}
}

func TestCaptureRecords(t *testing.T) {
	lb, r := captureEnv(t)
	frame, _ := frameSpec{flow: flowTo(vip4TCP), flags: thACK}.build()
	big, _ := frameSpec{flow: flowTo(vip4TCP), flags: thACK, payload: make([]byte, 900)}.build()
	other, _ := frameSpec{flow: flowTo(vip6TCP), flags: thACK}.build()
	notVIP, _ := frameSpec{flow: l4.Flow{Src: client4, Dst: netip.MustParseAddrPort("198.18.100.9:80"), Proto: l4.TCP}, flags: thACK}.build()
	for _, f := range [][]byte{frame, other, notVIP} {
		r.run(t, f)
	}
	ringEmpty(t, lb, "no capture")

	before := time.Now()
	c, err := lb.StartCapture(CaptureOptions{VIP: vip4TCP, Rate: fastCapture})
	must(t, err)
	defer c.Stop()
	if _, err := lb.StartCapture(CaptureOptions{VIP: vip6TCP}); !errors.Is(err, ErrCaptureBusy) {
		t.Errorf("second capture: %v, want ErrCaptureBusy", err)
	}
	// A republish (health, reload) keeps the VIP marked.
	must(t, lb.SetVIP(vip4TCP, VIPEntry{Index: 3, HashKey: l4.HashFiveTuple, Forward: l4.ForwardL2}))
	if e, _ := lb.LookupVIP(vip4TCP); !e.Capture {
		t.Error("SetVIP cleared the capture flag")
	}
	if ret, out := r.run(t, frame); ret != xdpTX || string(out[:6]) == string(frame[:6]) {
		t.Fatalf("verdict %s: the captured VIP must forward as before", verdictName(ret))
	}
	p := nextPacket(t, c)
	sameBytes(t, "captured frame", p.Data, frame) // as received, not as rewritten
	if p.FrameLen != len(frame) || p.Backend != 7 || p.Reason != CounterTX || p.VIPIndex != 3 || p.Action != "XDP_TX" {
		t.Errorf("record %+v, want len %d backend 7 tx vip 3", p, len(frame))
	}
	if p.Time.Before(before.Add(-time.Second)) || p.Time.After(time.Now().Add(time.Second)) {
		t.Errorf("time %v, not around %v", p.Time, before)
	}
	r.run(t, other)
	r.run(t, notVIP)
	noPacket(t, c, "other VIP and not a VIP")

	r.run(t, big)
	p = nextPacket(t, c)
	if p.FrameLen != len(big) || len(p.Data) != CaptureSnap {
		t.Errorf("big frame: len %d kept %d, want %d and %d", p.FrameLen, len(p.Data), len(big), CaptureSnap)
	}
	sameBytes(t, "snap", p.Data, big[:CaptureSnap])

	must(t, c.Stop())
	if e, _ := lb.LookupVIP(vip4TCP); e.Capture {
		t.Error("Stop left the VIP marked")
	}
	r.run(t, frame)
	ringEmpty(t, lb, "after Stop")
}

// TestCaptureFilter: the backend filter, a drop's record, the rate and
// the lease.
func TestCaptureFilter(t *testing.T) {
	lb, r := captureEnv(t)
	frame, _ := frameSpec{flow: flowTo(vip4TCP), flags: thACK}.build()
	udp, _ := frameSpec{flow: flowTo(vip4UDP)}.build()

	c, err := lb.StartCapture(CaptureOptions{VIP: vip4TCP, Backend: 9, Rate: fastCapture})
	must(t, err)
	r.run(t, frame)
	noPacket(t, c, "backend filter 9, packet to 7")
	must(t, c.Stop())

	c, err = lb.StartCapture(CaptureOptions{VIP: vip4UDP})
	must(t, err)
	if ret, _ := r.run(t, udp); ret != xdpDrop {
		t.Fatalf("verdict %s, want DROP", verdictName(ret))
	}
	if p := nextPacket(t, c); p.Reason != CounterDropNoBackend || p.Backend != 0 || p.Action != "XDP_DROP" {
		t.Errorf("drop record %+v", p)
	}
	must(t, c.Stop())

	const rate = 2
	c, err = lb.StartCapture(CaptureOptions{VIP: vip4TCP, Rate: rate})
	must(t, err)
	start := time.Now()
	for range 8 {
		r.run(t, frame)
	}
	allowed := rate + int(time.Since(start)*rate/time.Second) + 1 // a racing CPU may add one
	got := 0
	for ; ; got++ {
		if _, err := c.Next(time.Now().Add(20 * time.Millisecond)); err != nil {
			break
		}
	}
	if got < rate || got > allowed {
		t.Errorf("rate %d/s: %d of 8 packets sampled, want %d..%d", rate, got, rate, allowed)
	}
	must(t, c.Stop())

	c, err = lb.StartCapture(CaptureOptions{VIP: vip4TCP, Rate: fastCapture, Lease: time.Millisecond})
	must(t, err)
	defer c.Stop()
	for deadline := monotonic() + uint64(2*time.Millisecond); monotonic() < deadline; {
		time.Sleep(time.Millisecond)
	}
	r.run(t, frame)
	noPacket(t, c, "lease expired")
	must(t, c.Renew())
	r.run(t, frame)
	nextPacket(t, c)
}
