// LB: loading the balancer, attaching it to interfaces, pinning.

package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/guard"
)

// LB is a loaded xdp_lb program with its maps. Its methods are safe for
// concurrent use.
type LB struct {
	opts   Options
	pinDir string // "" without pinning
	inner  *ebpf.MapSpec
	objs   lbObjects
	percpu *perCPU

	mu    sync.Mutex
	links map[int]link.Link // by ifindex

	ctMu    sync.Mutex
	ctBatch ctBatch // FlowCounts/Flows scratch buffers

	cfgMu sync.Mutex // read-modify-write of the config entry (SetSource, SetSYNRate)

	refMu sync.Mutex // vip_refs and vip_ports beside vips (viprefs.go); taken after capMu
	refs  vipRefs

	capMu    sync.Mutex // the capture's VIP flag against SetVIP (capture.go)
	captured *l4.VIPKey // the VIP a capture samples; nil: none
	nhMu     sync.Mutex // a backend's address and its next hop change together (SetBackend, SetNextHop)

	aclMu sync.Mutex
	acls  map[uint32]*guard.ACL // VIP index -> the ACL whose networks the trie holds (nil: none); absent: unknown
}

// Load loads the balancer and its maps. With Options.PinPath it adopts the
// maps pinned by an earlier process of the same layout (their contents,
// conntrack included, survive) or pins new ones.
func Load(opts Options) (*LB, error) { return load(opts, layoutVersion) }

func load(opts Options, version int) (*LB, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	spec, err := loadLb()
	if err != nil {
		return nil, err
	}
	sizeMaps(spec, opts)
	lb := &LB{opts: opts, inner: spec.Maps[lbMapMaglev].InnerMap.Copy(), links: map[int]link.Link{}, acls: map[uint32]*guard.ACL{}}
	var copts ebpf.CollectionOptions
	if opts.PinPath != "" {
		if lb.pinDir, err = preparePins(spec, opts.PinPath, version); err != nil {
			return nil, err
		}
		copts.Maps.PinPath = lb.pinDir
	}
	if err := spec.LoadAndAssign(&lb.objs, &copts); err != nil {
		return nil, loadError(err)
	}
	if lb.percpu, err = newPerCPU(int(max(spec.Maps[lbMapVipStats].ValueSize, spec.Maps[lbMapCounters].ValueSize))); err != nil {
		lb.objs.Close()
		return nil, err
	}
	if err := lb.loadVIPRefs(); err != nil {
		lb.objs.Close()
		return nil, fmt.Errorf("load xdp_lb: %w", err)
	}
	return lb, nil
}

// sizeMaps sets every map's capacity from the options.
func sizeMaps(spec *ebpf.CollectionSpec, o Options) {
	spec.Maps[lbMapConntrack].MaxEntries = o.ConntrackSize
	spec.Maps[lbMapAcl].MaxEntries = o.ACLSize
	spec.Maps[lbMapSynSources].MaxEntries = o.SYNSources
	spec.Maps[lbMapNatFlows].MaxEntries = o.ConntrackSize
	spec.Maps[lbMapNatReverse].MaxEntries = o.ConntrackSize
	for _, m := range []string{lbMapVips, lbMapVipRefs, lbMapMaglev, lbMapVipStats, lbMapVipRates} {
		spec.Maps[m].MaxEntries = o.MaxVIPs
	}
	for _, m := range []string{lbMapBackends, lbMapBackendStats, lbMapNexthops} {
		spec.Maps[m].MaxEntries = o.MaxBackends
	}
}

// loadError classifies a collection load failure.
func loadError(err error) error {
	switch {
	case errors.Is(err, ebpf.ErrMapIncompatible):
		return fmt.Errorf("load xdp_lb: %w: %w", ErrPinMismatch, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("load xdp_lb: %w: %w", ErrNotSupported, err)
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("load xdp_lb: %+v", ve)
	}
	return fmt.Errorf("load xdp_lb: %w", err)
}

// xdpFlags maps an AttachMode onto link flags.
func xdpFlags(mode AttachMode) (link.XDPAttachFlags, error) {
	switch mode {
	case AttachDriver:
		return link.XDPDriverMode, nil
	case AttachGeneric:
		return link.XDPGenericMode, nil
	}
	return 0, fmt.Errorf("attach mode %v unknown", mode)
}

// Attach runs the balancer on ifindex. Attaching an interface this LB
// already runs on is a no-op. With pinning, a link pinned by an earlier
// process (of any layout version) is taken over by swapping its program:
// the interface is never without the balancer, and keeps the mode it was
// first attached in. Any other XDP program on the interface is left alone
// (ErrForeignProgram).
func (lb *LB) Attach(ifindex int, mode AttachMode) error {
	flags, err := xdpFlags(mode)
	if err != nil {
		return err
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if _, ok := lb.links[ifindex]; ok {
		return nil
	}
	_, cur, err := attachedXDP(ifindex) // the kernel says EINVAL for a missing device
	if err != nil {
		return fmt.Errorf("attach xdp: %w", err)
	}
	var l link.Link
	if lb.pinDir != "" {
		l, err = lb.adoptLink(ifindex)
	}
	if l == nil && err == nil {
		l, err = lb.attachNew(ifindex, mode, flags, cur)
	}
	if err != nil {
		return err
	}
	lb.links[ifindex] = l
	return nil
}

// attachNew creates (and with pinning, pins) an XDP link on a free
// interface; cur is the program attached there now, if any.
func (lb *LB) attachNew(ifindex int, mode AttachMode, flags link.XDPAttachFlags, cur *netlink.LinkXdp) (link.Link, error) {
	if cur != nil {
		name, _, _ := progNameTag(ebpf.ProgramID(cur.ProgId))
		return nil, fmt.Errorf("attach xdp to ifindex %d: %w (%q)", ifindex, ErrForeignProgram, name)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: lb.objs.XdpLb, Interface: ifindex, Flags: flags})
	if err != nil {
		return nil, attachError(ifindex, mode, err)
	}
	if lb.pinDir != "" {
		if err := l.Pin(filepath.Join(lb.pinDir, linkPinName(ifindex))); err != nil {
			l.Close()
			return nil, fmt.Errorf("pin xdp link on ifindex %d: %w", ifindex, err)
		}
	}
	return l, nil
}

// adoptLink takes over a pinned XDP link on ifindex, from this layout's
// directory or an older one (then re-pinned here). No pin: nil, nil.
func (lb *LB) adoptLink(ifindex int) (link.Link, error) {
	path := filepath.Join(lb.pinDir, linkPinName(ifindex))
	if _, err := os.Stat(path); err == nil {
		return updatePinned(path, "", lb.objs.XdpLb)
	}
	if older := olderLinkPins(lb.opts.PinPath, lb.pinDir, ifindex); len(older) > 0 {
		return updatePinned(older[0], path, lb.objs.XdpLb)
	}
	return nil, nil
}

// updatePinned loads the link pinned at path and swaps prog in. With
// newPath (a takeover from an older layout) it moves the pin there and
// removes the older layout's pins.
func updatePinned(path, newPath string, prog *ebpf.Program) (link.Link, error) {
	l, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return nil, fmt.Errorf("load pinned link %s: %w", path, err)
	}
	if err := l.Update(prog); err != nil {
		l.Close()
		return nil, fmt.Errorf("update pinned link %s: %w", path, err)
	}
	if newPath == "" {
		return l, nil
	}
	if err := l.Pin(newPath); err != nil { // moves the pin
		l.Close()
		return nil, fmt.Errorf("pin %s: %w", newPath, err)
	}
	// The older layout's program is gone from the interface; its maps
	// would stay pinned (and allocated) forever.
	if err := removePins(filepath.Dir(path)); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// attachError turns an attach failure into a message about the interface
// (and ErrNotFound / ErrNotSupported where a caller may branch).
func attachError(ifindex int, mode AttachMode, err error) error {
	switch {
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("attach xdp to ifindex %d: no such interface: %w", ifindex, ErrNotFound)
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("attach xdp to ifindex %d in %v mode: %w: %w", ifindex, mode, ErrNotSupported, err)
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		return fmt.Errorf("attach xdp to ifindex %d: %w: %w", ifindex, ErrForeignProgram, err)
	}
	return fmt.Errorf("attach xdp to ifindex %d in %v mode: %w", ifindex, mode, err)
}

// Detach removes the balancer from every interface this LB attached (and
// their pins). Detaching with nothing attached is a no-op.
func (lb *LB) Detach() error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	var errs []error
	for ifindex, l := range lb.links {
		if err := l.Unpin(); err != nil { // no-op when not pinned
			errs = append(errs, fmt.Errorf("unpin xdp link on ifindex %d: %w", ifindex, err))
		}
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach ifindex %d: %w", ifindex, err))
		}
		delete(lb.links, ifindex)
	}
	return errors.Join(errs...)
}

// Close releases the program, maps and links. Without pinning that
// detaches the program and frees the maps; with pinning, pinned links stay
// attached and pinned maps keep their contents for the next process.
func (lb *LB) Close() error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	var errs []error
	for ifindex, l := range lb.links {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close link on ifindex %d: %w", ifindex, err))
		}
		delete(lb.links, ifindex)
	}
	if err := lb.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close objects: %w", err))
	}
	return errors.Join(errs...)
}

// Unpin removes this layout's pins (maps and links): the next Load starts
// from empty maps, and a link whose pin is gone detaches when its last
// file descriptor closes. Without pinning it does nothing.
func (lb *LB) Unpin() error {
	if lb.pinDir == "" {
		return nil
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	var errs []error
	for ifindex, l := range lb.links {
		if err := l.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpin link on ifindex %d: %w", ifindex, err))
		}
	}
	for _, m := range lb.pinnedMapObjs() {
		if err := m.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpin %v: %w", m, err))
		}
	}
	if err := removeIfEmpty(lb.pinDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (lb *LB) pinnedMapObjs() []*ebpf.Map {
	o := &lb.objs
	return []*ebpf.Map{o.Vips, o.VipRefs, o.Conntrack, o.Maglev, o.Backends, o.Config, o.VipStats, o.BackendStats, o.Counters,
		o.Acl, o.SynSources, o.VipRates, o.NatFlows, o.NatReverse}
}

// PinDir is the directory holding this LB's pins ("" without pinning).
func (lb *LB) PinDir() string { return lb.pinDir }
