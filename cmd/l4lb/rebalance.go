// `l4lb rebalance VIP`: move long-lived connections off the backends above
// their share, through the running l4lb's admin API.

package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/report"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/reconcile"
)

const rebalanceHelp = `After a backend joins (or comes back), long-lived connections stay where
they were: only new ones go to it. Rebalance closes connections on the
backends above their share, rebalance_rate a second (per VIP, default 10;
--rate N overrides it, 1 to 10000), until every backend is within 10% of
its share (or one connection), so that clients reconnect to the others
gradually instead of all at once. It prints the plan (per backend: weight,
live, target, to close) and returns; --wait follows it to the end (exit 0
when balanced, 1 when it stopped short); --dry-run prints what it would
close now and closes nothing; --stop stops it.

Shares: the live connections of the backends that take new flows, split by
the weights new flows see (slow start included). A drained, disabled, down
or weight 0 backend is left alone (its connections are not closed) and is
no destination.

How a connection is closed: what it had in flight is written on, then each
side gets a FIN: the client reads an orderly end of file, so does the
backend, and nobody is reset. Bytes that arrive afterwards are dropped, and
the connection ends when both peers have closed, or at most idle_timeout
(10s if less) after the close began. --reset sends an RST to both sides
instead. The backend's LIVE count drops when the close begins. A client's
affinity pin to the backend is dropped, so its reconnection is balanced
anew. Idle connections go first (no byte either way for a second), then
the oldest: a client that reconnects becomes the youngest, so no connection
is closed twice while an older one of its backend is left.

Algorithms: least_conn (and least_time, between backends equally near)
sends each reconnecting client to the backend below its share, so a
rebalance closes what it planned; p2c mostly does; round_robin and random
spread reconnections by weight, not load, so only the new backend's share
of them lands there and a rebalance closes about that many times more.
source_hash and maglev send a client back to the backend its address
hashes to: only clients whose hash moved (about 1/N after a backend joins)
can move. A rebalance stops by itself, saying why, when 20 closes (or one
tick's worth, a tenth of the rate, when more) and 5s pass without a closed
client landing on a backend below its share; it closes nothing more while
it waits.

Rounds: the plan is closed at the rate, then the rebalance waits for the
closed clients to reconnect (the live connections back to what they were,
or 5s) before it judges the balance and plans a next round if needed; it
stops too after a round whose clients did not come back and moved nothing.
Each round closes at most its plan; planned counts every round's.

It ends when balanced; on --stop; when a reload removes the VIP or sets its
rebalance_rate to 0 (which also refuses new ones); at shutdown. A second
rebalance of a VIP while one runs is refused. A running one keeps its rate;
each round is planned from the backends as they are then, so backends that
join, leave or change weight meanwhile count from the next round. l4lb status shows the running or last
one under its VIP. Not for UDP or xdp VIPs (refused with the reason): a UDP
session is balanced anew once it ends after session_timeout; in xdp mode
the kernel forwards the flows and l4lb holds no connection to close.
`

// cmdRebalance starts, follows or stops a VIP's rebalance.
func cmdRebalance(args []string, stdout, stderr io.Writer) int {
	f := newFlags("rebalance", stdout, stderr)
	socket := socketFlags(f)
	rate := f.Int("rate", 0, "connections closed per second, 1..10000 (default: the VIP's rebalance_rate)")
	reset := f.Bool("reset", false, "end connections with an RST to both sides instead of a FIN")
	wait := f.Bool("wait", false, "follow the progress until the rebalance ends; exit 1 if it stopped short")
	dryRun := f.Bool("dry-run", false, "print what a rebalance would close now; close nothing")
	stop := f.Bool("stop", false, "stop the VIP's running rebalance")
	asJSON := f.Bool("json", false, "print the API's JSON answer (with --wait: the last one)")
	if code, ok := f.parse(args); !ok {
		return code
	}
	if len(f.args) != 1 {
		f.usageError("want one VIP name")
		return 2
	}
	if *stop && (*dryRun || *rate != 0 || *reset) || *dryRun && (*rate != 0 || *reset || *wait) {
		f.usageError("--stop and --dry-run take no other action flag")
		return 2
	}
	if err := reconcile.CheckRebalanceRate(*rate); err != nil {
		f.usageError("--" + err.Error())
		return 2
	}
	path, ok := socket()
	if !ok {
		return 1
	}
	c := admin.Client{Socket: path}
	method, req := "POST", any(admin.RebalanceRequest{Rate: *rate, Reset: *reset, Operator: os.Getenv("SUDO_USER")})
	switch {
	case *stop:
		method, req = "DELETE", nil
	case *dryRun:
		method, req = "GET", nil
	}
	var st plane.RebalanceStatus
	body, err := c.Do(context.Background(), method, admin.RebalancePath(f.args[0]), req, &st)
	if err != nil {
		fmt.Fprintln(stderr, "l4lb rebalance:", err)
		return 1
	}
	followed := *wait && st.Running()
	if followed {
		if body, st, err = report.FollowRebalance(c, st, stdout, !*asJSON); err != nil {
			fmt.Fprintln(stderr, "l4lb rebalance:", err)
			return 1
		}
	}
	switch {
	case *asJSON:
		stdout.Write(body)
	case method != "POST":
		report.RebalanceState(stdout, st)
	case followed:
		report.RebalanceEnd(stdout, st)
	default:
		report.RebalancePlan(stdout, st)
	}
	if *wait && st.State != plane.RebalanceDone {
		return 1
	}
	return 0
}
