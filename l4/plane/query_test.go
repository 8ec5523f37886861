package plane

import (
	"net/netip"
	"testing"

	"github.com/l4lb/l4lb/l4"
)

// TestQueryDecidesOnce: the first decision stands; CandidateOf finds a
// backend's candidate.
func TestQueryDecidesOnce(t *testing.T) {
	var fc l4.FlowCounter
	a := l4.NewBackend("a", netip.MustParseAddrPort("198.18.1.1:80"), &fc)
	q := &Query{Answer: &Explanation{Candidates: []Candidate{NewCandidate(a)}}}
	if !q.Undecided() {
		t.Fatal("a new query is decided")
	}
	q.Decided(Ref(a), "first")
	q.Decided(nil, "second")
	if q.Undecided() || q.Answer.Because != "first" || q.Answer.Backend.ID != "a" {
		t.Fatalf("after two decisions: %q %+v", q.Answer.Because, q.Answer.Backend)
	}
	if c := q.CandidateOf(a); c == nil || c.ID != "a" || c.Backend() != a {
		t.Fatalf("candidate of a: %+v", c)
	}
}

// TestQueryAccess: the verdict names the deciding rule; a refused client
// gets no backend unless a pin of its own decides.
func TestQueryAccess(t *testing.T) {
	deny := netip.MustParsePrefix("198.18.0.64/26")
	for _, tc := range []struct {
		name    string
		allowed bool
		rule    netip.Prefix
		inAllow bool
		pinned  bool
		access  string
		backend bool
	}{
		{"denied", false, deny, false, false, "refused by deny 198.18.0.64/26", false},
		{"denied but pinned", false, deny, false, true, "refused by deny 198.18.0.64/26", true},
		{"allowed by a rule", true, netip.MustParsePrefix("198.18.0.0/24"), true, false, "allowed by allow 198.18.0.0/24", true},
		{"in no list", true, netip.Prefix{}, false, false, "allowed: in no list, and the VIP has no allow list", true},
		{"outside the allow list", false, netip.Prefix{}, false, false, "refused: not in the VIP's allow list", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &Query{Answer: &Explanation{}}
			if tc.pinned {
				q.Answer.Pinned = []Pin{{Kind: "connection", Decides: true}}
			}
			q.Decided(&BackendRef{ID: "a"}, "picked")
			q.Access(tc.allowed, tc.rule, tc.inAllow)
			if q.Answer.Access != tc.access || (q.Answer.Backend != nil) != tc.backend {
				t.Fatalf("access %q backend %+v because %q", q.Answer.Access, q.Answer.Backend, q.Answer.Because)
			}
			if !tc.backend && q.Answer.Because != "no backend: the client is "+tc.access {
				t.Fatalf("because %q", q.Answer.Because)
			}
		})
	}
}
