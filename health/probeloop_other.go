//go:build !linux

// probeloop_other.go: no probe loop off Linux; tcp checks keep their goroutines.

package health

import (
	"errors"
	"net/netip"
	"time"
)

// probeLoop is Linux only.
type probeLoop struct{}

type loopProbe struct{}

func newProbeLoop(*Manager, func() error) (*probeLoop, error) {
	return nil, errors.New("probe loop: Linux only")
}

func newLoopProbe(*target, netip.AddrPort, Spec) (*loopProbe, bool) { return nil, false }

func (l *probeLoop) add(*loopProbe, time.Time) (func(), chan struct{}) { return func() {}, nil }

func (l *probeLoop) close() {}
