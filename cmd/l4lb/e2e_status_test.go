// `l4lb status`: the process, the last reload, and the config in force.

package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/testutil"
)

func TestStatusShowsProcessReloadAndConfig(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	lb := startLB(t, tp, vipA)
	status := func(args ...string) string {
		t.Helper()
		out, errOut, code := lb.run(t, "status", args...)
		if code != 0 {
			t.Fatalf("status %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}

	st := lb.status(t)
	if st.Process.PID != lb.cmd.Process.Pid || st.Process.GoVersion == "" || st.Process.Started.IsZero() || st.Process.LastReload != nil {
		t.Fatalf("process status %+v", st.Process)
	}
	if out := status(); !strings.Contains(out, "last reload: none since start") || !strings.Contains(out, "l4lb ") {
		t.Fatalf("text status:\n%s", out)
	}

	// --show-config and a bare --config print the running config, every
	// default resolved; it parses back to what the file says. The bare
	// --config (the old spelling: --config otherwise names a file) says
	// so on stderr (D26).
	if _, errOut, _ := lb.run(t, "status", "--config"); !strings.Contains(errOut, "--config without a FILE is the old spelling of --show-config") {
		t.Errorf("a bare --config says nothing about its two meanings: %q", errOut)
	}
	for _, flag := range []string{"--show-config", "--config"} {
		out := status(flag)
		running, err := config.Parse("running", []byte(out))
		if err != nil {
			t.Fatalf("status %s does not print a valid config: %v\n%s", flag, err, out)
		}
		if v := running.VIP("a"); v == nil || len(v.Backends) != 2 || !strings.Contains(out, `connect_timeout = "2s"`) {
			t.Fatalf("status %s:\n%s", flag, out)
		}
	}

	// --show-config --json is the same config as JSON, with its keys (D26).
	var js struct {
		Global struct {
			DrainTimeout string `json:"drain_timeout"`
		} `json:"global"`
		VIP []struct {
			Name    string           `json:"name"`
			Backend []map[string]any `json:"backend"`
		} `json:"vip"`
	}
	if out := status("--show-config", "--json"); json.Unmarshal([]byte(out), &js) != nil || js.Global.DrainTimeout != "3s" ||
		len(js.VIP) != 1 || js.VIP[0].Name != "a" || len(js.VIP[0].Backend) != 2 {
		t.Fatalf("status --show-config --json: %+v\n%s", js, out)
	}

	good := lb.currentConfig(t)
	if out := status(); !strings.Contains(out, "workers: ") || strings.Contains(out, "busy polling") {
		t.Fatalf("text status before busy_poll:\n%s", out)
	}
	lb.writeConfig(t, "[[vip]]\nname = 1\n")
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload refused")
	st = lb.status(t)
	if r := st.Process.LastReload; r == nil || r.OK || !strings.Contains(r.Error, "name: must be a string") {
		t.Fatalf("last reload after a bad file: %+v", r)
	}
	if out := status(); !strings.Contains(out, "REFUSED (running config kept)") {
		t.Fatalf("text status after a refused reload:\n%s", out)
	}

	// busy_poll takes effect on a reload, and status says so.
	lb.writeConfig(t, strings.Replace(good, `drain_timeout = "3s"`, "drain_timeout = \"3s\"\nbusy_poll = \"50us\"", 1))
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload applied")
	if st := lb.status(t); st.BusyPoll != 50*time.Microsecond {
		t.Fatalf("busy_poll after the reload: %v, want 50µs", st.BusyPoll)
	}
	if out := status(); !strings.Contains(out, "(busy polling 50µs)") {
		t.Fatalf("text status after busy_poll:\n%s", out)
	}
}
