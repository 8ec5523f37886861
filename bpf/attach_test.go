// Attaching xdp_lb to interfaces: modes, idempotence, errors.

package bpf

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/vishvananda/netlink"
)

func attachedProgID(t *testing.T, ns *testutil.Netns, ifindex int) ebpf.ProgramID {
	var id ebpf.ProgramID
	ns.MustDo(t, func() error {
		_, cur, err := attachedXDP(ifindex)
		if cur != nil {
			id = ebpf.ProgramID(cur.ProgId)
		}
		return err
	})
	return id
}

// TestAttach: both modes attach; attaching twice is a no-op; Detach and
// Close without pinning remove the program; Detach twice is fine.
func TestAttach(t *testing.T) {
	for _, mode := range []AttachMode{AttachDriver, AttachGeneric} {
		t.Run(mode.String(), func(t *testing.T) {
			ns, idx := decapNet(t)
			lb := newTestLB(t, testOptions)
			ns.MustDo(t, func() error { return lb.Attach(idx, mode) })
			ns.MustDo(t, func() error { return lb.Attach(idx, mode) })
			if name, got := attachedName(t, ns, idx); name != "xdp_lb" || got != mode {
				t.Fatalf("attached %q in %v", name, got)
			}
			must(t, lb.Detach())
			must(t, lb.Detach())
			if name, _ := attachedName(t, ns, idx); name != "" {
				t.Fatalf("after Detach: %q", name)
			}
			ns.MustDo(t, func() error { return lb.Attach(idx, mode) })
			must(t, lb.Close())
			if name, _ := attachedName(t, ns, idx); name != "" {
				t.Fatalf("after Close: %q", name)
			}
		})
	}
}

// TestAttachErrors: a missing interface is ErrNotFound, native mode on a
// device without native XDP is ErrNotSupported, an occupied interface is
// ErrForeignProgram.
func TestAttachErrors(t *testing.T) {
	ns, idx := decapNet(t)
	ns.MustExec(t, "ip", "link", "add", "br0", "type", "bridge")
	var br int
	ns.MustDo(t, func() error {
		l, err := netlink.LinkByName("br0")
		if err == nil {
			br = l.Attrs().Index
		}
		return err
	})
	lb := newTestLB(t, testOptions)
	other := newTestLB(t, testOptions)
	ns.MustDo(t, func() error { return other.Attach(idx, AttachGeneric) })
	ns.MustDo(t, func() error {
		for _, c := range []struct {
			ifindex int
			mode    AttachMode
			want    error
		}{
			{1 << 30, AttachDriver, ErrNotFound},
			{br, AttachDriver, ErrNotSupported},
			{idx, AttachGeneric, ErrForeignProgram},
		} {
			if err := lb.Attach(c.ifindex, c.mode); !errors.Is(err, c.want) {
				return fmt.Errorf("attach %d %v: %v, want %v", c.ifindex, c.mode, err, c.want)
			}
		}
		return nil
	})
}
