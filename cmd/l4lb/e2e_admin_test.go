// The run-time verbs against a running daemon: drain, enable, disable,
// reload, and the admin API's endpoints.

package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// dialBackend dials until a connection lands on backend want.
func dialBackend(t *testing.T, tp *testutil.Topology, port int, want string) *clientConn {
	t.Helper()
	for range 50 {
		c := mustDialVIP(t, tp, port)
		if c.backend == want {
			return c
		}
		c.Close()
	}
	t.Fatalf("no connection reached %s", want)
	return nil
}

func TestDrainEnableDisable(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	lb := startLB(t, tp, vipA)
	onlyBe1 := func(when string) {
		t.Helper()
		if seen := backendsSeen(t, tp, 80, 12); seen["be0"] != 0 || seen["be1"] != 12 {
			t.Fatalf("%s: new connections went to %v, want be1 only", when, seen)
		}
	}
	held := dialBackend(t, tp, 80, "be0")

	// Drain: new connections avoid be0, the established one keeps flowing.
	if out := lb.verb(t, "drain", "--reason", "kernel upgrade", "a", "be0"); !strings.Contains(out, "be0 (198.18.1.11:7000) drained") || !strings.Contains(out, "1 established continue") {
		t.Fatalf("drain said:\n%s", out)
	}
	onlyBe1("drained")
	if err := held.echo("still here"); err != nil {
		t.Fatalf("the established connection to a drained backend: %v", err)
	}
	st := lb.status(t)
	b := st.VIPs[0].Backends[0]
	if b.ID != "be0" || b.Override != "drain" || b.OverrideBy != "root: kernel upgrade" || time.Since(b.OverrideSince) > time.Minute {
		t.Fatalf("status of the drained backend: %+v", b)
	}
	if out := lb.verb(t, "status"); !strings.Contains(out, "/DRAIN") || !strings.Contains(out, "drain by root: kernel upgrade") {
		t.Fatalf("status text:\n%s", out)
	}

	// A reload of the unchanged file keeps the drain.
	if out := lb.verb(t, "reload"); !strings.Contains(out, "reload applied: 1 VIP\n") {
		t.Fatalf("reload said:\n%s", out)
	}
	onlyBe1("drained, after a reload")

	// Enable, naming the backend by its address: be0 is back.
	if out := lb.verb(t, "enable", "a", "198.18.1.11:7000"); !strings.Contains(out, "enabled (was drain)") {
		t.Fatalf("enable said:\n%s", out)
	}
	if seen := backendsSeen(t, tp, 80, 12); seen["be0"] == 0 {
		t.Fatalf("after enable: %v, want be0 too", seen)
	}
	// Enabled again: nothing to change, and it says so (D34).
	if out := lb.verb(t, "enable", "a", "be0"); !strings.Contains(out, "be0 (198.18.1.11:7000) was not drained or disabled: nothing changed") {
		t.Fatalf("a second enable said:\n%s", out)
	}

	// Disable (by IP alone): the established connection is reset. First
	// wait for the connections the count above closed to end.
	testutil.Eventually(t, 5*time.Second, "be0's closed connections to end", func() bool { return lb.status(t).VIPs[0].Backends[0].LiveFlows == 1 })
	if out := lb.verb(t, "disable", "a", "198.18.1.11"); !strings.Contains(out, "disabled") || !strings.Contains(out, "1 established reset") {
		t.Fatalf("disable said:\n%s", out)
	}
	held.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := held.r.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the connection to a disabled backend: %v, want a reset (ECONNRESET)", err)
	}
	onlyBe1("disabled")

	// A reload that changes be0 (its weight) clears the override.
	lb.writeConfig(t, strings.Replace(lb.currentConfig(t), `address = "198.18.1.11:7000"`, "address = \"198.18.1.11:7000\"\n  weight = 50", 1))
	lb.verb(t, "reload")
	lb.waitLog(t, "backend override cleared")
	if b := lb.status(t).VIPs[0].Backends[0]; b.Override != "" {
		t.Fatalf("override after a reload that changed the backend: %+v", b)
	}

	// Mistakes get a message and exit 1 (2 for usage).
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"drain", "--socket", lb.sock, "nosuch", "be0"}, 1, `vip "nosuch": no such VIP`},
		{[]string{"drain", "--socket", lb.sock, "a", "be9"}, 1, `no such backend "be9" (backends: be0, be1)`},
		{[]string{"drain", "--socket", lb.sock, "a"}, 2, "want a VIP name and a backend"},
		{[]string{"enable", "--socket", filepath.Join(t.TempDir(), "none.sock"), "a", "be0"}, 1, "is l4lb running?"},
	} {
		_, errOut, code := l4lbCmd(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Fatalf("l4lb %v: exit %d\n%s\nwant exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}

	// A refused reload prints the problems and exits 1.
	lb.writeConfig(t, "[[vip]]\nname = 1\n")
	_, errOut, code := lb.run(t, "reload")
	if code != 1 || !strings.Contains(errOut, "reload refused") || !strings.Contains(errOut, "l4lb.toml:2") {
		t.Fatalf("reload of a bad file: exit %d\n%s", code, errOut)
	}
	if seen := backendsSeen(t, tp, 80, 6); seen["be0"]+seen["be1"] != 6 {
		t.Fatalf("after a refused reload: %v", seen)
	}
}

// TestAdminAPIEveryEndpoint calls every endpoint GET / lists on a real
// daemon.
func TestAdminAPIEveryEndpoint(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	lb := startLB(t, tp, vipA)
	c := admin.Client{Socket: lb.sock}
	ctx := context.Background()
	var list []struct{ Method, Path string }
	if _, err := c.Do(ctx, "GET", "/", nil, &list); err != nil || len(list) < 8 {
		t.Fatalf("GET /: %v %v", list, err)
	}
	for _, e := range list {
		if e.Path == "/upgrade" {
			continue // a real upgrade would replace the process this test holds: e2e_upgrade_test.go
		}
		path := strings.NewReplacer("{vip}", "a", "{backend}", "be1").Replace(e.Path)
		if strings.HasSuffix(path, "/explain") {
			path += "?client=" + tp.ClientIP.String()
		}
		if strings.HasSuffix(path, "/capture") {
			// Capture is xdp's (TestXDPCapture); a proxy VIP is refused
			// with a JSON error that says why.
			body, err := c.Do(ctx, e.Method, path, plane.CaptureRequest{Count: 1}, nil)
			if err == nil || !strings.Contains(err.Error(), "it is a proxy VIP") {
				t.Fatalf("%s %s on a proxy VIP: %v %s; want refused as a proxy VIP", e.Method, path, err, body)
			}
			continue
		}
		var in any // the run-time backend verbs want a body: add a backend, set its weight, remove it at once
		switch {
		case strings.HasSuffix(e.Path, "/backends"):
			in = admin.BackendAddRequest{Address: "198.18.1.99:7000", Name: "extra"}
		case strings.HasSuffix(e.Path, "/set"):
			in, path = admin.BackendSetRequest{Weight: new(int)}, admin.BackendPath("a", "extra", "set")
		case strings.HasSuffix(e.Path, "/remove"):
			in, path = admin.BackendRemoveRequest{Timeout: "0s"}, admin.BackendPath("a", "extra", "remove")
		}
		body, err := c.Do(ctx, e.Method, path, in, nil)
		if err != nil || len(body) == 0 {
			t.Fatalf("%s %s: %v %s", e.Method, path, err, body)
		}
	}
}

// TestXDPDrainAndDisable: on an xdp VIP a drain keeps the established
// flow forwarding through the BPF conntrack while new flows avoid the
// backend; a disable purges the flow, so it is reset.
func TestXDPDrainAndDisable(t *testing.T) {
	n := newXDPNet(t, 3)
	lb := startLBIn(t, n.LB.NS, n.config("", "", 0, 1, 2))
	c, r, victim := n.askTCPConn(t, n.vip4)
	echo(t, c, r, []byte("before"))
	if out, errOut, code := lb.run(t, "drain", "web4", victim); code != 0 || !strings.Contains(out, "drained") {
		t.Fatalf("drain: exit %d\n%s%s", code, out, errOut)
	}
	echo(t, c, r, []byte("after the drain, through the conntrack"))
	for range 20 {
		if name := n.AskTCP(t, n.vip4); name == victim {
			t.Fatalf("a new flow went to %s, drained", victim)
		}
	}
	if out, errOut, code := lb.run(t, "disable", "web4", victim); code != 0 || !strings.Contains(out, "1 established reset") {
		t.Fatalf("disable: exit %d\n%s%s", code, out, errOut)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("x")); err == nil {
		_, err = r.ReadByte()
		if err == nil || !strings.Contains(err.Error(), "reset") {
			t.Fatalf("the disabled backend's flow: %v, want a reset", err)
		}
	}
}

// TestRestartOnlySettingStaysPending: a reload that changes a setting
// only a restart applies says so; the config in force (status
// --show-config) keeps the running value, and check --diff with the same
// file still reports the change as waiting for a restart.
func TestRestartOnlySettingStaysPending(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	lb := startLB(t, tp, vipA)
	lb.writeConfig(t, strings.Replace(lb.currentConfig(t), "drain_timeout = \"3s\"", "drain_timeout = \"3s\"\npipe_size = 65536", 1))
	out, errOut, code := lb.run(t, "reload")
	if code != 0 || !strings.Contains(out, "global.pipe_size changed: takes effect only after a restart") {
		t.Fatalf("reload: exit %d\n%s%s", code, out, errOut)
	}
	out, _, _ = lb.run(t, "status", "--show-config")
	if !strings.Contains(out, "pipe_size = 1048576") {
		t.Fatalf("the config in force shows a pipe_size the process does not use:\n%s", out)
	}
	out, errOut, code = lb.run(t, "check", "--diff", lb.cfg)
	if code != 0 || !strings.Contains(out, "pipe_size") || !strings.Contains(out, "restart") {
		t.Fatalf("check --diff after the reload: exit %d\n%s%s", code, out, errOut)
	}
}
