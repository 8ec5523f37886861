// What the XDP program does with a client's flow, read from its maps:
// the conntrack entry, then the Maglev slot of the flow's hash.

package xdpplane

import (
	"errors"
	"fmt"

	"github.com/l4lb/l4lb/bpf"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/guard"
	"github.com/l4lb/l4lb/l4/plane"
)

// Explain follows the program's select_backend: a usable conntrack entry
// keeps a flow (a TCP SYN excepted), anything else takes the backend of
// its slot in the VIP's table as the map holds it. Lookups from user space
// neither refresh an entry nor make it recent in the LRU.
func (p *Plane) Explain(q *plane.Query) {
	p.explainMaps(q)
	vc := p.conf()
	if acl, err := guard.NewACL(vc.Allow, vc.Deny); err == nil {
		explainAccess(q, acl)
	}
}

// explainAccess adds acl's verdict for the client (nil: no lists).
func explainAccess(q *plane.Query, acl *guard.ACL) {
	if acl != nil {
		r, _ := acl.Match(q.Flow.Src.Addr())
		q.Access(acl.Allowed(q.Flow.Src.Addr()), r.Net, r.Allowed)
	}
}

// explainMaps reads the program's maps for the flow.
func (p *Plane) explainMaps(q *plane.Query) {
	p.xdpCandidates(q)
	var path bpf.Path
	var err error
	if !p.x.using(func() { path, err = p.x.lb.Explain(q.Flow) }) {
		err = errors.New("the XDP program is shut down")
	}
	if err != nil {
		q.Answer.Notes = append(q.Answer.Notes, "reading the XDP maps: "+err.Error())
		q.Decided(nil, "the XDP maps could not be read (see notes)")
		return
	}
	q.Answer.HashKey = path.VIP.HashKey.String()
	p.explainACL(q)
	if q.Port {
		p.explainEntry(q, path)
	} else {
		p.clientFlows(q)
	}
	p.explainSlot(q, path)
}

// explainACL notes the verdict of the VIP's allow/deny for the client, as
// the program's trie gives it (the same rule as guard.ACL).
func (p *Plane) explainACL(q *plane.Query) {
	p.mu.Lock()
	acl := p.acl.acl
	p.mu.Unlock()
	if acl == nil {
		return
	}
	client := q.Flow.Src.Addr()
	if acl.Allowed(client) {
		return
	}
	why := "no network of allow contains it"
	if r, ok := acl.Match(client); ok {
		why = "deny " + r.Net.String() + " is the most specific network containing it"
	}
	q.Answer.Notes = append(q.Answer.Notes, fmt.Sprintf("allow/deny refuses %s (%s): the XDP program drops its packets, but for a flow already in the conntrack", client, why))
}

// xdpCandidates gives the candidates the flow table's live counts (read
// every 2 s) and their share of the table by effective weight.
func (p *Plane) xdpCandidates(q *plane.Query) {
	var sum float64
	for _, c := range q.Answer.Candidates {
		if c.Candidate {
			sum += float64(c.EffectiveWeight)
		}
	}
	for i := range q.Answer.Candidates {
		c := &q.Answer.Candidates[i]
		c.LiveFlows = int64(p.x.LiveFlows(c.Index))
		if c.Candidate && sum > 0 {
			c.Share = float64(c.EffectiveWeight) / sum
		}
	}
	q.Answer.Notes = append(q.Answer.Notes, "live flows are the XDP flow table's count, read every 2 s")
}

// ref names backend index i as this VIP knows it.
func (p *Plane) ref(i uint32) *plane.BackendRef {
	p.mu.Lock()
	defer p.mu.Unlock()
	if xb, ok := p.backends[i]; ok {
		return plane.Ref(xb.b)
	}
	return &plane.BackendRef{Index: i}
}

// explainEntry reads the flow's conntrack entry.
func (p *Plane) explainEntry(q *plane.Query, path bpf.Path) {
	fe := path.Flow
	if fe == nil {
		q.Answer.Unpinned = append(q.Answer.Unpinned, "no XDP conntrack entry for "+q.Answer.Flow)
		return
	}
	pin := plane.Pin{Kind: "conntrack", Flow: q.Answer.Flow, Backend: *p.ref(fe.Backend), Closing: fe.Closing,
		IdleSeconds: plane.Secs(max(bpf.MonotonicNow()-fe.LastSeen, 0))}
	if !path.FlowUsable {
		pin.Why = fmt.Sprintf("its backend (index %d) is gone or inactive: the next packet takes the Maglev slot and rewrites the entry", fe.Backend)
		q.Answer.Pinned = append(q.Answer.Pinned, pin)
		return
	}
	pin.Why = "packets of this flow go to it while the entry lives (an LRU: evicted when the table is full; refreshed at most once a second)"
	pin.Decides = true
	b := pin.Backend
	q.Decided(&b, "the XDP conntrack entry of this flow")
	if q.Flow.Proto == l4.TCP {
		switch syn := path.Backend(true); {
		case syn == fe.Backend:
			q.Answer.Notes = append(q.Answer.Notes, "a TCP SYN from this address and port (a new connection over the entry) takes the Maglev slot: the same backend")
		case syn == 0:
			q.Answer.Notes = append(q.Answer.Notes, "a TCP SYN from this address and port (a new connection over the entry) takes the Maglev slot, which has no usable backend: dropped")
		default:
			q.Answer.Notes = append(q.Answer.Notes, "a TCP SYN from this address and port (a new connection over the entry) takes the Maglev slot instead: "+refText(p.ref(syn)))
		}
	}
	q.Answer.Pinned = append(q.Answer.Pinned, pin)
}

// refText names a backend for a sentence ("none: dropped" for nil).
func refText(r *plane.BackendRef) string {
	switch {
	case r == nil:
		return "none (dropped)"
	case r.ID == "":
		return fmt.Sprintf("backend index %d", r.Index)
	}
	return fmt.Sprintf("%s (%s)", r.ID, r.Address)
}

// clientFlows lists the conntrack entries of the client's address on
// this VIP (any port), walking the flow table. Backends are named after
// the walk: it holds the table's lock, which write takes under p.mu.
func (p *Plane) clientFlows(q *plane.Query) {
	client := q.Flow.Src.Addr()
	type found struct {
		f  l4.Flow
		fe bpf.FlowEntry
	}
	var flows []found
	more := false
	walk := func(f l4.Flow, fe bpf.FlowEntry) bool {
		if f.Src.Addr() != client || f.Dst != q.Flow.Dst || f.Proto != q.Flow.Proto {
			return true
		}
		if len(flows) == plane.MaxListed {
			more = true
			return false
		}
		flows = append(flows, found{f, fe})
		return true
	}
	var err error
	p.x.using(func() { err = p.x.lb.Flows(walk) })
	if err != nil {
		q.Answer.Notes = append(q.Answer.Notes, "walking the XDP flow table: "+err.Error())
	}
	now := bpf.MonotonicNow()
	for _, x := range flows {
		q.Answer.Pinned = append(q.Answer.Pinned, plane.Pin{Kind: "conntrack", Flow: plane.FlowString(x.f), Backend: *p.ref(x.fe.Backend), Closing: x.fe.Closing,
			IdleSeconds: plane.Secs(max(now-x.fe.LastSeen, 0)), Why: "a flow of this client: its packets keep this backend while the entry lives and the backend is active"})
	}
	if more {
		q.Answer.Notes = append(q.Answer.Notes, fmt.Sprintf("more than %d XDP conntrack entries from %s: the first %d are listed", plane.MaxListed, client, plane.MaxListed))
	}
	q.Answer.Unpinned = append(q.Answer.Unpinned, "XDP conntrack entries are per client port: give CLIENT_IP:PORT for the entry a packet would use")
}

// explainSlot is the Maglev step: the flow's slot in the map's table.
func (p *Plane) explainSlot(q *plane.Query, path bpf.Path) {
	key := path.VIP.HashKey
	pk := &plane.Pick{Rule: xdpRule(q.Algorithm), Generation: p.written.Load()}
	q.Answer.Pick = pk
	p.checkGeneration(q)
	if plane.PortMatters(key) && !q.Port {
		pk.Hash = &plane.HashPath{Key: key.String()}
		q.Decided(nil, fmt.Sprintf("hash_key %s covers the client port, which was not given: each port hashes on its own (give CLIENT_IP:PORT)", key))
		return
	}
	if path.TableSize == 0 {
		q.Decided(nil, "the VIP has no Maglev table in the map: its new flows are dropped")
		return
	}
	hp := &plane.HashPath{Key: key.String(), Hash: plane.Hex(path.Hash), Maglev: &plane.MaglevPath{Slot: int(path.Slot), TableSize: int(path.TableSize), Source: "xdp map"}}
	pk.Hash = hp
	line := fmt.Sprintf("maglev (xdp map): hash %s -> slot %d of %d (generation %d)", hp.Hash, path.Slot, path.TableSize, pk.Generation)
	switch {
	case path.SlotBackend == 0:
		q.Decided(nil, line+": an empty slot, new flows are dropped (no eligible backend)")
	case !path.SlotUsable:
		hp.Owner = p.ref(path.SlotBackend)
		q.Decided(nil, line+fmt.Sprintf(": its backend (index %d) is gone or inactive, new flows are dropped", path.SlotBackend))
	default:
		hp.Owner = p.ref(path.SlotBackend)
		pk.Backend = hp.Owner
		q.Decided(pk.Backend, line)
	}
	p.checkSlot(q, path)
}

// checkGeneration notes when the maps hold an older table than the
// control plane's current snapshot.
func (p *Plane) checkGeneration(q *plane.Query) {
	if w, cur := p.written.Load(), q.Snap.Generation(); w != cur {
		q.Answer.Notes = append(q.Answer.Notes, fmt.Sprintf("the maps hold the table of generation %d, the control plane is at %d: a write failed or is under way", w, cur))
	}
}

// checkSlot compares the map's slot with the control plane's table.
func (p *Plane) checkSlot(q *plane.Query, path bpf.Path) {
	t, err := p.table(q.Snap, p.conf())
	switch {
	case err != nil:
		q.Answer.Notes = append(q.Answer.Notes, "the control plane's table: "+err.Error())
	case len(t) != int(path.TableSize):
		q.Answer.Notes = append(q.Answer.Notes, fmt.Sprintf("the map's table has %d slots, the control plane's %d", path.TableSize, len(t)))
	case t[path.Slot] != path.SlotBackend:
		q.Answer.Notes = append(q.Answer.Notes, fmt.Sprintf("slot %d: the map holds index %d, the control plane's table index %d", path.Slot, path.SlotBackend, t[path.Slot]))
	}
}

// xdpRule says how an xdp VIP of algorithm a places a new flow.
func xdpRule(a l4.Algorithm) string {
	const table = "the XDP program hashes the flow (hash_key) to a slot of the VIP's Maglev table in the map, and the slot's backend takes it; a flow in the conntrack keeps its backend"
	switch a {
	case l4.SourceHash:
		return table + " (xdp mode runs source_hash as a Maglev table)"
	case l4.LeastConn:
		return table + "; the table's weights are rescaled every weight_refresh toward weight / (live flows + 1), a bounded step at a time"
	case l4.LeastTime:
		return table + "; the table's weights are rescaled every weight_refresh toward weight / ((live flows + 1) x (RTT + bias)), a bounded step at a time"
	}
	return table
}
