// Capture: sample an xdp VIP's packets (l4lb xdp capture).

package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/l4lb/l4lb/l4/plane"
)

// Capture samples the packets of the VIP called vipName through its data
// plane, emitting each, until req.Count, req.Seconds or ctx's end; the
// backend, when named, is resolved as drain resolves it.
func (r *Runtime) Capture(ctx context.Context, vipName string, req plane.CaptureRequest, emit func(plane.CapturedPacket) error) (plane.CaptureEnd, error) {
	if err := plane.CheckCapture(req); err != nil {
		return plane.CaptureEnd{}, err
	}
	v := r.vipNamed(vipName)
	if v == nil {
		return plane.CaptureEnd{}, fmt.Errorf("vip %q: %w", vipName, ErrNoVIP)
	}
	c, ok := v.dp.(plane.Capturer)
	if !ok {
		return plane.CaptureEnd{}, fmt.Errorf("vip %q: %w: it is a %s VIP; its packets reach the kernel, where tcpdump sees them", vipName, plane.ErrCannotCapture, v.cfg().Mode)
	}
	o := plane.CaptureOptions{Count: req.Count, Rate: req.Rate}
	if req.Backend != "" {
		v.mu.Lock()
		b, err := v.resolveLocked(req.Backend)
		v.mu.Unlock()
		if err != nil {
			return plane.CaptureEnd{}, fmt.Errorf("vip %q: %w", vipName, err)
		}
		o.Backend = b.b
	}
	seconds := req.Seconds
	if seconds == 0 {
		seconds = plane.DefaultCaptureSeconds
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds*float64(time.Second)))
	defer cancel()
	return c.Capture(ctx, o, emit)
}
