// Decap: the backends' xdp_decap program, attached by netlink so that it
// outlives the process that attached it.
package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// decapProgName is the kernel name of xdp_decap: how a later process
// (l4lb decap detach) tells it from someone else's program.
const decapProgName = "xdp_decap"

// Decap is xdp_decap attached to an interface. Closing it releases this
// process's handles; the program stays attached until DetachDecap.
type Decap struct {
	ifindex  int
	prog     *ebpf.Program
	counters *ebpf.Map
	percpu   *perCPU
}

// DecapStats are xdp_decap's counters (per interface, since attach).
type DecapStats struct {
	OuterV4   uint64 // outer IPv4 headers stripped
	OuterV6   uint64 // outer IPv6 headers stripped
	NotEncap  uint64 // passed untouched: not IP-in-IP
	Malformed uint64 // passed untouched: truncated, options, fragment, bad length
	Failed    uint64 // passed untouched: bpf_xdp_adjust_head failed
}

// AttachDecap attaches xdp_decap to ifindex through netlink (not a
// bpf_link), so it stays after this process exits. If the interface already
// runs this exact xdp_decap in this mode, AttachDecap adopts it (counters
// continue); an older xdp_decap is replaced in one netlink update; any
// other XDP program is left alone and ErrForeignProgram returned.
func AttachDecap(ifindex int, mode AttachMode) (*Decap, error) {
	flags, err := netlinkFlags(mode)
	if err != nil {
		return nil, err
	}
	l, cur, err := attachedXDP(ifindex)
	if err != nil {
		return nil, err
	}
	var objs decapObjects
	if err := loadDecapObjects(&objs, nil); err != nil {
		return nil, fmt.Errorf("load xdp_decap: %w", err)
	}
	d, err := attachDecap(l, cur, mode, flags, &objs)
	if err != nil || d.prog != objs.XdpDecap {
		objs.Close() // failed, or adopted the attached program
	}
	return d, err
}

// attachDecap decides between adopting, replacing and attaching.
func attachDecap(l netlink.Link, cur *netlink.LinkXdp, mode AttachMode, flags int, objs *decapObjects) (*Decap, error) {
	ifindex := l.Attrs().Index
	if cur != nil {
		name, tag, err := progNameTag(ebpf.ProgramID(cur.ProgId))
		if err != nil {
			return nil, fmt.Errorf("attach decap to ifindex %d: %w", ifindex, err)
		}
		if name != decapProgName {
			return nil, fmt.Errorf("attach decap to ifindex %d: %w (%q)", ifindex, ErrForeignProgram, name)
		}
		curMode, _ := attachedMode(cur.AttachMode)
		if ours, err := objs.XdpDecap.Info(); err == nil && ours.Tag == tag && curMode == mode {
			return openDecap(ifindex, ebpf.ProgramID(cur.ProgId))
		}
		if curMode != mode { // the kernel refuses two modes at once
			if err := setXDP(l, -1, cur.AttachMode); err != nil {
				return nil, fmt.Errorf("attach decap to ifindex %d: detach %v mode: %w", ifindex, curMode, err)
			}
		}
	}
	if err := netlink.LinkSetXdpFdWithFlags(l, objs.XdpDecap.FD(), flags); err != nil {
		return nil, attachError(ifindex, mode, err)
	}
	pc, err := newPerCPU(8)
	if err != nil {
		return nil, err
	}
	return &Decap{ifindex: ifindex, prog: objs.XdpDecap, counters: objs.DecapCounters, percpu: pc}, nil
}

// DetachDecap removes xdp_decap from ifindex, whichever process attached
// it. It returns false (and no error) when no program is attached, and
// ErrForeignProgram when another program is.
func DetachDecap(ifindex int) (bool, error) {
	l, cur, err := attachedXDP(ifindex)
	if err != nil || cur == nil {
		return false, err
	}
	name, _, err := progNameTag(ebpf.ProgramID(cur.ProgId))
	if err != nil {
		return false, fmt.Errorf("detach decap from ifindex %d: %w", ifindex, err)
	}
	if name != decapProgName {
		return false, fmt.Errorf("detach decap from ifindex %d: %w (%q)", ifindex, ErrForeignProgram, name)
	}
	if err := setXDP(l, -1, cur.AttachMode); err != nil {
		return false, fmt.Errorf("detach decap from ifindex %d: %w", ifindex, err)
	}
	return true, nil
}

// OpenDecap opens the xdp_decap attached to ifindex (by any process), to
// read its counters. ErrNotFound if none is attached.
func OpenDecap(ifindex int) (*Decap, error) {
	_, cur, err := attachedXDP(ifindex)
	if err != nil {
		return nil, err
	}
	if cur == nil {
		return nil, fmt.Errorf("open decap on ifindex %d: %w", ifindex, ErrNotFound)
	}
	name, _, err := progNameTag(ebpf.ProgramID(cur.ProgId))
	if err != nil {
		return nil, fmt.Errorf("open decap on ifindex %d: %w", ifindex, err)
	}
	if name != decapProgName {
		return nil, fmt.Errorf("open decap on ifindex %d: %w (%q)", ifindex, ErrForeignProgram, name)
	}
	return openDecap(ifindex, ebpf.ProgramID(cur.ProgId))
}

// openDecap opens an attached xdp_decap and its counters map by ID.
func openDecap(ifindex int, id ebpf.ProgramID) (*Decap, error) {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, fmt.Errorf("open decap program %d: %w", id, err)
	}
	m, err := counterMapOf(prog)
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("open decap program %d: %w", id, err)
	}
	pc, err := newPerCPU(8)
	if err != nil {
		prog.Close()
		m.Close()
		return nil, err
	}
	return &Decap{ifindex: ifindex, prog: prog, counters: m, percpu: pc}, nil
}

// counterMapOf finds decap_counters among prog's maps.
func counterMapOf(prog *ebpf.Program) (*ebpf.Map, error) {
	info, err := prog.Info()
	if err != nil {
		return nil, err
	}
	ids, _ := info.MapIDs()
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		if mi, err := m.Info(); err == nil && mi.Name == decapMapDecapCounters {
			return m, nil
		}
		m.Close()
	}
	return nil, fmt.Errorf("map %s not found", decapMapDecapCounters)
}

// Ifindex is the interface the program is attached to.
func (d *Decap) Ifindex() int { return d.ifindex }

// Stats reads the counters, summed over CPUs.
func (d *Decap) Stats() (DecapStats, error) {
	var s DecapStats
	for _, c := range []struct {
		key decapDecapCounter
		out *uint64
	}{
		{decapDecapCounterDECAP_OUTER_V4, &s.OuterV4},
		{decapDecapCounterDECAP_OUTER_V6, &s.OuterV6},
		{decapDecapCounterDECAP_PASS_NOT_ENCAP, &s.NotEncap},
		{decapDecapCounterDECAP_PASS_MALFORMED, &s.Malformed},
		{decapDecapCounterDECAP_FAILED, &s.Failed},
	} {
		if err := d.percpu.sum(d.counters, uint32(c.key), unsafeOne(c.out)); err != nil {
			return s, fmt.Errorf("decap stats: %w", err)
		}
	}
	return s, nil
}

// Close releases this process's handles; the program stays attached.
func (d *Decap) Close() error {
	return errors.Join(d.prog.Close(), d.counters.Close())
}

// attachedXDP returns the link and its attached XDP program (nil if none).
func attachedXDP(ifindex int) (netlink.Link, *netlink.LinkXdp, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		if errors.Is(err, unix.ENODEV) || errors.As(err, new(netlink.LinkNotFoundError)) {
			return nil, nil, fmt.Errorf("ifindex %d: no such interface: %w", ifindex, ErrNotFound)
		}
		return nil, nil, fmt.Errorf("ifindex %d: %w", ifindex, err)
	}
	x := l.Attrs().Xdp
	if x == nil || !x.Attached || x.ProgId == 0 {
		return l, nil, nil
	}
	return l, x, nil
}

// progNameTag reads a program's kernel name and tag.
func progNameTag(id ebpf.ProgramID) (string, string, error) {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return "", "", fmt.Errorf("program %d: %w", id, err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return "", "", fmt.Errorf("program %d info: %w", id, err)
	}
	return info.Name, info.Tag, nil
}

// netlinkFlags maps an AttachMode onto netlink XDP flags.
func netlinkFlags(mode AttachMode) (int, error) {
	switch mode {
	case AttachDriver:
		return nl.XDP_FLAGS_DRV_MODE, nil
	case AttachGeneric:
		return nl.XDP_FLAGS_SKB_MODE, nil
	}
	return 0, fmt.Errorf("attach mode %v unknown", mode)
}

// attachedMode maps netlink's IFLA_XDP_ATTACHED onto an AttachMode.
func attachedMode(a uint32) (AttachMode, bool) {
	switch a {
	case nl.XDP_ATTACHED_DRV:
		return AttachDriver, true
	case nl.XDP_ATTACHED_SKB:
		return AttachGeneric, true
	}
	return 0, false
}

// setXDP sets (fd) or clears (-1) the XDP program of the mode attached.
func setXDP(l netlink.Link, fd int, attached uint32) error {
	flags := nl.XDP_FLAGS_DRV_MODE
	if attached == nl.XDP_ATTACHED_SKB {
		flags = nl.XDP_FLAGS_SKB_MODE
	}
	return netlink.LinkSetXdpFdWithFlags(l, fd, flags)
}
