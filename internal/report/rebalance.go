// `l4lb rebalance`: the plan, the progress and the end of a rebalance.

package report

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/l4/plane"
)

// FollowRebalance polls the rebalance until it ends (--wait), printing
// the plan and a line as connections are closed when talk, and returns
// the last answer.
func FollowRebalance(c admin.Client, st plane.RebalanceStatus, w io.Writer, talk bool) ([]byte, plane.RebalanceStatus, error) {
	if talk {
		RebalancePlan(w, st)
	}
	shown := 0
	for {
		time.Sleep(500 * time.Millisecond)
		var next plane.RebalanceStatus
		body, err := c.Do(context.Background(), "GET", admin.RebalancePath(st.VIP), nil, &next)
		if err != nil {
			return nil, st, err
		}
		if !next.Started.Equal(st.Started) {
			return body, next, fmt.Errorf("vip %s: another rebalance started meanwhile", st.VIP)
		}
		if talk && next.Running() && next.Closed != shown {
			shown = next.Closed
			fmt.Fprintf(w, "  closed %d of %d: %s\n", next.Closed, next.Planned, liveList(next))
		}
		if !next.Running() {
			return body, next, nil
		}
	}
}

// liveList is "s1 130/100, s2 128/100, s3 42/100": live over target.
func liveList(st plane.RebalanceStatus) string {
	parts := make([]string, 0, len(st.Backends))
	for _, b := range st.Backends {
		if b.Eligible {
			parts = append(parts, fmt.Sprintf("%s %d/%s", b.ID, b.Live, target(b.Target)))
		}
	}
	return strings.Join(parts, ", ")
}

func target(t float64) string { return strings.TrimSuffix(fmt.Sprintf("%.1f", t), ".0") }

// RebalancePlan prints what POST answered: the plan of a rebalance
// that started, or why there is nothing to do.
func RebalancePlan(w io.Writer, st plane.RebalanceStatus) {
	if st.Running() {
		about := time.Duration(st.Planned) * time.Second / time.Duration(max(st.Rate, 1))
		fmt.Fprintf(w, "vip %s: rebalance started: closing about %d connections at %d/s (%s), about %s, until every backend is within %.0f%% of its share\n",
			st.VIP, st.Planned, st.Rate, closeHow(st.Close), about.Round(100*time.Millisecond), 100*st.Tolerance)
	} else {
		fmt.Fprintf(w, "vip %s: %s\n", st.VIP, st.Reason)
	}
	printRebalanceTable(w, st)
}

// RebalanceEnd prints how a followed rebalance ended.
func RebalanceEnd(w io.Writer, st plane.RebalanceStatus) {
	took := st.Ended.Sub(st.Started).Round(100 * time.Millisecond)
	fmt.Fprintf(w, "vip %s: rebalance %s after %s: closed %d; %s\n", st.VIP, st.State, took, st.Closed, st.Reason)
	fmt.Fprintf(w, "  now (live/target): %s\n", liveList(st))
}

// RebalanceState prints what GET (--dry-run) or DELETE (--stop)
// answered.
func RebalanceState(w io.Writer, st plane.RebalanceStatus) {
	if st.State == plane.RebalanceNone {
		fmt.Fprintf(w, "vip %s: no rebalance has run; one now would close about %d at %d/s\n", st.VIP, st.ToClose, st.Rate)
	} else {
		fmt.Fprintf(w, "vip %s: rebalance %s: %s\n", st.VIP, st.State, rebalanceSummary(st))
	}
	printRebalanceTable(w, st)
}

// rebalanceSummary is one line about a rebalance's progress or end.
func rebalanceSummary(st plane.RebalanceStatus) string {
	rounds := ""
	if st.Rounds > 1 {
		rounds = fmt.Sprintf(" in %d rounds", st.Rounds)
	}
	s := fmt.Sprintf("closed %d of %d planned%s at %d/s (%s), by %s, started %s", st.Closed, st.Planned, rounds, st.Rate, st.Close, st.By, st.Started.Format(time.RFC3339))
	if st.Reason != "" {
		s += "; " + st.Reason
	}
	return s
}

func closeHow(how string) string {
	if how == "reset" {
		return "RST to both sides"
	}
	return "FIN to both sides"
}

// printRebalanceTable prints per backend live, target and to close.
func printRebalanceTable(w io.Writer, st plane.RebalanceStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  BACKEND\tWEIGHT\tLIVE\tTARGET\tTO CLOSE\tCLOSED")
	aside := false
	for _, b := range st.Backends {
		t := target(b.Target)
		if !b.Eligible {
			t, aside = "-", true
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%d\t%d\n", b.ID, b.Weight, b.Live, t, b.ToClose, b.Closed)
	}
	tw.Flush()
	if aside {
		fmt.Fprintln(w, "  target -: the backend takes no new flows (down, drained, disabled or weight 0) and is left alone")
	}
}
