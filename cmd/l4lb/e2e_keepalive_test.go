// Keepalive on both of a proxied connection's sockets, as the daemon sets
// it from the `keepalive` key, read from the kernel with ss.

package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

var keepaliveVIP = newConf().vip("ka", ":80", `keepalive = "30s"`).health(`type = "none"`).backends(1, 7000).String()

// keepaliveTimer matches ss -o's keepalive timer: seconds to the next
// probe (a fresh keepalive socket counts down from its idle time).
var keepaliveTimer = regexp.MustCompile(`timer:\(keepalive,(\d+)sec,\d+\)`)

// TestKeepAliveBothSides: with keepalive = "30s", the balancer's socket to
// the backend (set once the connection has lived keepAliveAfter) and its
// socket to the client (inherited from the listener) both run the kernel's
// keepalive timer at 30s idle, not the 60s default nor off.
func TestKeepAliveBothSides(t *testing.T) {
	testutil.RequireTool(t, "ss")
	tp := testutil.NewTopology(t, 1)
	namedEcho(t, tp, 0, 7000)
	startLB(t, tp, keepaliveVIP)
	c := mustDialVIP(t, tp, 80)
	c.SetDeadline(time.Time{})

	sides := map[string]string{"backend": " 198.18.1.11:7000", "client": "198.18.2.10:80 "}
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ss -tno in the balancer's namespace:\n%s", last)
		}
	})
	testutil.Eventually(t, 5*time.Second, "keepalive timers on both sockets", func() bool {
		last = tp.LB.MustExec(t, "ss", "-tnoH", "state", "established")
		for _, sel := range sides {
			if !keepaliveOn(last, sel) {
				return false
			}
		}
		return true
	})
	for side, sel := range sides {
		for _, line := range strings.Split(last, "\n") {
			if !strings.Contains(line, sel) {
				continue
			}
			secs, _ := strconv.Atoi(keepaliveTimer.FindStringSubmatch(line)[1])
			if secs < 20 || secs > 30 {
				t.Errorf("%s socket: keepalive timer at %ds, want up to the configured 30s: %s", side, secs, line)
			}
		}
	}
	if err := c.echo("still here"); err != nil {
		t.Fatal(err)
	}
}

// keepaliveOn reports whether the ss line containing sel shows a keepalive
// timer.
func keepaliveOn(ss, sel string) bool {
	for _, line := range strings.Split(ss, "\n") {
		if strings.Contains(line, sel) {
			return keepaliveTimer.MatchString(line)
		}
	}
	return false
}
