// The explain wire format: which backend a client's flow has or would get,
// and why (`l4lb explain`, GET /vips/{vip}/explain).

package plane

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// ErrBadClient: the client address cannot be parsed, or no flow from it
// can reach the VIP (400).
var ErrBadClient = errors.New("bad client address")

// Explanation is l4lb explain's answer for one client of one VIP.
type Explanation struct {
	VIP       string `json:"vip"`
	Listen    string `json:"listen"`
	Protocol  string `json:"protocol"`
	Mode      string `json:"mode"`
	Algorithm string `json:"algorithm"`
	// HashKey is what the flow hash covers, where a hash decides: the
	// hashing algorithms, and every xdp VIP (its Maglev table).
	HashKey string `json:"hash_key,omitempty"`
	// Client is the address asked about, with its port when one was given.
	Client string `json:"client"`
	// Flow is the flow considered (client to the VIP's address).
	Flow string `json:"flow"`
	// Backend is the backend the client's flow has, or a new one would
	// get. Absent when none would take it, or when chance, other flows or
	// the client port (not given) decide: Because says which.
	Backend *BackendRef `json:"backend,omitempty"`
	Because string      `json:"because"`
	// Pinned lists the state the client's flows have (established
	// connections, the affinity pin, UDP sessions, XDP conntrack entries),
	// the one that decides first.
	Pinned []Pin `json:"pinned,omitempty"`
	// Unpinned says what was looked up and not found ("no affinity entry").
	Unpinned []string `json:"unpinned,omitempty"`
	// Pick is the algorithm's answer for a new flow over the VIP's
	// current snapshot (for xdp VIPs: the Maglev table in the map).
	Pick *Pick `json:"pick,omitempty"`
	// Candidates are every backend of the VIP, with why one that takes no
	// new flows does not, and the algorithm's scores.
	Candidates []Candidate `json:"candidates"`
	Notes      []string    `json:"notes,omitempty"`
	// Access is the VIP's allow/deny verdict for the client: "allowed" or
	// "refused", and the rule that decides (absent when the VIP has no
	// lists).
	Access string `json:"access,omitempty"`
	// Routes are the VIP's routes, in the order a startup tries them, with
	// what each takes: a new connection's route depends on its first bytes,
	// which explain does not see (the answer above is the default route's).
	Routes []RouteMatch `json:"routes,omitempty"`
}

// RouteMatch is one route of a VIP in explain: what it takes, and how many
// of its backends are eligible.
type RouteMatch struct {
	Name      string   `json:"name"`
	Names     []string `json:"names,omitempty"`     // server names (SNI)
	Databases []string `json:"databases,omitempty"` // a postgres startup's database
	Users     []string `json:"users,omitempty"`     // and user
	Eligible  int      `json:"eligible"`
}

// BackendRef names a backend.
type BackendRef struct {
	// ID is the backend's name (or address); empty for an index that no
	// backend of the VIP holds (an xdp map entry from elsewhere).
	ID      string `json:"id"`
	Address string `json:"address"`
	Index   uint32 `json:"index"` // its slot in the XDP backend map
}

// Pin is state that keeps a client's flow on a backend.
type Pin struct {
	// Kind: "connection" (an established TCP connection through the
	// proxy), "affinity" (the client address's pin, affinity_timeout),
	// "session" (a UDP session), "conntrack" (the XDP program's flow entry).
	Kind    string     `json:"kind"`
	Flow    string     `json:"flow"`
	Backend BackendRef `json:"backend"`
	// Decides: the flow asked about follows this pin.
	Decides bool   `json:"decides"`
	Why     string `json:"why"`
	// IdleSeconds is how long the pin has been unused; TimeoutSeconds how
	// long unused it lasts (0: until the flow ends).
	IdleSeconds    float64 `json:"idle_seconds"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// Closing: the XDP program saw a FIN of the flow.
	Closing bool `json:"closing,omitempty"`
}

// Pick is how the algorithm places a new flow.
type Pick struct {
	Rule string `json:"rule"`
	// Backend is the algorithm's choice; absent when chance, other flows,
	// a tie or the client port (not given) decide.
	Backend *BackendRef `json:"backend,omitempty"`
	// Tied: the backends a random scan start chooses among.
	Tied []string `json:"tied,omitempty"`
	// Next is round_robin's next pick, whichever client's flow takes it.
	Next *BackendRef `json:"next,omitempty"`
	Hash *HashPath   `json:"hash,omitempty"`
	// Generation numbers the VIP's snapshots (each health change, weight
	// change, override or reload makes one): the one answered from.
	Generation uint64 `json:"generation"`
}

// HashPath is how the flow hash placed the flow.
type HashPath struct {
	Key  string `json:"key"`
	Hash string `json:"hash"` // hex
	// Maglev or Ring: where the hash landed.
	Maglev *MaglevPath `json:"maglev,omitempty"`
	Ring   *RingPath   `json:"ring,omitempty"`
	// Owner is the backend the slot or point belongs to (the choice unless
	// the load bound passed it by). Absent for an empty xdp slot.
	Owner *BackendRef `json:"owner,omitempty"`
	// BalanceFactor is the load bound (percent of the fair share; 0 =
	// none); Skipped the backends it passed by, in order; Fallback: none
	// was within it early in the key's sequence, a scan chose.
	BalanceFactor uint32   `json:"balance_factor,omitempty"`
	Skipped       []string `json:"skipped,omitempty"`
	Fallback      bool     `json:"fallback,omitempty"`
}

// MaglevPath is a flow's slot in a Maglev table.
type MaglevPath struct {
	Slot      int `json:"slot"`
	TableSize int `json:"table_size"`
	// Source: "snapshot" (the proxy's picker) or "xdp map" (the program's
	// table, read back).
	Source string `json:"source"`
}

// RingPath is a flow's point on the source_hash ring.
type RingPath struct {
	Point    int    `json:"point"`    // index of the first point at or after the hash
	Points   int    `json:"points"`   // points on the ring
	Position string `json:"position"` // that point's position (hex)
	Vnodes   int    `json:"vnodes"`   // points of the owner
}

// Candidate is one backend of the VIP as explain sees it.
type Candidate struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Index   uint32 `json:"index"`
	Weight  uint32 `json:"weight"`
	// EffectiveWeight is the weight new flows see (0: not a candidate;
	// below Weight while slow start ramps; xdp least_conn/least_time: the
	// rescaled weight of the Maglev table).
	EffectiveWeight uint32  `json:"effective_weight"`
	Scale           float64 `json:"scale,omitempty"` // xdp least_conn/least_time
	Health          string  `json:"health"`
	Override        string  `json:"override,omitempty"`
	// Candidate: new flows may go to it. Why says why not, and what
	// happens to the flows pinned to it.
	Candidate bool   `json:"candidate"`
	Why       string `json:"why,omitempty"`
	LiveFlows int64  `json:"live_flows"`
	// Share of new flows (or draws, slots, ring) by weight; Load what a
	// least-loaded rule compares (live flows, or cost, per weight; lower
	// wins); Cost least_time's (live+1) x (RTT+bias).
	Share      float64       `json:"share,omitempty"`
	Load       float64       `json:"load,omitempty"`
	RTT        time.Duration `json:"rtt_ns,omitempty"`
	RTTSampled bool          `json:"rtt_sampled,omitempty"`
	Cost       time.Duration `json:"cost_ns,omitempty"`
	OverBound  bool          `json:"over_bound,omitempty"`
	// Full: at its max_conns (max_sessions), so skipped by new flows;
	// MaxFlows is that cap (0 = none).
	Full     bool  `json:"full,omitempty"`
	MaxFlows int64 `json:"max_flows,omitempty"`
	ReplicaLag

	b *l4.Backend // the backend the candidate describes
}

// NewCandidate is backend b as a candidate, with what b itself knows:
// its identity, live flows and RTT. The control loop adds the rest.
func NewCandidate(b *l4.Backend) Candidate {
	c := Candidate{ID: string(b.ID), Address: b.Addr.String(), Index: b.Index, LiveFlows: b.LiveFlows(), b: b}
	c.RTT, c.RTTSampled = b.RTT().Value()
	return c
}

// Backend returns the backend the candidate describes (nil for one not
// made by NewCandidate).
func (c *Candidate) Backend() *l4.Backend { return c.b }

// ParseClient reads CLIENT_IP[:PORT]: an IPv4 or IPv6 address, bare or
// with a port (IPv6 then in brackets). The port is 0 when none is given.
func ParseClient(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return ap, fmt.Errorf("%w %q: port 0 (give a port from 1 to 65535, or none)", ErrBadClient, s)
		}
		if ap.Addr().Zone() != "" {
			return ap, fmt.Errorf("%w %q: no zone, please", ErrBadClient, s)
		}
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("%w %q: want IP or IP:PORT ([IPv6]:PORT)", ErrBadClient, s)
	}
	return netip.AddrPortFrom(a.Unmap(), 0), nil
}
