// Capture: sampling one xdp VIP's packets into the capture ring
// (include/capture.h), for l4lb xdp capture.

package bpf

import (
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
)

// CaptureSnap is how many bytes of each frame a capture keeps.
const CaptureSnap = len(lbCaptureRecord{}.Data)

// DefaultCaptureRate is how many packets a second a capture samples at
// most when its options say none.
const DefaultCaptureRate = 1000

// DefaultCaptureLease is how long the program samples after the last
// Renew: a capture whose reader died stops by itself within it.
const DefaultCaptureLease = 5 * time.Second

// ErrCaptureBusy: another capture runs on this program (one at a time).
var ErrCaptureBusy = errors.New("a capture is already running")

// CaptureOptions say what StartCapture samples.
type CaptureOptions struct {
	VIP l4.VIPKey
	// Backend keeps only packets sent to this backend index (0: any).
	// The rate applies before it: with a filter, fewer are kept.
	Backend uint32
	// Rate is the most packets a second sampled (0: DefaultCaptureRate).
	Rate int
	// Lease is how long the program samples without a Renew (0:
	// DefaultCaptureLease).
	Lease time.Duration
}

// CapturedPacket is one sampled packet: the frame as received, before
// any encapsulation, and what the program did with it.
type CapturedPacket struct {
	Time     time.Time
	FrameLen int    // bytes of the frame as received
	Data     []byte // its first bytes, at most CaptureSnap
	VIPIndex uint32
	Backend  uint32  // backend index it went to (or would have); 0: none
	Reason   Counter // the verdict's counter
	Action   string  // the XDP action returned: XDP_TX, XDP_DROP ...
}

// XDP actions, as a CapturedPacket's Action.
var xdpActions = [...]string{"XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT"}

// xdpAction names the XDP action a program returned.
func xdpAction(a uint32) string {
	if int(a) < len(xdpActions) {
		return xdpActions[a]
	}
	return fmt.Sprintf("XDP(%d)", a)
}

// Capture is a running capture: its VIP marked, the filter set, a reader
// on the ring. Stop ends it; its methods are for one goroutine.
type Capture struct {
	lb       *LB
	key      l4.VIPKey
	filter   lbCaptureFilter
	lease    time.Duration
	rd       *ringbuf.Reader
	monoBase uint64 // CLOCK_MONOTONIC ns at wallBase: records carry the former
	wallBase time.Time
	rec      ringbuf.Record
}

// StartCapture marks the VIP, sets the filter and opens the ring. One
// capture at a time (ErrCaptureBusy); the VIP must be in the program.
func (lb *LB) StartCapture(o CaptureOptions) (*Capture, error) {
	rate := o.Rate
	if rate == 0 {
		rate = DefaultCaptureRate
	}
	if rate < 0 || rate > int(time.Second) {
		return nil, fmt.Errorf("capture rate %d: want 1..1e9 packets a second", rate)
	}
	lease := o.Lease
	if lease <= 0 {
		lease = DefaultCaptureLease
	}
	lb.capMu.Lock()
	defer lb.capMu.Unlock()
	if lb.captured != nil {
		return nil, fmt.Errorf("capture %v: %w (on %v)", o.VIP, ErrCaptureBusy, *lb.captured)
	}
	e, err := lb.LookupVIP(o.VIP)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	rd, err := ringbuf.NewReader(lb.objs.CaptureRing)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	c := &Capture{lb: lb, key: o.VIP, lease: lease, rd: rd, wallBase: time.Now(), monoBase: monotonic(),
		filter: lbCaptureFilter{VipIndex: e.Index, Backend: o.Backend, Interval: rateInterval(uint32(rate))}}
	c.filter.Expires = c.monoBase + uint64(lease)
	if err := lb.objs.CaptureFilter.Put(uint32(0), &c.filter); err != nil {
		rd.Close()
		return nil, fmt.Errorf("capture: filter: %w", err)
	}
	if err := lb.markCapture(o.VIP, true); err != nil {
		lb.clearCaptureFilter()
		rd.Close()
		return nil, fmt.Errorf("capture: %w", err)
	}
	lb.captured = &c.key
	return c, nil
}

// markCapture sets or clears the VIP's VIP_CAPTURE flag (capMu held).
func (lb *LB) markCapture(key l4.VIPKey, on bool) error {
	k, err := vipKeyOf(key)
	if err != nil {
		return err
	}
	var v lbVipValue
	if err := lb.objs.Vips.Lookup(&k, &v); err != nil {
		return fmt.Errorf("vip %v: %w", key, notFound(err))
	}
	v.Flags &^= uint8(lbVipFlagVIP_CAPTURE)
	if on {
		v.Flags |= uint8(lbVipFlagVIP_CAPTURE)
	}
	return lb.putVIP(&k, &v, ebpf.UpdateExist)
}

// capturing says whether key is the VIP a capture samples: SetVIP keeps
// its flag (capMu held).
func (lb *LB) capturing(key l4.VIPKey) bool { return lb.captured != nil && *lb.captured == key }

func (lb *LB) clearCaptureFilter() error {
	return lb.objs.CaptureFilter.Put(uint32(0), &lbCaptureFilter{})
}

// Renew extends the program's lease on the capture by its Lease from now.
func (c *Capture) Renew() error {
	c.filter.Expires = monotonic() + uint64(c.lease)
	var cur lbCaptureFilter
	if err := c.lb.objs.CaptureFilter.Lookup(uint32(0), &cur); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	cur.Expires = c.filter.Expires // keep the program's rate state and lost count
	if err := c.lb.objs.CaptureFilter.Put(uint32(0), &cur); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	return nil
}

// Lost returns how many samples the ring had no room for.
func (c *Capture) Lost() uint64 {
	var cur lbCaptureFilter
	if c.lb.objs.CaptureFilter.Lookup(uint32(0), &cur) != nil {
		return 0
	}
	return cur.Lost
}

// Next returns the next sampled packet of this capture, waiting until
// deadline (then an error wrapping os.ErrDeadlineExceeded). Records an
// earlier capture left in the ring are skipped.
func (c *Capture) Next(deadline time.Time) (CapturedPacket, error) {
	c.rd.SetDeadline(deadline)
	for {
		if err := c.rd.ReadInto(&c.rec); err != nil {
			return CapturedPacket{}, fmt.Errorf("capture: %w", err)
		}
		if p, ok := c.decode(c.rec.RawSample); ok {
			return p, nil
		}
	}
}

// decode turns a ring record into a packet; false: not this capture's.
func (c *Capture) decode(raw []byte) (CapturedPacket, bool) {
	var r lbCaptureRecord
	if len(raw) < int(unsafe.Sizeof(r)) {
		return CapturedPacket{}, false
	}
	r = *(*lbCaptureRecord)(unsafe.Pointer(&raw[0]))
	if r.VipIndex != c.filter.VipIndex || r.Time < c.monoBase {
		return CapturedPacket{}, false
	}
	n := min(int(r.CapLen), CaptureSnap)
	return CapturedPacket{
		Time: c.wallBase.Add(time.Duration(r.Time - c.monoBase)), FrameLen: int(r.FrameLen),
		Data: append([]byte(nil), r.Data[:n]...), VIPIndex: r.VipIndex, Backend: r.Backend, Reason: Counter(r.Reason),
		Action: xdpAction(r.Action),
	}, true
}

// Stop ends the capture: the filter off, the VIP's flag cleared (it may
// be gone by now), the reader closed.
func (c *Capture) Stop() error {
	lb := c.lb
	lb.capMu.Lock()
	defer lb.capMu.Unlock()
	errs := []error{lb.clearCaptureFilter()}
	if err := lb.markCapture(c.key, false); err != nil && !errors.Is(err, ErrNotFound) {
		errs = append(errs, err)
	}
	errs = append(errs, c.rd.Close())
	if lb.captured == &c.key {
		lb.captured = nil
	}
	if err := errors.Join(errs...); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("capture stop: %w", err)
	}
	return nil
}

// monotonic is CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
func monotonic() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
