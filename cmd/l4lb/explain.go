// `l4lb explain VIP CLIENT_IP[:PORT]`: which backend a client's flow has
// or would get on a running l4lb, and why.

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/report"
	"github.com/l4lb/l4lb/l4/plane"
)

const explainHelp = `Asks the running l4lb which backend a flow from CLIENT_IP (and PORT, when
given) to the VIP has, or a new one would get, and why. It answers in the
order the data plane decides:

  pinned      what the client's flows already hold: an established TCP
              connection through the proxy from that address and port, the
              client address's affinity pin (affinity_timeout), a UDP
              session (per address and port), or, for xdp VIPs, the XDP
              program's conntrack entry for the 5-tuple (read from the map;
              a TCP SYN from that port would take the Maglev slot instead).
              A pin whose backend is down, disabled, at weight 0 or removed
              is ignored and moves; a drain keeps pins.
  algorithm   the VIP's algorithm over its current snapshot: the Maglev hash,
              slot, table size and generation (for xdp VIPs the slot is read
              from the program's table in the map); the source_hash ring
              point; the least_conn or least_time scores; round_robin's next
              pick (it rotates, whoever connects next takes it); p2c and
              random: chance decides, with each backend's share.
  candidates  every backend, with why one that takes no new flows does not
              (down, drained, disabled, weight 0, removed).

With hash_key src_ip_port or 5tuple (the xdp default), the answer depends on
the client port: without one, explain says so instead of guessing. Asking
changes nothing: no flow is counted, no rotation advances, no pin, session
or conntrack entry is created or refreshed. --json prints the API's answer
(GET /vips/{vip}/explain?client=IP[:PORT]).
`

// cmdExplain asks the running l4lb to explain a client's flow on a VIP.
func cmdExplain(args []string, stdout, stderr io.Writer) int {
	f := newFlags("explain", stdout, stderr)
	socket := socketFlags(f)
	asJSON := f.Bool("json", false, "print the API's JSON answer")
	if code, ok := f.parse(args); !ok {
		return code
	}
	if len(f.args) != 2 {
		f.usageError("want a VIP name and a client address (IP or IP:PORT)")
		return 2
	}
	path, ok := socket()
	if !ok {
		return 1
	}
	var e plane.Explanation
	body, err := admin.Client{Socket: path}.Do(context.Background(), "GET", admin.ExplainPath(f.args[0], f.args[1]), nil, &e)
	if err != nil {
		fmt.Fprintln(stderr, "l4lb explain:", err)
		return 1
	}
	if *asJSON {
		stdout.Write(body)
		return 0
	}
	report.Explanation(stdout, e)
	return 0
}
