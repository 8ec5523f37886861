// The data plane of one xdp VIP: its entries in the XDP program's maps.

package xdpplane

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/guard"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// VIPOptions are what an xdp VIP's plane is made and updated with.
type VIPOptions struct {
	HashKey         l4.HashKey // what the flow hash covers
	Forward         l4.Forward // ipip, l2 or nat
	NewFlowRate     int        // new conntrack entries a second (0: no cap)
	MaglevTableSize int        // the table's slots, for algorithms without a table of their own
	Allow, Deny     []netip.Prefix
	// SessionTimeout is how long a UDP flow counts as live after its
	// last packet (the live-flow window).
	SessionTimeout time.Duration
	// Algorithm is the VIP's, for explain: the table's weights are its
	// stand-in (see NextScales).
	Algorithm l4.Algorithm
}

// Plane writes one VIP into the XDP maps: the VIP entry, its backends,
// its Maglev table (swapped whole on every publish). Established flows
// follow the conntrack, so a table change moves only new flows.
type Plane struct {
	x     *Program
	key   l4.VIPKey
	index uint32 // the VIP's slot in the Maglev and stats maps
	log   *zap.Logger
	vc    atomic.Pointer[VIPOptions]
	// written is the generation of the snapshot whose table the maps
	// hold (explain compares it with the VIP's current one).
	written atomic.Uint64
	// last is the snapshot last published (Hold writes it again).
	last atomic.Pointer[snapshot.Snapshot]
	// kernelFlows: the VIP comes from proxy mode and the proxy's
	// connections drain (Inherit).
	kernelFlows atomic.Bool

	mu       sync.Mutex
	acl      vipACL                 // the access list the maps hold
	stopped  bool                   // no new flows: the table is empty
	backends map[uint32]*xdpBackend // every backend entry this VIP wrote, by index
}

// xdpBackend is a backend entry the plane wrote.
type xdpBackend struct {
	b       *l4.Backend
	mac     net.HardwareAddr  // l2: the resolved MAC; nil until known
	retired bool              // left the config: deleted once its flows are gone
	release func(*l4.Backend) // gives the index back once the entry is deleted
}

// drop deletes the entry and gives a retired backend's index back.
func (xb *xdpBackend) drop(lb *bpf.LB, i uint32) error {
	if err := lb.DeleteBackend(i); err != nil {
		return err
	}
	if xb.release != nil {
		xb.release(xb.b)
	}
	return nil
}

// NewPlane enters the VIP at key into the program (its entry is written
// by the first Publish).
func (x *Program) NewPlane(key l4.VIPKey, o VIPOptions, log *zap.Logger) (*Plane, error) {
	idx, err := x.vips.GetFor(key)
	if err != nil {
		return nil, fmt.Errorf("xdp: %w (xdp VIPs)", err)
	}
	p := &Plane{x: x, key: key, index: idx, log: log, backends: map[uint32]*xdpBackend{}}
	p.vc.Store(&o)
	x.add(p)
	return p, nil
}

func (p *Plane) conf() *VIPOptions { return p.vc.Load() }

// Serve: the VIP entry is written by the first Publish; nothing runs here.
func (p *Plane) Serve() {}

// Publish writes the snapshot's backends and its Maglev table (the very
// table the snapshot's picker uses, or, for algorithms without one, a
// Maglev table over the snapshot's weighted members), then the VIP entry.
func (p *Plane) Publish(snap *snapshot.Snapshot) (err error) {
	p.last.Store(snap)
	if p.x.held.Load() {
		return nil // another l4lb is adopting the maps; Hold(false) writes it
	}
	if !p.x.using(func() { err = p.write(snap) }) {
		return nil // l4lb is stopping: the maps stay as they are
	}
	return err
}

// write is publish on open maps.
func (p *Plane) write(snap *snapshot.Snapshot) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil
	}
	vc := p.conf()
	table, err := p.table(snap, vc)
	if err != nil {
		return err
	}
	if err := p.writeBackends(snap); err != nil {
		return err
	}
	if err := p.x.lb.SetMaglev(p.index, table); err != nil {
		return err
	}
	acl, err := p.aclFor(vc)
	if err != nil {
		return err
	}
	e := bpf.VIPEntry{Index: p.index, HashKey: vc.HashKey, Forward: vc.Forward, NewFlowRate: uint32(vc.NewFlowRate), ACL: acl}
	if p.kernelFlows.Load() {
		// Every flow is pinned from its SYN, or its later segments would
		// pass to the kernel as the proxy's: new_flow_rate waits.
		e.KernelFlows, e.NewFlowRate = true, 0
	}
	if vc.Forward == l4.ForwardNAT {
		if err := p.x.enableNAT(p.key); err != nil {
			return err
		}
	}
	if err := p.x.lb.SetVIP(p.key, e); err != nil {
		return err
	}
	p.written.Store(snap.Generation())
	p.x.neighborsChanged()
	return nil
}

// aclFor is vc's access list, the one already written while the lists
// are unchanged (bpf.LB.SetVIP then leaves the trie alone).
func (p *Plane) aclFor(vc *VIPOptions) (*guard.ACL, error) { return p.acl.of(vc.Allow, vc.Deny) }

// table maps the snapshot's Maglev table (indexes into its members) onto
// backend indexes.
func (p *Plane) table(snap *snapshot.Snapshot, vc *VIPOptions) ([]uint32, error) {
	size := vc.MaglevTableSize
	if snap.Len() == 0 {
		return make([]uint32, size), nil // every slot empty: new flows are dropped
	}
	t := snap.MaglevTable()
	if t == nil {
		var err error
		if t, err = balance.MaglevTable(snap.Members, uint32(size)); err != nil {
			return nil, fmt.Errorf("xdp: maglev table: %w", err)
		}
	}
	out := make([]uint32, len(t))
	for s, m := range t {
		out[s] = snap.Members[m].Backend.Index
	}
	return out, nil
}

// writeBackends writes an entry for every member not written yet. (A
// backend that leaves the snapshot, down or drained, keeps its entry: its
// established flows may still use it; see backendsRemoved for removal.)
func (p *Plane) writeBackends(snap *snapshot.Snapshot) error {
	for _, m := range snap.Members {
		b := m.Backend
		cur, ok := p.backends[b.Index]
		if ok && cur.b == b {
			continue
		}
		if ok {
			// The index names another backend now: no flow may follow it.
			if _, err := p.x.lb.PurgeBackend(b.Index); err != nil {
				return err
			}
		}
		// An l2 backend's MAC is filled in by the loop once its neighbour
		// resolves (the loop alone talks to netlink).
		xb := &xdpBackend{b: b}
		if err := p.x.lb.SetBackend(b.Index, bpf.BackendEntry{Addr: b.Addr.Addr(), MAC: xb.mac, Active: true}); err != nil {
			return err
		}
		p.backends[b.Index] = xb
	}
	return nil
}

// backendsRemoved retires the backends a reload removed: their entries
// stay while established flows use them, and their indexes are released
// when the entries go.
func (p *Plane) BackendsRemoved(bs []*l4.Backend, release func(*l4.Backend)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range bs {
		if xb, ok := p.backends[b.Index]; ok && xb.b == b {
			xb.retired, xb.release = true, release
		} else {
			release(b)
		}
	}
}

// backendDown lets go of the UDP flows pinned to a backend that went down:
// a datagram flow has no end the conntrack can see, and would otherwise
// keep being sent into a dead backend. TCP flows follow on_down.
func (p *Plane) BackendDown(b *l4.Backend) {
	if p.key.Proto != l4.UDP || p.x.held.Load() {
		return
	}
	var n int
	var err error
	p.x.using(func() { n, err = p.x.lb.PurgeBackend(b.Index) })
	if err != nil {
		p.log.Warn("xdp: purging a down backend's flows failed", zap.String("backend", string(b.ID)), zap.Error(err))
	} else if n > 0 {
		p.log.Info("xdp: flows of a down backend purged; they move on their next packet", zap.String("backend", string(b.ID)), zap.Int("flows", n))
	}
}

// refresh deletes retired backends whose last flow ended.
func (p *Plane) refresh() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, xb := range p.backends {
		if xb.retired && p.x.LiveFlows(i) == 0 {
			if err := xb.drop(p.x.lb, i); err != nil {
				p.log.Warn("xdp: deleting a removed backend's entry failed", zap.Uint32("index", i), zap.Error(err))
				continue
			}
			delete(p.backends, i)
		}
	}
}

// resolveMACs fills in the MACs of l2 backends whose neighbour has
// resolved since (on the loop).
func (p *Plane) resolveMACs() {
	if p.conf().Forward != l4.ForwardL2 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, xb := range p.backends {
		if xb.mac == nil {
			p.resolveMAC(i, xb)
		}
	}
}

// resolveMAC writes an l2 backend's MAC once the kernel knows it.
func (p *Plane) resolveMAC(i uint32, xb *xdpBackend) {
	mac, ok := p.x.neigh.Resolved(xb.b.Addr.Addr())
	if !ok {
		return
	}
	if err := p.x.lb.SetBackend(i, bpf.BackendEntry{Addr: xb.b.Addr.Addr(), MAC: mac, Active: true}); err != nil {
		p.log.Warn("xdp: writing a backend's MAC failed", zap.Uint32("index", i), zap.Error(err))
		return
	}
	xb.mac = mac
}

// backendAddrs lists the addresses of the backends whose neighbours must
// stay resolved.
func (p *Plane) backendAddrs() []netip.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]netip.Addr, 0, len(p.backends))
	for _, xb := range p.backends {
		out = append(out, xb.b.Addr.Addr())
	}
	return out
}

// outlivesProcess: with its link pinned on a bpffs that outlives l4lb the
// program keeps forwarding (and its conntrack keeps flows on their
// backends) while l4lb restarts; otherwise the VIP drains like a proxy's.
func (p *Plane) OutlivesProcess() bool {
	stays, _ := p.x.staysAttached()
	return stays
}

// Update takes a reload's options: the next Publish writes hash key,
// forward, rate, lists and table size.
func (p *Plane) Update(o VIPOptions) { p.vc.Store(&o) }

// stopAccepting empties the Maglev table: new flows are dropped, flows in
// the conntrack keep their backends until drain ends.
func (p *Plane) StopAccepting() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.stopped = true
	if err := p.x.lb.SetMaglev(p.index, make([]uint32, p.conf().MaglevTableSize)); err != nil {
		p.log.Warn("xdp: emptying the table of a stopped VIP failed", zap.Error(err))
	}
}

// Yield: a reload moves the VIP to proxy mode. Its entry forwards only
// the flows in the conntrack, to their backends; SYNs and every other
// packet pass to the kernel, where the proxy listens. Drain follows
// (plane.ModeChange).
func (p *Plane) Yield() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.stopped = true // publishes write nothing more; the table stays for stale hits
	vc := p.conf()
	var err error
	if p.x.held.Load() || !p.x.using(func() {
		err = p.x.lb.SetVIP(p.key, bpf.VIPEntry{Index: p.index, HashKey: vc.HashKey, Forward: vc.Forward, ConntrackOnly: true})
	}) {
		return
	}
	if err != nil {
		p.log.Warn("xdp: handing new flows to the proxy failed; they are dropped until the drain ends", zap.Error(err))
		_ = p.x.lb.SetMaglev(p.index, make([]uint32, vc.MaglevTableSize))
	}
}

// Inherit (true) leaves the packets of TCP flows the conntrack does not
// hold to the kernel: the proxy's connections while they drain after a
// reload moved the VIP from proxy mode (plane.ModeChange).
func (p *Plane) Inherit(on bool) {
	if p.kernelFlows.Swap(on) == on {
		return
	}
	if snap := p.last.Load(); snap != nil {
		if err := p.Publish(snap); err != nil {
			p.log.Warn("xdp: rewriting the VIP entry failed", zap.Bool("kernel_flows", on), zap.Error(err))
		}
	}
}

// drain waits for the VIP's flows to end (or ctx), then removes the VIP
// and its flows from the maps; it returns how many flows it cut.
func (p *Plane) Drain(ctx context.Context) int {
	p.StopAccepting()
	p.x.waitFlowsGone(ctx, p.indexes())
	return p.clear()
}

func (p *Plane) Close() {
	p.StopAccepting()
	p.clear()
}

// clear removes the VIP, its flows and its backends from the maps.
func (p *Plane) clear() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.x.lb.DeleteVIP(p.key)
	n, err := p.x.lb.PurgeVIP(p.key)
	if err != nil {
		p.log.Warn("xdp: purging a removed VIP's flows failed", zap.Error(err))
	}
	for i, xb := range p.backends {
		_ = xb.drop(p.x.lb, i)
	}
	p.backends = map[uint32]*xdpBackend{}
	p.x.vips.Put(p.index)
	p.index = 0
	p.x.remove(p)
	return n
}

func (p *Plane) indexes() []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]uint32, 0, len(p.backends))
	for i := range p.backends {
		out = append(out, i)
	}
	return out
}

// resetWhere deletes the conntrack entries of matching backends: their
// flows rehash onto a live backend, which resets them (on_down = reset).
// The kernel forwards them, so there is no line to log: why is unused.
func (p *Plane) ResetWhere(match func(*l4.Backend) bool, _ l4.EndReason) int {
	if p.x.held.Load() {
		return 0
	}
	total := 0
	for _, b := range p.matching(match) {
		var n int
		var err error
		p.x.using(func() { n, err = p.x.lb.PurgeBackend(b.Index) })
		if err != nil {
			p.log.Warn("xdp: purging a backend's flows failed", zap.String("backend", string(b.ID)), zap.Error(err))
		}
		total += n
	}
	return total
}

func (p *Plane) matching(match func(*l4.Backend) bool) []*l4.Backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*l4.Backend
	for _, xb := range p.backends {
		if match(xb.b) {
			out = append(out, xb.b)
		}
	}
	return out
}

// LiveFlows returns b's live flows in the conntrack at its last read
// (every 2 s): the XDP plane's count, where a proxy plane's is b's own
// (plane.LiveCounter).
func (p *Plane) LiveFlows(b *l4.Backend) int64 { return int64(p.x.LiveFlows(b.Index)) }

// notePeaks raises each backend's peak to its live flows in counts, the
// conntrack's per backend index: sampled every read, a spike between two
// reads is missed.
func (p *Plane) notePeaks(counts []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, xb := range p.backends {
		if int(i) < len(counts) {
			xb.b.NotePeak(int64(counts[i]))
		}
	}
}

// fillStatus reads the VIP's and its backends' counters.
func (p *Plane) FillStatus(s *plane.VIPStatus) {
	p.mu.Lock()
	index := p.index // 0 once a drain cleared the VIP
	p.mu.Unlock()
	if index != 0 {
		p.x.using(func() { p.readStatus(s, index) })
	}
}

// CloseSome: not in xdp mode, where the kernel owns the flows.
func (p *Plane) CloseSome(*l4.Backend, int, bool) (int, error) {
	return 0, fmt.Errorf("%w: in xdp mode the kernel forwards the flows and l4lb holds no connection to close; established flows stay on their backend (BPF conntrack), new flows follow the Maglev table", plane.ErrCannotRebalance)
}

func (p *Plane) readStatus(s *plane.VIPStatus, index uint32) {
	st, err := p.x.lb.VIPStats(index)
	if err != nil {
		return
	}
	x := &plane.XDPVIPStatus{Packets: st.Packets, Bytes: st.Bytes, NewFlows: st.NewFlows, Drops: st.Drops,
		XDPGuardStatus: plane.XDPGuardStatus{ACLDrops: st.ACLDrops, SYNRateDrops: st.SYNRateDrops}, Untracked: st.Untracked}
	s.Accepted = st.NewFlows
	for i := range s.Backends {
		bs := &s.Backends[i]
		live := int64(p.x.LiveFlows(bs.Index))
		bs.LiveFlows = live
		x.LiveFlows += live
		if b, err := p.x.lb.BackendStats(bs.Index); err == nil {
			bs.Packets, bs.BytesIn, bs.Flows = b.Packets, b.Bytes, b.NewFlows
		}
	}
	s.Active = x.LiveFlows
	s.XDP = x
}
