// The daemon's health-change log lines say why, for every kind of transition.

package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

var healthLogConfig = newConf(`log_format = "json"`).
	vip("web", ":80").health(`interval = "300ms"`, `timeout = "250ms"`, `rise = 2`).named("live", 0, 7000).named("late", 1, 7000).
	vip("expect", ":81").health(`type = "send_expect"`, `interval = "300ms"`, `timeout = "250ms"`, `send = "PING\n"`, `expect = "PONG"`).named("wrong", 0, 7000).
	vip("passive", ":82", `retries = 0`).health(`type = "none"`).named("gone", 1, 7001).String()

// healthChange is one "backend health changed" line.
type healthChange struct {
	VIP, Backend, From, To, Reason string
}

// healthChanges returns the daemon's health-change lines so far.
func healthChanges(t *testing.T, lb *lbProcess) []healthChange {
	t.Helper()
	var out []healthChange
	for _, line := range strings.Split(lb.log.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "backend health changed" {
			continue
		}
		s := func(k string) string { v, _ := m[k].(string); return v }
		out = append(out, healthChange{s("vip"), s("backend"), s("from"), s("to"), s("reason")})
	}
	return out
}

// waitChange waits for backend's transition to state and returns it.
func waitChange(t *testing.T, lb *lbProcess, backend, to string) healthChange {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, c := range healthChanges(t, lb) {
			if c.Backend == backend && c.To == to {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no transition of %s to %s in the log: %+v", backend, to, healthChanges(t, lb))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHealthChangeLogsSayWhy (D33): a check that passes, a refused
// connect, a wrong reply, a backend that comes back and a passive mark
// each log a reason, and the reason says what happened. Before, every
// transition to up logged an empty reason.
func TestHealthChangeLogsSayWhy(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	namedEcho(t, tp, 0, 7000) // writes "be0\n" first: not PONG
	lb := startLB(t, tp, healthLogConfig)

	want := []struct{ backend, to, reason string }{
		{"live", "up", "first check passed (connect "},
		{"late", "down", "connect refused"},
		{"wrong", "down", `reply "be0\n`},
	}
	for _, w := range want {
		if c := waitChange(t, lb, w.backend, w.to); !strings.Contains(c.Reason, w.reason) {
			t.Errorf("%s to %s: reason %q, want %q in it", w.backend, w.to, c.Reason, w.reason)
		}
	}
	namedEcho(t, tp, 1, 7000)
	if c := waitChange(t, lb, "late", "up"); !strings.HasPrefix(c.Reason, "2 checks passed in a row (connect ") {
		t.Errorf("late back up: reason %q", c.Reason)
	}
	if c, err := dialVIP(tp, 82); err == nil { // nothing listens on 7001: the proxy's connect is refused
		c.Close()
	}
	if c := waitChange(t, lb, "gone", "down"); !strings.HasPrefix(c.Reason, "passive: 1 failed connect within 10s") {
		t.Errorf("passive mark: reason %q", c.Reason)
	}
	for _, c := range healthChanges(t, lb) {
		if c.Reason == "" {
			t.Errorf("health change without a reason: %+v", c)
		}
	}
}
