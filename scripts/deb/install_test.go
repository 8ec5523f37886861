// `make install` and `make uninstall`: what goes where, with which mode,
// and that an operator's config is never overwritten or removed.

package deb

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// makeIn runs make in the repository root with args; bin is where the
// build goes (not the repository's bin/).
func makeIn(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-C", "../..", "--no-print-directory", "BIN=" + bin}, args...)...)
	cmd.Env = cleanMakeEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// cleanMakeEnv is the environment without an outer make's settings (its
// jobserver, its variables).
func cleanMakeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MAKELEVEL" && k != "MFLAGS" {
			env = append(env, kv)
		}
	}
	return env
}

// wantFile checks that path exists with mode and, if contains is set,
// holds each of those strings.
func wantFile(t *testing.T, path string, mode fs.FileMode, contains ...string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Errorf("not installed: %v", err)
		return
	}
	if fi.Mode() != mode {
		t.Errorf("%s: mode %v, want %v", path, fi.Mode(), mode)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range contains {
		if !strings.Contains(string(data), c) {
			t.Errorf("%s lacks %q", path, c)
		}
	}
}

func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	bin, dest := t.TempDir(), t.TempDir()
	makeIn(t, bin, "install", "DESTDIR="+dest)
	sbin, unit := dest+"/usr/local/sbin/l4lb", dest+"/usr/local/lib/systemd/system/l4lb.service"
	conf, doc := dest+"/etc/l4lb/l4lb.toml", dest+"/usr/local/share/doc/l4lb"
	wantFile(t, sbin, 0o755)
	wantFile(t, unit, 0o644, "Type=notify", "ExecStart=/usr/local/sbin/l4lb run /etc/l4lb/l4lb.toml", "ExecReload=/bin/kill -HUP $MAINPID")
	wantFile(t, conf, 0o640, "[global]", "[[vip]]")
	wantFile(t, doc+"/README.md", 0o644, "make install")
	wantFile(t, doc+"/l4lb.toml", 0o644)
	wantFile(t, doc+"/examples/redis-affinity.toml", 0o644, "[[vip]]")
	wantFile(t, dest+"/usr/local/share/man/man8/l4lb.8", 0o644, ".TH \"L4LB\" 8")
	wantFile(t, dest+"/usr/local/share/man/man5/l4lb.toml.5", 0o644, ".TH \"L4LB.TOML\" 5")
	wantFile(t, dest+"/usr/local/share/bash-completion/completions/l4lb", 0o644, "complete -F _l4lb l4lb")
	wantFile(t, dest+"/usr/local/share/zsh/site-functions/_l4lb", 0o644, "#compdef l4lb")
	if out, err := exec.Command(sbin, "version").CombinedOutput(); err != nil || !strings.Contains(string(out), "l4lb ") {
		t.Errorf("installed l4lb version: %v\n%s", err, out)
	}

	// A second install keeps the operator's config, and says so.
	mine := []byte("# mine\n")
	if err := os.WriteFile(conf, mine, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := makeIn(t, bin, "install", "DESTDIR="+dest); !strings.Contains(out, "exists: kept") {
		t.Errorf("second install does not say it kept the config:\n%s", out)
	}
	if data, err := os.ReadFile(conf); err != nil || string(data) != string(mine) {
		t.Fatalf("second install changed the config: %q, %v", data, err)
	}

	// uninstall takes back what install put, and leaves the config.
	makeIn(t, bin, "uninstall", "DESTDIR="+dest)
	for _, p := range []string{sbin, unit, doc, dest + "/usr/local/share/man/man8/l4lb.8", dest + "/usr/local/share/bash-completion/completions/l4lb"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s still there after uninstall", p)
		}
	}
	if data, err := os.ReadFile(conf); err != nil || string(data) != string(mine) {
		t.Fatalf("uninstall touched the config: %q, %v", data, err)
	}
}

// With another PREFIX and SYSCONFDIR, the unit names the installed paths.
func TestMakeInstallPrefix(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	bin, dest := t.TempDir(), t.TempDir()
	makeIn(t, bin, "install", "DESTDIR="+dest, "PREFIX=/opt/l4lb", "SYSCONFDIR=/opt/l4lb/etc")
	wantFile(t, filepath.Join(dest, "opt/l4lb/sbin/l4lb"), 0o755)
	wantFile(t, filepath.Join(dest, "opt/l4lb/etc/l4lb/l4lb.toml"), 0o640)
	wantFile(t, filepath.Join(dest, "opt/l4lb/lib/systemd/system/l4lb.service"), 0o644,
		"ExecStartPre=/opt/l4lb/sbin/l4lb check /opt/l4lb/etc/l4lb/l4lb.toml",
		"ExecStart=/opt/l4lb/sbin/l4lb run /opt/l4lb/etc/l4lb/l4lb.toml",
		"Documentation=file:///opt/l4lb/share/doc/l4lb/README.md")
}
