// lbiface.go: one interface of a balancer that runs on several: taking it off alone, and the mode the kernel runs it in.

package bpf

import "fmt"

// DetachFrom removes the balancer from ifindex alone (and its link's
// pin), leaving it on the other interfaces. Detaching an interface this
// LB does not run on is a no-op.
func (lb *LB) DetachFrom(ifindex int) error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	l, ok := lb.links[ifindex]
	if !ok {
		return nil
	}
	delete(lb.links, ifindex)
	if err := l.Unpin(); err != nil { // no-op when not pinned
		l.Close()
		return fmt.Errorf("unpin xdp link on ifindex %d: %w", ifindex, err)
	}
	if err := l.Close(); err != nil {
		return fmt.Errorf("detach ifindex %d: %w", ifindex, err)
	}
	return nil
}

// AttachedMode reports the mode the XDP program on ifindex runs in, as
// the kernel says (an adopted pinned link keeps the mode it was first
// attached in); false when none runs there, or in another mode (offload).
func AttachedMode(ifindex int) (AttachMode, bool, error) {
	_, cur, err := attachedXDP(ifindex)
	if err != nil || cur == nil {
		return 0, false, err
	}
	m, ok := attachedMode(cur.AttachMode)
	return m, ok, nil
}
