// `l4lb check --diff` against a running l4lb: VIPs and backends added,
// removed and changed, as text and as JSON.

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/testutil"
)

var diffRunning = newConf(`drain_timeout = "3s"`).vip("a", ":80").backends(3, 7000).vip("b", ":81").addrs(7000, 0).String()

// diffNext: VIP b removed, VIP c added; in VIP a the algorithm changes,
// be0 goes, be1 is reweighted, be2 moves, be3 comes.
var diffNext = newConf(`drain_timeout = "3s"`).vip("a", ":80", `algorithm = "least_conn"`).
	named("be1", 1, 7000, `weight = 50`).backend(`name = "be2"`, `address = "198.18.1.23:7000"`).named("be3", 3, 7000).
	vip("c", ":82").addrs(7000, 3).String()

func TestCheckDiffAgainstRunningDaemon(t *testing.T) {
	tp := testutil.NewTopology(t, 0)
	lb := startLB(t, tp, diffRunning)
	sock := lb.sock
	next := filepath.Join(t.TempDir(), "next.toml")
	if err := os.WriteFile(next, []byte(strings.ReplaceAll(diffNext, "@ADMIN@", sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	// check runs l4lb check in the balancer's namespace and returns its
	// stdout and stderr.
	check := func(want int, args ...string) (string, string) {
		t.Helper()
		cmd := tp.LB.Command(append([]string{mustBin(t), "check"}, args...)...)
		var errb strings.Builder
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if code := exitCode(err); code != want {
			t.Fatalf("check %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, want, out, errb.String())
		}
		return string(out), errb.String()
	}

	// The socket from the file's admin_socket, and from --socket.
	for _, args := range [][]string{{"--config", next, "--diff"}, {next, "--diff", "--socket", sock}} {
		out, _ := check(0, args...)
		for _, want := range []string{
			"next.toml: ok, 2 VIPs",
			"a reload of the l4lb on " + sock + " (pid ",
			`~ vip "a" tcp/198.18.2.10:80`,
			"    ~ algorithm: round_robin -> least_conn (new connections only)",
			`    ~ backend "be1" 198.18.1.12:7000: weight 100 -> 50 (new connections only)`,
			`    ~ backend "be2" 198.18.1.23:7000: address 198.18.1.13:7000 -> 198.18.1.23:7000 (new connections only; a new backend to l4lb`,
			`    + backend "be3" 198.18.1.14:7000 weight 100 (new connections only)`,
			`    - backend "be0" 198.18.1.11:7000 (no new connections; its established connections continue until they end)`,
			`+ vip "c" tcp/198.18.2.10:82: proxy, round_robin, 1 backend; starts`,
			`- vip "b" tcp/198.18.2.10:81: stops accepting; its connections have 3s (drain_timeout) to finish, then are reset`,
			"reload: 1 VIP to add, 1 to remove, 1 to change\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("check %v lacks %q:\n%s", args, want, out)
			}
		}
	}

	var rep struct {
		Changed bool `json:"changed"`
		PID     int  `json:"pid"`
		config.Changes
	}
	js, _ := check(0, next, "--diff", "--json")
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Changed || rep.PID != lb.cmd.Process.Pid || len(rep.VIPs) != 3 || rep.VIPs[0].Name != "a" || len(rep.VIPs[0].Members) != 4 ||
		rep.VIPs[1].Op != config.OpAdd || rep.VIPs[2].Op != config.OpRemove || rep.VIPs[0].Members[3].Op != config.OpRemove {
		t.Errorf("--json: %+v", rep)
	}

	// The running file itself: nothing to change.
	if out, _ := check(0, lb.cfg, "--diff"); !strings.Contains(out, "with this file:\nno changes\n") {
		t.Errorf("the running file:\n%s", out)
	}
	// No l4lb on the socket, and a file that does not validate.
	if _, out := check(1, next, "--diff", "--socket", sock+".none"); !strings.Contains(out, "no l4lb answers on "+sock+".none") {
		t.Errorf("no daemon:\n%s", out)
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("[[vip]]\nname = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, out := check(1, bad, "--diff", "--socket", sock); !strings.Contains(out, "bad.toml:2") {
		t.Errorf("invalid file:\n%s", out)
	}
}

// exitCode is a command's exit status (0 when err is nil).
func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestCheckAndDiffWarnAlike (D14): check and check --diff print the same
// warnings, each with its line: the file's own (idle_timeout below
// keepalive) and a setting only a restart applies (pipe_size, in
// [global], once "FILE:?:").
func TestCheckAndDiffWarnAlike(t *testing.T) {
	tp := testutil.NewTopology(t, 0)
	lb := startLB(t, tp, diffRunning)
	sock := lb.sock
	next := filepath.Join(t.TempDir(), "next.toml")
	src := strings.Replace(strings.ReplaceAll(diffRunning, "@ADMIN@", sock), "drain_timeout", "pipe_size = 2097152\ndrain_timeout", 1)
	src = strings.Replace(src, `name = "b"`, "name = \"b\"\nidle_timeout = \"30s\"\nkeepalive = \"1m\"", 1)
	if err := os.WriteFile(next, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	warnings := func(args ...string) (lines []string, summary string) {
		t.Helper()
		cmd := tp.LB.Command(append([]string{mustBin(t), "check", next}, args...)...)
		var errb strings.Builder
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("check %v: %v\n%s%s", args, err, out, errb.String())
		}
		for _, l := range strings.Split(errb.String(), "\n") {
			if strings.HasPrefix(l, "warning: ") {
				lines = append(lines, l)
			}
		}
		summary, _, _ = strings.Cut(string(out), "\n")
		return lines, summary
	}
	plain, plainSum := warnings()
	diff, diffSum := warnings("--diff")
	want := []string{
		"warning: " + next + `:22: vip "b": vip[1].idle_timeout: idle_timeout 30s closes a quiet connection`,
		"warning: " + next + ":4: global.pipe_size: differs from the running l4lb's",
	}
	for _, got := range [][]string{plain, diff} {
		if len(got) != len(want) {
			t.Fatalf("check: %q\ncheck --diff: %q\nwant %d warnings each", plain, diff, len(want))
		}
		for i := range want {
			if !strings.HasPrefix(got[i], want[i]) {
				t.Errorf("warning %q, want prefix %q", got[i], want[i])
			}
		}
	}
	if plainSum != diffSum || plainSum != next+": ok, 2 VIPs, 2 warnings" {
		t.Errorf("summaries %q and %q", plainSum, diffSum)
	}
}
