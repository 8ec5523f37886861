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
	config   *ebpf.Map // decap_config: the GUE port
	percpu   *perCPU
	did      DecapAction // what AttachDecap did
	was      AttachMode  // with DecapModeChanged: the mode before
}

// DecapAction is what AttachDecap did to the interface.
type DecapAction uint8

const (
	// DecapAttached: no program was attached; xdp_decap is now.
	DecapAttached DecapAction = iota
	// DecapKept: this very xdp_decap ran there in this mode already; it
	// was adopted, untouched.
	DecapKept
	// DecapReplaced: another version of xdp_decap ran there; this one
	// replaced it in one update.
	DecapReplaced
	// DecapModeChanged: xdp_decap ran there in the other mode; it was
	// detached and this one attached in the mode asked for.
	DecapModeChanged
)

// DecapStats are xdp_decap's counters (per interface, since attach).
type DecapStats struct {
	OuterV4   uint64 // outer IPv4 headers stripped
	OuterV6   uint64 // outer IPv6 headers stripped
	NotEncap  uint64 // passed untouched: not IP-in-IP
	Malformed uint64 // passed untouched: truncated, options, fragment, bad length
	Failed    uint64 // passed untouched: bpf_xdp_adjust_head failed
	GUEV4     uint64 // outer IPv4 + UDP (GUE) headers stripped
	GUEV6     uint64 // outer IPv6 + UDP (GUE) headers stripped
}

// AttachDecap attaches xdp_decap to ifindex through netlink (not a
// bpf_link), so it stays after this process exits. If the interface already
// runs this exact xdp_decap in this mode, AttachDecap adopts it (counters
// continue); an older xdp_decap is replaced in one netlink update, one in
// the other mode detached first (and put back if the new mode is
// refused); any other XDP program is left alone and ErrForeignProgram
// returned. It succeeds only once the kernel shows the program attached
// in mode; Decap.Did says which of these it did.
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
	if err == nil {
		if err = d.verify(mode); err != nil {
			d.Close()
			d = nil
		}
	}
	return d, err
}

// Did says what AttachDecap did; with DecapModeChanged, was is the mode
// the program ran in before.
func (d *Decap) Did() (did DecapAction, was AttachMode) { return d.did, d.was }

// verify reads back that the interface runs d's program in mode: the
// attach is reported only once the kernel shows it.
func (d *Decap) verify(mode AttachMode) error {
	_, cur, err := attachedXDP(d.ifindex)
	if err != nil {
		return fmt.Errorf("attach decap to ifindex %d: read back: %w", d.ifindex, err)
	}
	want := programID(d.prog)
	if cur == nil {
		return fmt.Errorf("attach decap to ifindex %d: the kernel accepted it, but no XDP program is attached", d.ifindex)
	}
	got, _ := attachedMode(cur.AttachMode)
	if ebpf.ProgramID(cur.ProgId) != want || got != mode {
		name, _, _ := progNameTag(ebpf.ProgramID(cur.ProgId))
		return fmt.Errorf("attach decap to ifindex %d: the kernel accepted it, but program %d (%q) runs there in %v mode", d.ifindex, cur.ProgId, name, got)
	}
	return nil
}

// programID is p's kernel id (0 if unknown).
func programID(p *ebpf.Program) ebpf.ProgramID {
	info, err := p.Info()
	if err != nil {
		return 0
	}
	id, _ := info.ID()
	return id
}

// attachDecap decides between adopting, replacing and attaching.
func attachDecap(l netlink.Link, cur *netlink.LinkXdp, mode AttachMode, flags int, objs *decapObjects) (*Decap, error) {
	ifindex := l.Attrs().Index
	if cur == nil {
		return setDecap(l, objs, mode, flags, DecapAttached, mode)
	}
	name, tag, err := progNameTag(ebpf.ProgramID(cur.ProgId))
	if err != nil {
		return nil, fmt.Errorf("attach decap to ifindex %d: %w", ifindex, err)
	}
	if name != decapProgName {
		return nil, fmt.Errorf("attach decap to ifindex %d: %w (%q)", ifindex, ErrForeignProgram, name)
	}
	was, _ := attachedMode(cur.AttachMode)
	switch ours, err := objs.XdpDecap.Info(); {
	case err == nil && ours.Tag == tag && was == mode:
		d, err := openDecap(ifindex, ebpf.ProgramID(cur.ProgId))
		if d != nil {
			d.did = DecapKept
		}
		return d, err
	case was == mode:
		return setDecap(l, objs, mode, flags, DecapReplaced, was) // one update
	}
	return changeDecapMode(l, cur, objs, mode, flags)
}

// setDecap attaches objs' program (replacing one in the same mode).
func setDecap(l netlink.Link, objs *decapObjects, mode AttachMode, flags int, did DecapAction, was AttachMode) (*Decap, error) {
	if err := netlink.LinkSetXdpFdWithFlags(l, objs.XdpDecap.FD(), flags); err != nil {
		return nil, attachError(l.Attrs().Index, mode, err)
	}
	return newDecap(l.Attrs().Index, objs, did, was)
}

// changeDecapMode replaces the decap attached in the other mode: the
// kernel refuses two modes at once, so the old one is detached first, and
// put back if the new mode is refused.
func changeDecapMode(l netlink.Link, cur *netlink.LinkXdp, objs *decapObjects, mode AttachMode, flags int) (*Decap, error) {
	ifindex := l.Attrs().Index
	was, _ := attachedMode(cur.AttachMode)
	old, err := ebpf.NewProgramFromID(ebpf.ProgramID(cur.ProgId)) // held open, it survives its detach
	if err != nil {
		return nil, fmt.Errorf("attach decap to ifindex %d: open the %v mode program: %w", ifindex, was, err)
	}
	defer old.Close()
	if err := setXDP(l, -1, cur.AttachMode); err != nil {
		return nil, fmt.Errorf("attach decap to ifindex %d: detach %v mode: %w", ifindex, was, err)
	}
	if err := netlink.LinkSetXdpFdWithFlags(l, objs.XdpDecap.FD(), flags); err != nil {
		return nil, restoreDecap(l, old, cur.AttachMode, attachError(ifindex, mode, err))
	}
	return newDecap(ifindex, objs, DecapModeChanged, was)
}

// newDecap is the Decap of objs, just attached.
func newDecap(ifindex int, objs *decapObjects, did DecapAction, was AttachMode) (*Decap, error) {
	pc, err := newPerCPU(8)
	if err != nil {
		return nil, err
	}
	return &Decap{ifindex: ifindex, prog: objs.XdpDecap, counters: objs.DecapCounters, config: objs.DecapConfig, percpu: pc, did: did, was: was}, nil
}

// restoreDecap puts back the xdp_decap that a failed mode change detached,
// and says in the error whether it is back.
func restoreDecap(l netlink.Link, old *ebpf.Program, attached uint32, err error) error {
	was, _ := attachedMode(attached)
	if perr := setXDP(l, old.FD(), attached); perr != nil {
		return fmt.Errorf("%w (the decap in %v mode was detached first and could not be put back: %v; nothing is attached now)", err, was, perr)
	}
	return fmt.Errorf("%w (the decap in %v mode is attached again, unchanged)", err, was)
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
	d := &Decap{ifindex: ifindex, prog: prog}
	if d.counters, err = mapOf(prog, decapMapDecapCounters); err == nil {
		d.config, err = mapOf(prog, decapMapDecapConfig)
	}
	if err == nil {
		d.percpu, err = newPerCPU(8)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("open decap program %d: %w", id, err)
	}
	return d, nil
}

// mapOf finds the map named name among prog's maps.
func mapOf(prog *ebpf.Program, name string) (*ebpf.Map, error) {
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
		if mi, err := m.Info(); err == nil && mi.Name == name {
			return m, nil
		}
		m.Close()
	}
	return nil, fmt.Errorf("map %s not found", name)
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
		{decapDecapCounterDECAP_GUE_V4, &s.GUEV4},
		{decapDecapCounterDECAP_GUE_V6, &s.GUEV6},
	} {
		if err := d.percpu.sum(d.counters, uint32(c.key), unsafeOne(c.out)); err != nil {
			return s, fmt.Errorf("decap stats: %w", err)
		}
	}
	return s, nil
}

// SetGUEPort sets the UDP port whose GUE packets (IP in UDP, variant 1)
// the program strips, on this attach and every later packet; 0 strips
// none (only IP-in-IP).
func (d *Decap) SetGUEPort(port uint16) error {
	if err := d.config.Put(uint32(0), &decapDecapConfig{GuePort: htons(port)}); err != nil {
		return fmt.Errorf("decap on ifindex %d: set gue port: %w", d.ifindex, err)
	}
	return nil
}

// GUEPort is the UDP port whose GUE packets the program strips (0: none).
func (d *Decap) GUEPort() (uint16, error) {
	var c decapDecapConfig
	if err := d.config.Lookup(uint32(0), &c); err != nil {
		return 0, fmt.Errorf("decap on ifindex %d: read gue port: %w", d.ifindex, err)
	}
	return ntohs(c.GuePort), nil
}

// Close releases this process's handles; the program stays attached.
func (d *Decap) Close() error {
	return errors.Join(d.prog.Close(), d.counters.Close(), d.config.Close()) // each nil-safe
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
