// l4lb xdp capture: sample the VIP's packets from the program's capture
// ring, name their verdicts and backends.

package xdpplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// capturePoll bounds each wait on the ring: how soon a cancelled capture
// stops, and how often the program's lease on it is renewed (the lease,
// bpf.DefaultCaptureLease, is many polls long).
const capturePoll = 250 * time.Millisecond

var _ plane.Capturer = (*Plane)(nil)

// Capture samples the VIP's packets (plane.Capturer). The program reads
// the filter only while the VIP is marked; Stop clears both, also when
// ctx ends or emit fails. If this process dies, the program's lease on
// the filter runs out by itself.
func (p *Plane) Capture(ctx context.Context, o plane.CaptureOptions, emit func(plane.CapturedPacket) error) (plane.CaptureEnd, error) {
	bo := bpf.CaptureOptions{VIP: p.key, Rate: o.Rate}
	if o.Backend != nil {
		bo.Backend = o.Backend.Index
	}
	var c *bpf.Capture
	var err error
	if !p.x.using(func() { c, err = p.x.lb.StartCapture(bo) }) {
		return plane.CaptureEnd{Why: "stopped"}, errors.New("xdp: the program is shut down")
	}
	if errors.Is(err, bpf.ErrCaptureBusy) {
		return plane.CaptureEnd{}, fmt.Errorf("%w: %w", plane.ErrCannotCapture, err)
	}
	if err != nil {
		return plane.CaptureEnd{}, err
	}
	end := plane.CaptureEnd{Why: "count"}
	err = p.readCapture(ctx, c, o.Count, emit, &end)
	p.x.using(func() {
		end.Lost = c.Lost()
		err = errors.Join(err, c.Stop())
	})
	return end, err
}

// readCapture emits the capture's packets until count, ctx's end or the
// program's shutdown.
func (p *Plane) readCapture(ctx context.Context, c *bpf.Capture, count int, emit func(plane.CapturedPacket) error, end *plane.CaptureEnd) error {
	for end.Captured < count {
		if err := ctx.Err(); err != nil {
			end.Why = "stopped"
			if errors.Is(err, context.DeadlineExceeded) {
				end.Why = "time"
			}
			return nil
		}
		var pkt bpf.CapturedPacket
		var err error
		if !p.x.using(func() {
			if pkt, err = c.Next(time.Now().Add(capturePoll)); errors.Is(err, os.ErrDeadlineExceeded) {
				err = c.Renew()
			} else if err == nil {
				err = emit(p.capturedPacket(pkt))
				end.Captured++
			}
		}) {
			end.Why = "stopped"
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// capturedPacket names a sampled packet's verdict and backend.
func (p *Plane) capturedPacket(pkt bpf.CapturedPacket) plane.CapturedPacket {
	return plane.CapturedPacket{Time: pkt.Time, Length: pkt.FrameLen, Data: pkt.Data,
		Verdict: pkt.Action, Reason: pkt.Reason.String(), Backend: p.backendLabel(pkt.Backend)}
}

// backendLabel is "name (address)" of backend index i, its address when
// it has no name; "" for none.
func (p *Plane) backendLabel(i uint32) string {
	if i == 0 {
		return ""
	}
	p.mu.Lock()
	xb := p.backends[i]
	p.mu.Unlock()
	if xb == nil {
		return "index " + strconv.FormatUint(uint64(i), 10)
	}
	return backendName(xb.b)
}

func backendName(b *l4.Backend) string {
	addr := b.Addr.String()
	if string(b.ID) == addr || b.ID == "" {
		return addr
	}
	return string(b.ID) + " (" + addr + ")"
}
