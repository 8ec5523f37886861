// Packet capture (l4lb xdp capture): the optional interface of the planes
// that can sample a VIP's packets, and its wire types.

package plane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Capture bounds.
const (
	MaxCaptureCount   = 100000
	MaxCaptureRate    = 100000
	MaxCaptureSeconds = 3600
	// DefaultCaptureSeconds bounds a capture that asks for no time.
	DefaultCaptureSeconds = 60
)

// ErrBadCapture: a capture request out of bounds (the admin API answers
// 400).
var ErrBadCapture = errors.New("bad capture request")

// ErrCannotCapture: the VIP's data plane does not sample packets (a
// proxy VIP: the kernel sees its packets, tcpdump does too).
var ErrCannotCapture = errors.New("cannot capture")

// CaptureRequest is the body of POST /vips/{vip}/capture.
type CaptureRequest struct {
	// Backend keeps only packets sent to this backend (a name or an
	// address); empty: every packet of the VIP.
	Backend string `json:"backend,omitempty"`
	// Count is how many packets to capture, 1..MaxCaptureCount.
	Count int `json:"count"`
	// Rate is the most packets a second the program samples (0: 1000).
	Rate int `json:"rate,omitempty"`
	// Seconds bounds the capture (0: DefaultCaptureSeconds).
	Seconds float64 `json:"seconds,omitempty"`
}

// CaptureOptions are what a Capturer is asked for, the backend resolved.
type CaptureOptions struct {
	Backend *l4.Backend // nil: any
	Count   int
	Rate    int
}

// CapturedPacket is one sampled packet: the frame as the interface
// received it and what the data plane did with it.
type CapturedPacket struct {
	Time   time.Time `json:"time"`
	Length int       `json:"length"` // bytes of the frame as received
	Data   []byte    `json:"data"`   // its first bytes (base64 in JSON)
	// Verdict is the XDP action (XDP_TX, XDP_DROP ...); Reason the
	// counter that names why (tx, drop_no_backend, ...).
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	// Backend is the backend the packet went to, "name (address)"; empty
	// when none.
	Backend string `json:"backend,omitempty"`
}

// CaptureEnd is how a capture ended.
type CaptureEnd struct {
	Captured int `json:"captured"`
	// Lost counts samples the ring had no room for.
	Lost uint64 `json:"lost,omitempty"`
	// Why: "count" (all asked for), "time" (Seconds passed) or
	// "stopped" (the client went away, or l4lb stops).
	Why   string `json:"why"`
	Error string `json:"error,omitempty"`
}

// CaptureLine is one line of the capture's answer (JSON lines): a packet,
// or, last, the end.
type CaptureLine struct {
	Packet *CapturedPacket `json:"packet,omitempty"`
	End    *CaptureEnd     `json:"end,omitempty"`
}

// Capturer is a Plane that can sample its VIP's packets. Capture emits
// up to o.Count packets until ctx is done, then turns sampling off (also
// on an error); it returns how many it emitted and the samples lost.
type Capturer interface {
	Capture(ctx context.Context, o CaptureOptions, emit func(CapturedPacket) error) (CaptureEnd, error)
}

// CheckCapture refuses a request out of bounds, with ErrBadCapture.
func CheckCapture(req CaptureRequest) error {
	switch {
	case req.Count < 1 || req.Count > MaxCaptureCount:
		return fmt.Errorf("%w: count %d: want 1..%d", ErrBadCapture, req.Count, MaxCaptureCount)
	case req.Rate < 0 || req.Rate > MaxCaptureRate:
		return fmt.Errorf("%w: rate %d: want 1..%d packets a second (0: 1000)", ErrBadCapture, req.Rate, MaxCaptureRate)
	case req.Seconds < 0 || req.Seconds > MaxCaptureSeconds:
		return fmt.Errorf("%w: seconds %g: want up to %d (0: %d)", ErrBadCapture, req.Seconds, MaxCaptureSeconds, DefaultCaptureSeconds)
	}
	return nil
}
