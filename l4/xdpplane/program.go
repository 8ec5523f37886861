// The XDP program shared by every xdp VIP: the loaded program and its
// maps, the interface it runs on, the backends' neighbours, and the loop
// that reads the flow table.

package xdpplane

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/internal/netif"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// xdpMaxVIPs bounds xdp VIP indexes (1..xdpMaxVIPs-1; 0 is never used).
const xdpMaxVIPs = 512

// MaxBackends bounds the backends of all VIPs together: their indexes
// (l4.Backend.Index) run from 1 to MaxBackends, and the XDP backend map
// has a slot for each.
const MaxBackends = 65535

// Options are the XDP program's settings ([xdp]); the zero value of each
// optional one means its default.
type Options struct {
	// Interfaces are the interfaces the program attaches to (at least
	// one; a reload may change them: AttachInterfaces, Update). The first
	// with an address of a family gives encapsulated packets their outer
	// source of that family.
	Interfaces []string
	// Attach is where the program runs: in the driver (the zero value) or
	// in the kernel's generic XDP path (any interface, a fraction of the
	// speed).
	Attach bpf.AttachMode
	// PinPath pins the maps and the link on a bpffs there, so that the
	// program keeps forwarding across restarts and upgrades ("": none).
	PinPath       string
	ConntrackSize int // flow table entries (0: the bpf package's default)
	// WeightRefresh is how often least_conn and least_time VIPs' weights
	// move; SYNRatePerSource drops SYNs from a source above this many a
	// second (0: off). A reload may change both (Update).
	WeightRefresh    time.Duration
	SYNRatePerSource int
	// SourcePrefix4/6 (valid: set) are the networks the outer sources of
	// encapsulated flows come from, one address per flow; GUEPort is the
	// UDP port of forward = gue (0: bpf.DefaultGUEPort). A reload may
	// change them (Update).
	SourcePrefix4, SourcePrefix6 netip.Prefix
	GUEPort                      int
	// NAT is what forward = "nat" VIPs need ([xdp] nat_*).
	NAT NATOptions
}

// xdpRefresh is how often the flow table is read for live-flow counts and
// the neighbours of backends are checked.
const xdpRefresh = 2 * time.Second

// Program is the XDP program shared by the xdp VIPs of one control loop
// (and by the guards of its proxy VIPs): it loads and attaches the
// program, owns its maps, and runs the loop that reads the flow table and
// keeps the backends' neighbours resolved.
type Program struct {
	cfg      Options
	log      *zap.Logger
	lb       *bpf.LB
	nl       *netif.Handle
	neigh    *netif.Neighbors
	vips     *IndexPool // the VIPs' slots in the maps
	backends *IndexPool // the backends' (the control loop's, shared)
	stop     chan struct{}
	done     chan struct{}
	kick     chan struct{} // asks the loop to bring the neighbours in step now
	probes   *probeTunnel  // nil: probes of xdp VIPs go to the backends' own addresses
	// nhIndexes are the backend indexes whose nexthops entry the loop
	// wrote (owned by the loop).
	nhIndexes map[uint32]struct{}

	// open is held (read) by every writer of the maps and taken (write)
	// by shutdown, so that nothing writes to maps it has closed.
	open   sync.RWMutex
	closed bool // guarded by open
	// held: another l4lb is taking the pinned maps over (an upgrade); this
	// one writes nothing until it resumes (see Hold).
	held atomic.Bool

	// rescale is called after a flow count once weight_refresh has passed
	// since the last call: it moves least_conn and least_time weights.
	rescale       func()
	weightRefresh atomic.Int64 // nanoseconds; a reload may change it
	rescaled      time.Time    // owned by loop

	// nat is the NAT settings the program holds (natMu guards the
	// read-modify-write of Enabled).
	natMu sync.Mutex
	nat   bpf.NATConfig

	// settled: the entries adopted from an earlier l4lb that the config
	// no longer has are gone (set by the first Settle; the control loop
	// serialises its calls).
	settled bool
	// sweep: the first Settle asks the loop to remove the neighbour
	// entries an earlier l4lb left that no backend needs now.
	sweep atomic.Bool

	// ifMu guards ifaces: the interfaces the program runs on, in the
	// config's order (the control loop changes them on a reload).
	ifMu   sync.Mutex
	ifaces []netif.Interface

	mu         sync.Mutex
	planes     map[*Plane]struct{}
	mtuChecked map[netip.Addr]bool // backends whose path MTU was checked (warned once)
	counts     []uint64            // live flows per backend index, from the last read
	total      int                 // live flows in all
}

// Start loads the balancer, attaches it to the configured interface and
// prepares what forwarding needs: source addresses, next-hop neighbours.
// backends are the control loop's backend indexes: those the maps of an
// earlier l4lb name are reserved there for the same addresses. Any
// failure leaves nothing attached.
func Start(cfg Options, backends *IndexPool, log *zap.Logger) (_ *Program, err error) {
	x := &Program{cfg: cfg, log: log.Named("xdp"), vips: NewIndexPool(xdpMaxVIPs - 1), backends: backends, planes: map[*Plane]struct{}{}, mtuChecked: map[netip.Addr]bool{},
		counts: make([]uint64, MaxBackends+1), stop: make(chan struct{}), done: make(chan struct{}), kick: make(chan struct{}, 1),
		nhIndexes: map[uint32]struct{}{}}
	if x.nl, err = netif.Open(); err != nil {
		return nil, fmt.Errorf("xdp: netlink: %w", err)
	}
	defer func() {
		if err != nil {
			x.release(false)
		}
	}()
	for _, name := range cfg.Interfaces {
		ifc, err := x.nl.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("xdp: %w", err)
		}
		x.ifaces = append(x.ifaces, ifc)
	}
	x.lb, err = bpf.Load(loadOptions(cfg))
	if err != nil {
		return nil, fmt.Errorf("xdp: load the program: %w", err)
	}
	if err := x.adopt(); err != nil {
		return nil, err
	}
	if err := x.prepareHost(); err != nil {
		return nil, err
	}
	for _, ifc := range x.ifaces {
		if err := x.attach(ifc); err != nil {
			return nil, err
		}
	}
	x.neigh = x.nl.NewNeighbors()
	if x.probes, err = x.startProbes(); err != nil {
		x.log.Warn("xdp: no probe tunnel: health probes of xdp VIPs go to the backends' own addresses, so a backend that loses the VIP's packets (no decap, no VIP on lo) may still pass them", zap.Error(err))
		err = nil
	} else {
		x.log.Info("xdp: health probes of xdp VIPs go to the VIP, forwarded as its clients are", zap.String("probe_device", probeDevice),
			zap.String("marks", fmt.Sprintf("%#x/%#x", uint32(ProbeMark), uint32(probeMarkMask))), zap.Int("rule_pref", probeRulePref), zap.Int("table", probeTable))
	}
	x.log.Info("xdp program attached", zap.Strings("interfaces", cfg.Interfaces), zap.String("attach", cfg.Attach.String()),
		zap.String("pin_path", cfg.PinPath), zap.Int("conntrack_size", cfg.ConntrackSize))
	if cfg.Attach == bpf.AttachGeneric {
		x.log.Warn("xdp attached in generic mode: it runs after the kernel allocates each packet, at a fraction of driver mode's speed")
	}
	x.Update(cfg)
	return x, nil
}

// Update applies what a reload may change of o: weight_refresh,
// syn_rate_per_source, and the interfaces (it detaches those o no longer
// names; AttachInterfaces attached the new ones). The others need a
// restart.
func (x *Program) Update(o Options) {
	x.keepInterfaces(o.Interfaces)
	x.weightRefresh.Store(int64(o.WeightRefresh))
	x.setSYNRate(o.SYNRatePerSource)
	x.setEncap(o)
}

// setEncap writes [xdp] source_prefix4/6 and gue_port (a reload applies
// them at once).
func (x *Program) setEncap(o Options) {
	if x.held.Load() {
		return
	}
	e := bpf.Encap{Prefix4: o.SourcePrefix4, Prefix6: o.SourcePrefix6, GUEPort: uint16(o.GUEPort)}
	x.using(func() {
		if err := x.lb.SetEncap(e); err != nil {
			x.log.Warn("xdp: source_prefix4/6 and gue_port not applied", zap.Stringer("source_prefix4", o.SourcePrefix4),
				zap.Stringer("source_prefix6", o.SourcePrefix6), zap.Int("gue_port", o.GUEPort), zap.Error(err))
		}
	})
}

// setSYNRate writes [xdp] syn_rate_per_source (a reload applies it at once).
func (x *Program) setSYNRate(perSource int) {
	if x.held.Load() {
		return
	}
	x.using(func() {
		if err := x.lb.SetSYNRate(uint32(perSource)); err != nil {
			x.log.Warn("xdp: syn_rate_per_source not applied", zap.Int("syn_rate_per_source", perSource), zap.Error(err))
		}
	})
}

// Run starts the loop that reads the flow table; rescale moves the
// weights of least_conn and least_time VIPs every weight_refresh.
func (x *Program) Run(rescale func()) {
	x.rescale = rescale
	x.neighborsChanged()
	go x.loop()
}

// loadOptions are the options l4lb loads the XDP program with for cfg
// (another process that adopts the pinned maps must use the same).
func loadOptions(cfg Options) bpf.Options {
	return bpf.Options{ConntrackSize: uint32(cfg.ConntrackSize), MaxVIPs: xdpMaxVIPs, MaxBackends: MaxBackends + 1, PinPath: cfg.PinPath}
}

// adopt reserves, for the VIPs and backend addresses found in maps pinned
// by an earlier l4lb, the indexes they had: the adopted conntrack names
// backends by index, so its flows keep their backends across a restart.
func (x *Program) adopt() error {
	n := 0
	err := x.lb.Backends(func(i uint32, e bpf.BackendEntry) bool {
		x.backends.Reserve(i, e.Addr)
		n++
		return true
	})
	if err == nil {
		err = x.lb.VIPs(func(k l4.VIPKey, e bpf.VIPEntry) bool {
			x.vips.Reserve(e.Index, k)
			x.nat.Enabled = x.nat.Enabled || e.Forward == l4.ForwardNAT // their replies keep flowing from the attach on
			n++
			return true
		})
	}
	if err != nil {
		return fmt.Errorf("xdp: reading adopted maps: %w", err)
	}
	if n > 0 {
		x.log.Info("xdp: adopted the maps pinned by an earlier l4lb; flows keep their backends", zap.String("pin_path", x.cfg.PinPath), zap.Int("entries", n))
	}
	return nil
}

// Settle removes, once the first config is applied, what adopted maps
// hold that this config does not: stale VIPs (their traffic passes to the
// kernel again) and backend entries (their flows rehash).
func (x *Program) Settle() {
	if x.settled {
		return
	}
	x.settled = true
	x.sweep.Store(true)
	x.neighborsChanged()
	for i := range x.backends.Unreserve() {
		_ = x.lb.DeleteBackend(i)
		if _, err := x.lb.PurgeBackend(i); err != nil {
			x.log.Warn("xdp: purging the flows of a backend the config dropped failed", zap.Uint32("index", i), zap.Error(err))
		}
	}
	for _, owner := range x.vips.Unreserve() {
		key := owner.(l4.VIPKey)
		_ = x.lb.DeleteVIP(key)
		if _, err := x.lb.PurgeVIP(key); err != nil {
			x.log.Warn("xdp: purging the flows of a VIP the config dropped failed", zap.Stringer("vip", key), zap.Error(err))
		}
		x.log.Info("xdp: VIP from the adopted maps is not in the config: removed", zap.Stringer("vip", key))
	}
}

// prepareHost sets the outer source addresses: of each family, the
// first interface's that has one. IP forwarding, which bpf_fib_lookup
// needs, is the administrator's: CheckForwarding refuses a config that
// needs it while it is off.
func (x *Program) prepareHost() error {
	var v4, v6 netip.Addr
	ifaces := x.interfaces()
	for _, ifc := range ifaces {
		if a, _ := ifc.PrimaryV4(); !v4.IsValid() {
			v4 = a
		}
		if a, _ := ifc.PrimaryV6(); !v6.IsValid() {
			v6 = a
		}
	}
	if !v4.IsValid() && !v6.IsValid() {
		return fmt.Errorf("xdp interface %s has no address to be the source of encapsulated packets", ifaceNames(ifaces))
	}
	if err := x.lb.SetSource(v4, v6); err != nil {
		return fmt.Errorf("xdp: %w", err)
	}
	return x.setNAT(v4, v6)
}

// CheckForwarding refuses xdp VIPs that forward by ipip to backends of a
// family (v4, v6) that one of ifaces does not forward: bpf_fib_lookup
// would answer "forwarding disabled" for packets arriving there and every
// such packet would drop as drop_fib. l4lb writes no sysctl; the error
// names the one to set.
func CheckForwarding(ifaces []string, v4, v6 bool) error {
	for _, iface := range ifaces {
		if err := checkForwarding(iface, v4, v6); err != nil {
			return err
		}
	}
	return nil
}

func checkForwarding(iface string, v4, v6 bool) error {
	err := netif.CheckForwarding(iface, netif.Forwarding{IPv4: v4, IPv6: v6})
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no such interface: Start says so
	}
	if err != nil {
		return fmt.Errorf("xdp: the ipip VIPs reach their backends through the kernel's FIB (bpf_fib_lookup), which needs forwarding on the XDP interface, and l4lb writes no sysctl: %w", err)
	}
	return nil
}

// Interface is the first interface the program runs on.
func (x *Program) Interface() string { return x.Interfaces()[0] }

// loop reads the flow table and checks neighbours until stop. It is the
// only goroutine that uses the neighbours, so shutdown can close them.
// Route, neighbour and link changes bring the backends' next hops in step
// within changeSettle; the refresh every xdpRefresh is the safety net.
func (x *Program) loop() {
	defer close(x.done)
	t := time.NewTicker(xdpRefresh)
	defer t.Stop()
	changes, err := x.nl.Watch(x.stop)
	if err != nil {
		x.log.Warn("xdp: not watching routes and neighbours: backends' next hops follow their changes only every refresh", zap.Duration("refresh", xdpRefresh), zap.Error(err))
	}
	var settle <-chan time.Time
	for {
		select {
		case <-x.stop:
			return
		case <-x.kick:
			x.syncBackends()
		case <-changes:
			if settle == nil {
				settle = time.After(changeSettle)
			}
		case <-settle:
			settle = nil
			x.syncBackends()
		case <-t.C:
			x.refresh()
			x.syncBackends()
		}
	}
}

// neighborsChanged asks the loop to bring the backends' neighbours in step
// with the planes (soon, without waiting for it).
func (x *Program) neighborsChanged() {
	select {
	case x.kick <- struct{}{}:
	default: // a kick is pending already
	}
}

// refresh reads live-flow counts, retires backends whose last flow ended
// and keeps neighbours resolved.
func (x *Program) refresh() {
	if x.held.Load() {
		return
	}
	if err := x.countFlows(); err != nil {
		x.log.Warn("xdp: reading the flow table failed", zap.Error(err))
	} else if every := time.Duration(x.weightRefresh.Load()); x.rescale != nil && time.Since(x.rescaled) >= every {
		x.rescaled = time.Now()
		x.rescale()
	}
	for _, p := range x.planeList() {
		p.refresh()
	}
	if err := x.neigh.Refresh(); err != nil {
		x.log.Warn("xdp: refreshing backend neighbours failed", zap.Error(err))
	}
}

// countFlows reads the live flows per backend index. A flow is live when
// it was seen within the longest idle timeout any VIP has.
func (x *Program) countFlows() error {
	counts := make([]uint64, MaxBackends+1) // as x.counts, which the loop and a drain both replace
	total, err := x.lb.FlowCounts(bpf.MonotonicNow(), x.liveWindow(), counts)
	if err != nil {
		return err
	}
	x.mu.Lock()
	x.counts, x.total = counts, total
	x.mu.Unlock()
	for _, p := range x.planeList() {
		p.notePeaks(counts)
	}
	return nil
}

// liveWindow is how long after its last packet a flow still counts as
// live: the session timeout for UDP, and for TCP, which ends with FIN or
// RST, a window long enough for a quiet connection.
func (x *Program) liveWindow() time.Duration {
	w := 30 * time.Second
	for _, p := range x.planeList() {
		if p.key.Proto == l4.UDP {
			w = max(w, p.conf().SessionTimeout)
		} else {
			w = max(w, 5*time.Minute)
		}
	}
	return w
}

// LiveFlows returns the live flows of backend index i at the last read
// (every 2 s).
func (x *Program) LiveFlows(i uint32) uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	if int(i) < len(x.counts) {
		return x.counts[i]
	}
	return 0
}

func (x *Program) planeList() []*Plane {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]*Plane, 0, len(x.planes))
	for p := range x.planes {
		out = append(out, p)
	}
	return out
}

func (x *Program) add(p *Plane) {
	x.mu.Lock()
	x.planes[p] = struct{}{}
	x.mu.Unlock()
}

func (x *Program) remove(p *Plane) {
	x.mu.Lock()
	delete(x.planes, p)
	x.mu.Unlock()
	x.neighborsChanged()
}

// syncBackends keeps the next hops of every backend resolved
// (bpf_fib_lookup never sends ARP or neighbour solicitations), fills in
// the MACs of l2 backends, and checks the path MTU of new backends. It
// runs on the loop, the only goroutine that talks to netlink.
func (x *Program) syncBackends() {
	if x.held.Load() {
		return
	}
	var addrs []netip.Addr
	planes := x.planeList()
	for _, p := range planes {
		addrs = append(addrs, p.backendAddrs()...)
	}
	slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
	addrs = slices.Compact(addrs)
	if err := x.neigh.Ensure(addrs); err != nil {
		x.log.Warn("xdp: some backend neighbours cannot be kept resolved (their packets are dropped as no_neigh until they are)", zap.Error(err))
	}
	x.syncNextHops(planes)
	if x.sweep.CompareAndSwap(true, false) {
		x.sweepNeighbors()
	}
	for _, p := range planes {
		p.resolveMACs()
		if fwd := p.conf().Forward; fwd.Encapsulates() {
			for _, a := range p.backendAddrs() {
				x.checkMTU(a, fwd)
			}
		}
	}
}

// gueHeader is what GUE adds to IP-in-IP's outer header: its UDP header.
const gueHeader = 8

// sweepNeighbors removes the managed neighbour entries marked l4lb's that
// no backend of the applied config needs: an l4lb killed before it could
// remove them left them (netif.Neighbors.Sweep).
func (x *Program) sweepNeighbors() {
	removed, err := x.neigh.Sweep()
	if len(removed) > 0 {
		x.log.Info("xdp: removed neighbour entries an earlier l4lb left that no backend needs", zap.Strings("entries", removed))
	}
	if err != nil {
		x.log.Warn("xdp: removing neighbour entries an earlier l4lb left failed", zap.Error(err))
	}
}

// checkMTU warns once per backend when the route to it cannot carry a
// full-size client packet plus the encapsulation (gue: 8 bytes more).
func (x *Program) checkMTU(b netip.Addr, fwd l4.Forward) {
	x.mu.Lock()
	done := x.mtuChecked[b]
	x.mtuChecked[b] = true
	x.mu.Unlock()
	if done {
		return
	}
	mtu := 0
	for _, ifc := range x.interfaces() {
		mtu = max(mtu, ifc.MTU) // the largest packet a client may send
	}
	inner := mtu
	if fwd == l4.ForwardGUE {
		inner += gueHeader // the UDP header counts as inner bytes here
	}
	if err := x.nl.CheckEncapMTU(b, inner); err != nil && errors.Is(err, netif.ErrMTU) {
		x.log.Warn("xdp: the path to a backend cannot carry a full-size packet plus the outer headers: raise the MTU toward backends by 20 (ipip to IPv4), 40 (ipip to IPv6), 28 or 48 (gue) bytes, or clamp the clients' MSS",
			zap.Stringer("backend", b), zap.Int("client_mtu", mtu), zap.Stringer("forward", fwd), zap.Error(err))
	}
}

// using runs fn unless the program was shut down; it returns false then.
func (x *Program) using(fn func()) bool {
	x.open.RLock()
	defer x.open.RUnlock()
	if x.closed {
		return false
	}
	fn()
	return true
}

// Status reads the global counters for status.
func (x *Program) Status() *plane.XDPStatus {
	st := &plane.XDPStatus{Interface: x.Interface(), Attach: x.cfg.Attach.String(), PinPath: x.cfg.PinPath, Counters: map[string]uint64{},
		Interfaces: x.interfaceStatus()}
	x.using(func() {
		if c, err := x.lb.GlobalStats(); err == nil {
			for i, v := range c {
				if v != 0 {
					st.Counters[bpf.Counter(i).String()] = v
				}
			}
		}
		if n, err := x.lb.NextHopFIB(); err == nil && n != 0 {
			st.Counters["nexthop_fib"] = n
		}
	})
	x.mu.Lock()
	st.LiveFlows = x.total
	x.mu.Unlock()
	return st
}

// Shutdown stops the loop; the program stays attached when its link is
// pinned on a bpffs that outlives the process (a restarted l4lb adopts it,
// and forwarding never stops), otherwise it is detached. The log says
// which happened, checked, never assumed.
func (x *Program) Shutdown() {
	close(x.stop)
	<-x.done
	x.open.Lock()
	x.closed = true
	x.open.Unlock()
	keep, why := x.staysAttached()
	x.logShutdown(keep, why, x.release(keep))
}

// logShutdown says what shutdown did to the program: left it attached
// (checked, or not checkable), or detached it (and why, when pins were
// configured), or failed to.
func (x *Program) logShutdown(keep bool, why, detachErr error) {
	iface, pins := zap.Strings("interfaces", x.Interfaces()), zap.String("pin_path", x.cfg.PinPath)
	switch {
	case keep && why == nil:
		x.log.Info("xdp program left attached with its pinned maps: the next l4lb adopts them; `l4lb xdp detach` removes it", iface, pins)
	case keep:
		x.log.Warn("xdp program left attached with its pins, but whether they outlive this process could not be checked: "+
			"if they do not, it goes with l4lb", iface, pins, zap.Error(why))
	case detachErr != nil:
		x.log.Error("xdp program: detaching it failed", iface, zap.Error(detachErr))
	case why != nil && x.balancerAttached():
		x.log.Info("xdp program left attached: another process holds its link now (an upgrade's new l4lb)", iface, pins,
			zap.NamedError("this_process_pin", why))
	case why != nil:
		x.log.Warn("xdp program detached: its pin would not keep it attached after this process", iface, pins, zap.Error(why))
	default:
		x.log.Info("xdp program detached", iface)
	}
}

// balancerAttached reports whether an xdp_lb still runs on the
// interfaces (by anyone's link).
func (x *Program) balancerAttached() bool {
	for _, ifc := range x.interfaces() {
		if name, _, err := bpf.AttachedProgram(ifc.Index); err != nil || !bpf.IsBalancer(name) {
			return false
		}
	}
	return true
}

// staysAttached reports whether the program stays attached after this
// process: its link pinned on a bpffs that outlives it (or that cannot be
// told), and why not (with pin_path) or why it cannot be told.
func (x *Program) staysAttached() (bool, error) {
	if x.cfg.PinPath == "" {
		return false, nil
	}
	var errs []error
	for _, ifc := range x.interfaces() {
		err := x.lb.LinkOutlivesProcess(ifc.Index)
		if err != nil && !errors.Is(err, bpf.ErrPinUnverified) {
			return false, err
		}
		errs = append(errs, err)
	}
	return true, errors.Join(errs...)
}

// release frees what x holds; keep leaves the program attached, and the
// backends' managed neighbour entries in place for it (the kernel keeps
// resolving them; the next l4lb takes them as they are). It returns the
// detach's error.
func (x *Program) release(keep bool) error {
	var err error
	if x.probes != nil {
		if perr := x.probes.close(); perr != nil {
			x.log.Warn("xdp: removing the probe device failed", zap.Error(perr))
		}
	}
	if x.neigh != nil && !keep {
		_ = x.neigh.Close()
	}
	if x.lb != nil {
		if !keep {
			err = x.lb.Detach()
		}
		_ = x.lb.Close()
	}
	if x.nl != nil {
		x.nl.Close()
	}
	return err
}

// waitFlowsGone polls until the live flows of the given backend indexes
// are 0 or ctx is done.
func (x *Program) waitFlowsGone(ctx context.Context, indexes []uint32) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if err := x.countFlows(); err != nil {
			return
		}
		live := uint64(0)
		for _, i := range indexes {
			live += x.LiveFlows(i)
		}
		if live == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Hold stops (true) this process writing the maps while another l4lb
// adopts them (pinned maps are shared: the new process's view must win),
// or resumes (false) and writes every VIP's last snapshot again, since
// the other process may have written its own. The guards of proxy VIPs
// are their owner's to rewrite (Guard.Write).
func (x *Program) Hold(hold bool) {
	x.held.Store(hold)
	if hold {
		return
	}
	for _, p := range x.planeList() {
		if snap := p.last.Load(); snap != nil {
			if err := p.Publish(snap); err != nil {
				p.log.Error("xdp: rewriting the maps after an upgrade failed", zap.Error(err))
			}
		}
	}
	x.neighborsChanged()
}

// UpgradeBlocker says why this program cannot be handed to another
// process, or "" when it can: without pin_path its link belongs to this
// process and the next one could not attach beside it.
func (x *Program) UpgradeBlocker() string {
	if x.cfg.PinPath == "" && len(x.planeList()) > 0 {
		return "xdp VIPs run without [xdp] pin_path: the new process could not take the XDP program over " +
			"(set pin_path, which needs a restart, or restart instead of upgrading)"
	}
	return ""
}
