// One explain question as the planes see it, and the helpers they share
// to answer it.

package plane

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/snapshot"
)

// MaxListed bounds the flows a plane lists for a client given without a
// port.
const MaxListed = 16

// Query is one explain question: the control loop fills in the VIP, its
// candidates and its snapshot, then the VIP's plane adds what it holds
// for the flow and what it would choose (Plane.Explain).
type Query struct {
	Flow      l4.Flow            // client to the VIP's address
	Port      bool               // the client's port was given
	Algorithm l4.Algorithm       // the VIP's
	Snap      *snapshot.Snapshot // the VIP's current snapshot (nil before the first)
	Answer    *Explanation       // being composed; Candidates sorted by ID

	byPtr  map[*l4.Backend]*Candidate // the candidates by backend, once asked for
	decide string                     // what decided Answer.Backend, once something did
}

// Decided records the answer, b (nil: none) because of why, unless
// something decided before.
func (q *Query) Decided(b *BackendRef, why string) {
	if q.decide != "" {
		return
	}
	q.decide = why
	q.Answer.Backend, q.Answer.Because = b, why
}

// Undecided reports whether nothing has decided the answer yet.
func (q *Query) Undecided() bool { return q.decide == "" }

// CandidateOf returns the candidate of backend b, nil when b is none of
// the VIP's. The candidates must all be in Answer before the first call.
func (q *Query) CandidateOf(b *l4.Backend) *Candidate {
	if q.byPtr == nil {
		q.byPtr = make(map[*l4.Backend]*Candidate, len(q.Answer.Candidates))
		for i := range q.Answer.Candidates {
			q.byPtr[q.Answer.Candidates[i].b] = &q.Answer.Candidates[i]
		}
	}
	return q.byPtr[b]
}

// Access adds the verdict of the VIP's allow/deny lists for the client:
// allowed or not, and the rule that decides (rule invalid: the client is
// in no list; inAllow: rule is in the allow list). A refused client's new
// flows reach no backend; its established ones, if any, still decide.
func (q *Query) Access(allowed bool, rule netip.Prefix, inAllow bool) {
	e := q.Answer
	verdict := "allowed"
	if !allowed {
		verdict = "refused"
	}
	switch {
	case rule.IsValid():
		list := "deny"
		if inAllow {
			list = "allow"
		}
		e.Access = fmt.Sprintf("%s by %s %s", verdict, list, rule)
	case allowed:
		e.Access = "allowed: in no list, and the VIP has no allow list"
	default:
		e.Access = "refused: not in the VIP's allow list"
	}
	if allowed {
		return
	}
	for _, p := range e.Pinned {
		if p.Decides {
			return
		}
	}
	e.Backend, e.Because = nil, "no backend: the client is "+e.Access
}

// Ref names a backend.
func Ref(b *l4.Backend) *BackendRef {
	return &BackendRef{ID: string(b.ID), Address: b.Addr.String(), Index: b.Index}
}

// FlowString formats a flow as the logs do: "tcp 198.18.0.50:40000->198.18.0.10:5432".
func FlowString(f l4.Flow) string {
	return f.Proto.String() + " " + f.Src.String() + "->" + f.Dst.String()
}

// PortMatters reports whether a flow hash of key k covers the client port.
func PortMatters(k l4.HashKey) bool { return k != l4.HashSrcIP }

// Hex formats a hash as explain shows it.
func Hex(u uint64) string { return "0x" + strconv.FormatUint(u, 16) }

// Secs is d in seconds, to the millisecond.
func Secs(d time.Duration) float64 { return d.Round(time.Millisecond).Seconds() }
