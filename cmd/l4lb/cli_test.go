// The command line: positional paths, unexpected arguments, help, version,
// and check's host problems and warnings. In process, no privileges.

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/config"
)

// runCLI runs l4lb with args and returns its exit code and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// writeFile writes a file in a fresh directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const goodConfig = `[global]
admin_socket = "off"
[[vip]]
name = "a"
listen = "127.0.0.1:18400"
  [[vip.backend]]
  address = "127.0.0.1:18401"
`

func TestCLIArguments(t *testing.T) {
	good := writeFile(t, "good.toml", goodConfig)
	broken := writeFile(t, "broken.toml", "[[vip]]\nname = 1\n")
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{"check takes the file as its argument", []string{"check", broken}, 1, "", "broken.toml:2"},
		{"check with a good positional file", []string{"check", good}, 0, "good.toml: ok, 1 VIP, 0 warnings", ""},
		{"check --config and the same argument", []string{"check", "--config", good, good}, 0, "ok", ""},
		{"check --config and another file", []string{"check", "--config", good, broken}, 2, "", "two config files"},
		{"check two files", []string{"check", good, broken}, 2, "", "one config file"},
		{"check file then flag", []string{"check", broken, "--config", broken}, 1, "", "broken.toml:2"},
		{"run with an extra word", []string{"run", good, "now"}, 2, "", "one config file"},
		{"run a broken positional file", []string{"run", broken}, 1, "", "broken.toml:2"},
		{"status with a word", []string{"status", "now"}, 2, "", `unexpected argument "now"`},
		{"version with a word", []string{"version", "x"}, 2, "", "unexpected argument"},
		{"rebalance without a VIP", []string{"rebalance"}, 2, "", "want one VIP name"},
		{"rebalance two actions", []string{"rebalance", "--dry-run", "--wait", "a"}, 2, "", "take no other action flag"},
		// Refused before any daemon is asked: the range, and why (D27).
		{"rebalance rate too high", []string{"rebalance", "--rate", "20000", "a"}, 2, "",
			"--rate 20000 is out of range: a rebalance closes 1 to 10000 connections a second, the bound of rebalance_rate (0: the VIP's rebalance_rate), so that the clients it moves reconnect gradually"},
		{"rebalance rate negative", []string{"rebalance", "--rate", "-1", "a"}, 2, "", "--rate -1 is out of range: a rebalance closes 1 to 10000"},
		{"help rebalance", []string{"help", "rebalance"}, 0, "FIN", ""},
		{"unknown flag", []string{"check", "--nope"}, 2, "", "usage: l4lb check"},
		{"help run", []string{"help", "run"}, 0, "usage: l4lb run", ""},
		{"run --help", []string{"run", "--help"}, 0, "usage: l4lb run", ""},
		{"check -h", []string{"check", "-h"}, 0, "-config", ""},
		{"help nonsense", []string{"help", "nonsense"}, 2, "", "unknown command"},
		{"help", []string{"help"}, 0, "commands:", ""},
		{"version", []string{"version"}, 0, "go:      go1", ""},
		{"explain without a client", []string{"explain", "a"}, 2, "", "want a VIP name and a client address"},
		{"help explain", []string{"help", "explain"}, 0, "usage: l4lb explain", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(tc.args...)
			if code != tc.code || !strings.Contains(out, tc.inStdout) || !strings.Contains(errs, tc.inStderr) {
				t.Errorf("l4lb %v: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					tc.args, code, out, errs, tc.code, tc.inStdout, tc.inStderr)
			}
		})
	}
}

// TestRunLoadErrorsAsJSON: with --log-format json, why run cannot start
// (a config with problems, a missing file) is a JSON log line, with the
// problems as a list; without it, plain text.
func TestRunLoadErrorsAsJSON(t *testing.T) {
	broken := writeFile(t, "broken.toml", "[[vip]]\nname = 1\nlisten = \"nonsense\"\n")
	missing := filepath.Join(t.TempDir(), "missing.toml")
	for _, tc := range []struct {
		path, msg, field, want string
	}{
		{broken, "start failed: config invalid", "problems", "broken.toml:2"},
		{missing, "start failed", "error", "missing.toml"},
	} {
		code, out, errs := runCLI("run", "--log-format", "json", tc.path)
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if code != 1 || out != "" || len(lines) != 1 {
			t.Fatalf("run --log-format json %s: exit %d, stdout %q, stderr %q; want exit 1 and one line", tc.path, code, out, errs)
		}
		var line map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
			t.Fatalf("run --log-format json %s: stderr is not JSON (%v): %s", tc.path, err, errs)
		}
		got, _ := json.Marshal(line[tc.field])
		if line["level"] != "error" || line["msg"] != tc.msg || line["config"] != tc.path || !strings.Contains(string(got), tc.want) {
			t.Errorf("run --log-format json %s: %s; want level error, msg %q, config, %s naming %q", tc.path, errs, tc.msg, tc.field, tc.want)
		}
	}
	if code, _, errs := runCLI("run", broken); code != 1 || !strings.Contains(errs, "\n"+broken+":2: ") || strings.Contains(errs, "{") {
		t.Errorf("run without --log-format: exit %d, stderr %q; want the problems as plain lines", code, errs)
	}
}

func TestVersionNamesTheBuild(t *testing.T) {
	_, out, _ := runCLI("version")
	for _, want := range []string{"l4lb ", "commit:", "go:", "built:"} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
}

// An admin_socket that names the config file, or a directory, is refused
// by check and by run, and left in place.
func TestAdminSocketNeverReplacesAFile(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "l4lb.toml")
	emptyDir := filepath.Join(dir, "empty")
	if err := os.Mkdir(emptyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{cfgPath, emptyDir} {
		content := strings.Replace(goodConfig, `admin_socket = "off"`, `admin_socket = "`+target+`"`, 1)
		if err := os.WriteFile(cfgPath, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"check", "run"} {
			code, _, errs := runCLI(cmd, cfgPath)
			if code != 1 || !strings.Contains(errs, "not a socket") {
				t.Errorf("%s with admin_socket = %s: exit %d, %q", cmd, target, code, errs)
			}
		}
		if data, err := os.ReadFile(cfgPath); err != nil || string(data) != content {
			t.Fatalf("config file changed or gone: %v", err)
		}
		if fi, err := os.Stat(emptyDir); err != nil || !fi.IsDir() {
			t.Fatalf("directory removed: %v", err)
		}
	}
}

func TestCheckPrintsWarnings(t *testing.T) {
	src := strings.Replace(goodConfig, "address = \"127.0.0.1:18401\"", "address = \"127.0.0.1:18401\"\n  weight = 0", 1)
	src = strings.Replace(src, "127.0.0.1:18400", "198.18.254.254:18400", 1)
	code, out, errs := runCLI("check", writeFile(t, "w.toml", src))
	if code != 0 || !strings.Contains(out, "2 warnings") ||
		!strings.Contains(errs, "warning: ") || !strings.Contains(errs, "every backend has weight 0") ||
		!strings.Contains(errs, "no interface has 198.18.254.254") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
}

// The shipped systemd unit gives a drain the config allows the time it needs.
func TestSystemdUnitOutwaitsTheLongestDrain(t *testing.T) {
	data, err := os.ReadFile("../../scripts/l4lb.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		v, ok := strings.CutPrefix(line, "TimeoutStopSec=")
		if !ok {
			continue
		}
		d, err := time.ParseDuration(strings.Replace(v, "min", "m", 1))
		if err != nil {
			t.Fatalf("TimeoutStopSec=%s: %v", v, err)
		}
		if d <= config.MaxDrainTimeout {
			t.Fatalf("TimeoutStopSec %v is not longer than the largest drain_timeout %v", d, config.MaxDrainTimeout)
		}
		return
	}
	t.Fatal("the unit sets no TimeoutStopSec")
}

// An xdp VIP on an interface the host lacks: check warns, run refuses with
// the reason (and never falls back to a proxy).
func TestXDPMissingInterface(t *testing.T) {
	src := `[global]
admin_socket = "off"
[xdp]
interface = "veth0"
[[vip]]
name = "x"
listen = "198.18.0.20:53"
protocol = "udp"
mode = "xdp"
  [[vip.backend]]
  address = "198.18.1.21:53"
`
	src = strings.Replace(src, "veth0", "nope-xdp0", 1)
	path := writeFile(t, "xdp.toml", src)
	if code, _, errs := runCLI("check", path); code != 0 || !strings.Contains(errs, `this host has no interface "nope-xdp0"`) {
		t.Errorf("check: exit %d, %q", code, errs)
	}
	if os.Geteuid() != 0 {
		return // run needs root to get as far as the interface
	}
	if code, _, errs := runCLI("run", path); code != 1 || !strings.Contains(errs, `interface \"nope-xdp0\": no such interface`) {
		t.Errorf("run: exit %d, %q", code, errs)
	}
}

// Each command's help names every flag it takes, in its prose or usage
// line (`l4lb help NAME`), and `NAME --help` lists them with defaults.
func TestHelpNamesEveryFlag(t *testing.T) {
	flagsOf := map[string][]string{
		"run":        {"--config", "--log-format"},
		"check":      {"--config", "--diff", "--socket", "--json"},
		"status":     {"--socket", "--config", "--json", "--show-config", "--capabilities"},
		"xdp":        {"--config", "--socket", "--write", "--count", "--backend", "--rate", "--timeout"},
		"decap":      {"--iface", "--mode"},
		"version":    nil,
		"completion": nil,
		"drain":      {"--socket", "--config", "--reason", "--force", "--json"},
		"disable":    {"--socket", "--config", "--reason", "--force", "--json"},
		"enable":     {"--socket", "--config", "--reason", "--json"},
		"reload":     {"--socket", "--config", "--json"},
		"explain":    {"--socket", "--config", "--json"},
		"rebalance":  {"--socket", "--config", "--rate", "--reset", "--wait", "--dry-run", "--stop", "--json"},
		"upgrade":    {"--socket", "--config", "--binary", "--timeout", "--json"},
		"backend":    {"--socket", "--config", "--json", "--name", "--weight", "--max-conns", "--backup", "--reset", "--timeout", "--force"},
	}
	for _, c := range commands() {
		if c.name == "help" {
			continue
		}
		want, ok := flagsOf[c.name]
		if !ok {
			t.Errorf("command %q: list its flags in this test", c.name)
			continue
		}
		code, prose, _ := runCLI("help", c.name)
		if code != 0 || !strings.Contains(prose, "usage: l4lb "+c.name) {
			t.Errorf("help %s: exit %d\n%s", c.name, code, prose)
		}
		for _, fl := range want {
			if !strings.Contains(prose, fl) {
				t.Errorf("help %s does not mention %s:\n%s", c.name, fl, prose)
			}
		}
		if c.name == "decap" || c.name == "xdp" || c.name == "backend" {
			continue // verbs first: their --help is the prose
		}
		code, out, _ := runCLI(c.name, "--help")
		for _, fl := range want {
			if code != 0 || !strings.Contains(out, "\n  "+fl+"") {
				t.Errorf("%s --help: exit %d, flag list lacks %s:\n%s", c.name, code, fl, out)
			}
		}
	}
}

// check --json without --diff is a usage error; --diff with the admin
// socket off and no --socket says so.
func TestCheckDiffArguments(t *testing.T) {
	good := writeFile(t, "good.toml", goodConfig)
	if code, _, errs := runCLI("check", good, "--json"); code != 2 || !strings.Contains(errs, "--json goes with --diff") {
		t.Errorf("--json alone: exit %d, %q", code, errs)
	}
	if code, _, errs := runCLI("check", good, "--diff"); code != 1 || !strings.Contains(errs, `admin_socket = "off": give the running l4lb's --socket PATH`) {
		t.Errorf("--diff, socket off: exit %d, %q", code, errs)
	}
	sock := filepath.Join(t.TempDir(), "none.sock")
	if code, _, errs := runCLI("check", good, "--diff", "--socket", sock); code != 1 || !strings.Contains(errs, "no l4lb answers on "+sock) {
		t.Errorf("--diff, no daemon: exit %d, %q", code, errs)
	}
}

// TestCheckExitCodesAndMessages: `l4lb check` exits 0 on a valid file and
// 1 on an invalid or unreadable one, naming for each problem the file and
// line and the key's path (main only passes run's code to os.Exit).
func TestCheckExitCodesAndMessages(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	vip := func(lines string) string {
		return "[global]\nadmin_socket = \"off\"\n[[vip]]\nname = \"a\"\n" + lines + "  [[vip.backend]]\n  address = \"127.0.0.1:18401\"\n"
	}
	for _, tc := range []struct {
		name string
		path string
		code int
		want []string // in stdout for exit 0, else in stderr
	}{
		{"valid", file("ok.toml", vip("listen = \"127.0.0.1:18400\"\n")), 0, []string{"ok.toml: ok, 1 VIP, 0 warnings\n"}},
		{"bad value", file("value.toml", vip("listen = \"nonsense\"\n")), 1, []string{"value.toml:5:", "vip[0].listen", `"nonsense" is not ip:port`}},
		{"every problem", file("two.toml", vip("listen = \"127.0.0.1:18400\"\nretries = 99\nalgorithm = \"nope\"\n")), 1,
			[]string{"two.toml:6: ", "vip[0].retries: 99 is out of range", "two.toml:7: ", "vip[0].algorithm"}},
		{"unknown key", file("unknown.toml", vip("listen = \"127.0.0.1:18400\"\nbogus = 1\n")), 1, []string{"unknown.toml:6:", "vip[0].bogus: unknown key"}},
		{"syntax", file("syntax.toml", "[[vip]\nname = \"a\"\n"), 1, []string{"syntax.toml:2:"}},
		{"missing file", filepath.Join(dir, "none.toml"), 1, []string{"none.toml", "no such file"}},
		{"directory", dir, 1, []string{dir, "not a regular file"}},
		// A regular file whose read fails (EIO at offset 0), for root too.
		{"unreadable", "/proc/self/mem", 1, []string{"/proc/self/mem", "input/output error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI("check", tc.path)
			where := errs
			if tc.code == 0 {
				where = out
			}
			if code != tc.code {
				t.Fatalf("l4lb check %s: exit %d, want %d; stdout %q, stderr %q", tc.path, code, tc.code, out, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(where, w) {
					t.Errorf("l4lb check %s: %q lacks %q", tc.path, where, w)
				}
			}
		})
	}
}

// TestHelpTextTidy (D34): no help, usage or flag error text has a line
// ending in a space, or names a flag with one dash (the flag package's
// -reason): l4lb's flags are --reason everywhere.
func TestHelpTextTidy(t *testing.T) {
	singleDash := regexp.MustCompile(`(^|[\s(\[|])-[a-zA-Z]`)
	others := strings.NewReplacer("nginx -t", "", "sysctl -w", "", "l4lb -v", "") // not l4lb's flags, or its -v alias
	check := func(what, text string) {
		t.Helper()
		for _, line := range strings.Split(text, "\n") {
			if strings.TrimRight(line, " \t") != line {
				t.Errorf("%s: trailing space in %q", what, line)
			}
			if singleDash.MatchString(others.Replace(line)) {
				t.Errorf("%s: a flag with one dash in %q", what, line)
			}
		}
	}
	_, top, _ := runCLI("help")
	check("l4lb help", top)
	for _, c := range commands() {
		_, prose, _ := runCLI("help", c.name)
		check("help "+c.name, prose)
		if c.name == "help" {
			continue
		}
		_, out, errs := runCLI(c.name, "--help")
		check(c.name+" --help", out+errs)
		_, out, errs = runCLI(c.name, "--no-such-flag")
		check(c.name+" --no-such-flag", out+errs)
	}
	if _, _, errs := runCLI("drain", "--bogus"); !strings.Contains(errs, "l4lb drain: flag provided but not defined: --bogus\n") {
		t.Errorf("drain --bogus: %q", errs)
	}
}
