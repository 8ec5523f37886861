// `l4lb explain`: the answer, step by step as the data plane decides.

package report

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/l4lb/l4lb/l4/plane"
)

// Explanation is `l4lb explain`: which backend a client's flow has or
// would get, and why, for a person.
func Explanation(w io.Writer, e plane.Explanation) {
	head := fmt.Sprintf("vip %s (%s/%s, %s, %s", e.VIP, e.Protocol, e.Listen, e.Mode, e.Algorithm)
	if e.HashKey != "" {
		head += ", hash on " + hashKeyText(e.HashKey)
	}
	fmt.Fprintln(w, head+")")
	fmt.Fprintf(w, "client %s (flow %s)\n", e.Client, e.Flow)
	printPinned(w, e)
	if e.Pick != nil {
		fmt.Fprintln(w, pickLine(e))
	}
	printCandidates(w, e.Candidates)
	if e.Access != "" {
		fmt.Fprintln(w, "access:", e.Access)
	}
	if e.Backend != nil {
		fmt.Fprintf(w, "backend: %s: %s\n", refText(e.Backend), e.Because)
	} else {
		fmt.Fprintf(w, "backend: not determined: %s\n", e.Because)
	}
	for _, r := range e.Routes {
		fmt.Fprintf(w, "route %s: %s  eligible %d\n", r.Name, routeMatch(plane.RouteStatus{Names: r.Names, Databases: r.Databases, Users: r.Users}), r.Eligible)
	}
	for _, n := range e.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func hashKeyText(k string) string {
	switch k {
	case "src_ip":
		return "the source address"
	case "src_ip_port":
		return "source address and port"
	case "5tuple":
		return "the 5-tuple"
	}
	return k
}

func refText(r *plane.BackendRef) string {
	switch {
	case r == nil:
		return "none"
	case r.ID == "":
		return fmt.Sprintf("backend index %d (not a backend of this VIP)", r.Index)
	}
	return fmt.Sprintf("%s (%s)", r.ID, r.Address)
}

func printPinned(w io.Writer, e plane.Explanation) {
	if len(e.Pinned) == 0 {
		fmt.Fprintf(w, "pinned: none (%s)\n", strings.Join(e.Unpinned, "; "))
		return
	}
	fmt.Fprintln(w, "pinned:")
	for _, p := range e.Pinned {
		idle := fmt.Sprintf("idle %s", seconds(p.IdleSeconds))
		if p.TimeoutSeconds > 0 {
			idle += " of " + seconds(p.TimeoutSeconds)
		}
		if p.Closing {
			idle += ", closing (FIN seen)"
		}
		verdict := ""
		if p.Decides {
			verdict = "DECIDES: "
		}
		fmt.Fprintf(w, "  %s %s -> %s, %s: %s%s\n", p.Kind, p.Flow, refText(&p.Backend), idle, verdict, p.Why)
	}
	for _, u := range e.Unpinned {
		fmt.Fprintln(w, "  not found:", u)
	}
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
}

// pickLine is the algorithm's step in one line.
func pickLine(e plane.Explanation) string {
	p := e.Pick
	choice := refText(p.Backend)
	if h := p.Hash; h != nil {
		switch {
		case h.Maglev != nil:
			src := "maglev"
			if h.Maglev.Source == "xdp map" {
				src = "maglev (xdp map)"
			}
			return fmt.Sprintf("%s: hash %s -> slot %d of %d (table generation %d) -> %s%s", src, h.Hash, h.Maglev.Slot, h.Maglev.TableSize, p.Generation, ownerText(h), boundText(h, choice))
		case h.Ring != nil:
			return fmt.Sprintf("source_hash: hash %s -> ring point %d of %d (position %s, one of %d points of its backend) -> %s%s", h.Hash, h.Ring.Point, h.Ring.Points, h.Ring.Position, h.Ring.Vnodes, ownerText(h), boundText(h, choice))
		}
		return fmt.Sprintf("%s: the hash covers the client port (hash_key %s): give CLIENT_IP:PORT", e.Algorithm, h.Key)
	}
	switch {
	case p.Backend != nil:
		return fmt.Sprintf("%s: %s -> %s", e.Algorithm, p.Rule, choice)
	case len(p.Tied) > 0:
		return fmt.Sprintf("%s: %s -> a tie between %s", e.Algorithm, p.Rule, strings.Join(p.Tied, ", "))
	case p.Next != nil:
		return fmt.Sprintf("%s: %s -> the VIP's next new flow, whichever client sends it, goes to %s", e.Algorithm, p.Rule, refText(p.Next))
	}
	return fmt.Sprintf("%s: %s", e.Algorithm, p.Rule)
}

func ownerText(h *plane.HashPath) string {
	if h.Owner == nil {
		return "empty slot (dropped)"
	}
	return refText(h.Owner)
}

// boundText says what the load bound did to a hash's owner.
func boundText(h *plane.HashPath, choice string) string {
	switch {
	case h.Fallback:
		return fmt.Sprintf("; over the load bound (%d%%) early in its sequence, a scan chose %s", h.BalanceFactor, choice)
	case len(h.Skipped) > 0 && h.BalanceFactor == 0:
		return fmt.Sprintf("; %s at max_conns, passed by for %s", strings.Join(h.Skipped, ", "), choice)
	case len(h.Skipped) > 0:
		return fmt.Sprintf("; %s over the load bound (%d%%) or at max_conns, passed by for %s", strings.Join(h.Skipped, ", "), h.BalanceFactor, choice)
	}
	return ""
}

func printCandidates(w io.Writer, cs []plane.Candidate) {
	fmt.Fprintln(w, "candidates:")
	for _, c := range cs {
		state := c.Health
		if c.Override != "" {
			state += "/" + strings.ToUpper(c.Override)
		}
		if lag := c.ReplicaLag.Text(); lag != "" {
			state += ", " + lag
		}
		if !c.Candidate {
			fmt.Fprintf(w, "  %s (%s) %s weight %d, live %d: NOT A CANDIDATE: %s\n", c.ID, c.Address, state, c.Weight, c.LiveFlows, c.Why)
			continue
		}
		fmt.Fprintf(w, "  %s (%s) %s weight %d%s\n", c.ID, c.Address, state, c.Weight, scoreText(c))
	}
}

// scoreText lists what the algorithm weighs for a candidate.
func scoreText(c plane.Candidate) string {
	s := ""
	if c.EffectiveWeight != c.Weight {
		s += fmt.Sprintf(" (effective %d", c.EffectiveWeight)
		if c.Scale != 0 && c.Scale != 1 {
			s += fmt.Sprintf(", scaled x%.2f", c.Scale)
		}
		s += ")"
	}
	s += fmt.Sprintf(", live %d", c.LiveFlows)
	if c.Share > 0 {
		s += fmt.Sprintf(", share %.1f%%", 100*c.Share)
	}
	if c.Cost > 0 {
		rtt := c.RTT.String()
		if !c.RTTSampled {
			rtt += " (default: no sample yet)"
		}
		s += fmt.Sprintf(", rtt %s, cost %s, %.4g per weight", rtt, c.Cost, c.Load)
	} else if c.Load > 0 {
		s += fmt.Sprintf(", %.4g per weight", c.Load)
	}
	if c.OverBound {
		s += ", over the load bound"
	}
	if c.Full {
		s += fmt.Sprintf(", FULL: at its cap of %d, skipped", c.MaxFlows)
	}
	return s
}
