// `make deb`: the package builds, passes lintian, installs into a
// throwaway root (dpkg --root: its own database, maintainer scripts run
// chrooted there), runs, upgrades over itself keeping the operator's
// config, and is removed (config kept) and purged (config gone).

package deb

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
)

func TestDebPackage(t *testing.T) {
	testutil.RequirePriv(t, "dpkg --root chroots into the throwaway root to run the maintainer scripts")
	testutil.RequireTool(t, "dpkg", "dpkg-deb", "lintian", "man", "make")
	dir := t.TempDir()
	deb := buildDeb(t, dir, "0.0~test1")
	if filepath.Base(deb) != "l4lb_0.0~test1_amd64.deb" {
		t.Fatalf("make deb made %s", deb)
	}
	lintianClean(t, deb)
	scriptsStartNothing(t, deb)

	root := throwawayRoot(t, filepath.Join(dir, "root"))
	dpkg := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("dpkg", append([]string{"--root=" + root, "--force-not-root"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg %v: %v\n%s", args, err, out)
		}
		// A maintainer script that fails inside set -e stops dpkg; one
		// that complains and goes on shows here.
		if m := regexp.MustCompile(`(?m)^.*l4lb\.(preinst|postinst|prerm|postrm): .*$`).FindString(string(out)); m != "" {
			t.Errorf("dpkg %v: a maintainer script complains: %s", args, m)
		}
		return string(out)
	}
	status := func() string {
		out, _ := exec.Command("dpkg-query", "--admindir="+root+"/var/lib/dpkg", "-W", "-f", "${Status} ${Version}", "l4lb").CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	conf := filepath.Join(root, "etc/l4lb/l4lb.toml")

	// Install: the files in their places, and nothing started or enabled.
	dpkg("-i", deb)
	if s := status(); s != "install ok installed 0.0~test1" {
		t.Fatalf("after install: %q", s)
	}
	for _, p := range []string{"usr/sbin/l4lb", "lib/systemd/system/l4lb.service", "etc/l4lb/l4lb.toml",
		"usr/share/man/man8/l4lb.8.gz", "usr/share/man/man5/l4lb.toml.5.gz",
		"usr/share/bash-completion/completions/l4lb", "usr/share/zsh/vendor-completions/_l4lb",
		"usr/share/doc/l4lb/README.md", "usr/share/doc/l4lb/docs/configuration.md", "usr/share/doc/l4lb/copyright",
		"usr/share/doc/l4lb/examples/postgres-primary-replicas.toml", "usr/share/doc/l4lb/contrib/l4lb.json"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	if links, _ := filepath.Glob(filepath.Join(root, "etc/systemd/system/*/l4lb.service")); len(links) > 0 {
		t.Errorf("installing enabled the service: %v", links)
	}
	wantFile(t, filepath.Join(root, "lib/systemd/system/l4lb.service"), 0o644,
		"ExecStart=/usr/sbin/l4lb run /etc/l4lb/l4lb.toml", "Documentation=file:///usr/share/doc/l4lb/README.md")
	if conffiles, _ := os.ReadFile(filepath.Join(root, "var/lib/dpkg/info/l4lb.conffiles")); strings.TrimSpace(string(conffiles)) != "/etc/l4lb/l4lb.toml" {
		t.Errorf("conffiles: %q", conffiles)
	}
	bin := filepath.Join(root, "usr/sbin/l4lb")
	if out, err := exec.Command(bin, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "l4lb ") {
		t.Errorf("installed l4lb version: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "check", conf).CombinedOutput(); err != nil || !strings.Contains(string(out), conf+": ok,") {
		t.Errorf("installed l4lb check on the shipped config: %v\n%s", err, out)
	}
	for _, page := range []string{"man8/l4lb.8.gz", "man5/l4lb.toml.5.gz"} {
		cmd := exec.Command("man", "--warnings", "-l", filepath.Join(root, "usr/share/man", page))
		cmd.Env = append(os.Environ(), "MANPAGER=cat", "PAGER=cat", "MANWIDTH=80")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if out, err := cmd.Output(); err != nil || stderr.Len() > 0 || !strings.Contains(string(out), "l4lb") {
			t.Errorf("man -l %s: %v\n%s", page, err, stderr.String())
		}
	}
	if out, err := exec.Command("bash", "--norc", "-c", "source "+filepath.Join(root, "usr/share/bash-completion/completions/l4lb")+" && complete -p l4lb").CombinedOutput(); err != nil || !strings.Contains(string(out), "-F _l4lb l4lb") {
		t.Errorf("the installed bash completion: %v\n%s", err, out)
	}

	// The operator changes the config; reinstalling the same package and
	// upgrading to a newer one keep the change, with no prompt and no
	// .dpkg-dist copy beside it (the shipped file did not change).
	mine := "\n# changed by the operator\n"
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(mine)
	f.Close()
	dpkg("-i", deb)
	deb2 := relabel(t, deb, filepath.Join(dir, "l4lb_0.0~test2_amd64.deb"), "0.0~test2")
	dpkg("-i", deb2)
	if s := status(); s != "install ok installed 0.0~test2" {
		t.Fatalf("after the upgrade: %q", s)
	}
	if data, err := os.ReadFile(conf); err != nil || !strings.HasSuffix(string(data), mine) {
		t.Fatalf("the upgrade lost the operator's change to the config: %v", err)
	}
	if extra, _ := filepath.Glob(conf + ".dpkg-*"); len(extra) > 0 {
		t.Errorf("the upgrade left %v", extra)
	}

	// Remove: the program goes, the config stays.
	dpkg("-r", "l4lb")
	if s := status(); s != "deinstall ok config-files 0.0~test2" {
		t.Errorf("after remove: %q", s)
	}
	if _, err := os.Stat(bin); err == nil {
		t.Error("remove left /usr/sbin/l4lb")
	}
	if data, err := os.ReadFile(conf); err != nil || !strings.HasSuffix(string(data), mine) {
		t.Errorf("remove did not keep the config: %v", err)
	}

	// Purge: the config and its directory go too.
	dpkg("-P", "l4lb")
	if _, err := os.Stat(filepath.Dir(conf)); !os.IsNotExist(err) {
		t.Errorf("purge left /etc/l4lb: %v", err)
	}
	if s := status(); strings.Contains(s, "installed") || strings.Contains(s, "config-files") {
		t.Errorf("after purge: %q", s)
	}
}

// buildDeb runs `make deb` with DEB_VERSION version into dir.
func buildDeb(t *testing.T, dir, version string) string {
	t.Helper()
	cmd := exec.Command("make", "-C", "../..", "--no-print-directory", "deb", "BIN="+dir)
	cmd.Env = append(cleanMakeEnv(), "DEB_VERSION="+version)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make deb: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// lintianClean runs lintian on deb: no error or warning, and the tags it
// overrides are those scripts/deb/lintian-overrides explains.
func lintianClean(t *testing.T, deb string) {
	t.Helper()
	out, _ := exec.Command("lintian", "--show-overrides", "--tag-display-limit", "0", deb).CombinedOutput()
	var overridden []string
	for _, l := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(l, "E: "), strings.HasPrefix(l, "W: "):
			t.Errorf("lintian: %s", l)
		case strings.HasPrefix(l, "O: "):
			overridden = append(overridden, strings.TrimPrefix(l, "O: "))
		}
	}
	explained, err := os.ReadFile("../../scripts/deb/lintian-overrides")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range overridden {
		if !strings.Contains(string(explained), o) {
			t.Errorf("lintian override %q is not in scripts/deb/lintian-overrides", o)
		}
	}
	if len(overridden) == 0 {
		t.Errorf("lintian showed no override: did it run?\n%s", out)
	}
}

// scriptsStartNothing: no maintainer script starts or enables the unit.
func scriptsStartNothing(t *testing.T, deb string) {
	t.Helper()
	ctl := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "--control", deb, ctl).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --control: %v\n%s", err, out)
	}
	starts := regexp.MustCompile(`(?m)^[^#]*\b(start|restart|enable|--now)\b`)
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		data, err := os.ReadFile(filepath.Join(ctl, s))
		if err != nil {
			t.Fatal(err)
		}
		if m := starts.FindString(string(data)); m != "" {
			t.Errorf("%s starts or enables the service: %q", s, m)
		}
	}
}

// throwawayRoot makes an empty dpkg database under root and what the
// maintainer scripts need once dpkg chroots there: /bin/sh with its
// libraries, and /dev/null.
func throwawayRoot(t *testing.T, root string) string {
	t.Helper()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "bin", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	copyInto(t, sh, filepath.Join(root, "bin/sh"))
	out, err := exec.Command("ldd", sh).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", sh, err)
	}
	for _, lib := range regexp.MustCompile(`/\S+`).FindAllString(string(out), -1) {
		copyInto(t, lib, filepath.Join(root, lib))
	}
	if err := unix.Mknod(filepath.Join(root, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	return root
}

func copyInto(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// relabel repacks deb as version: the same files, a newer version, for
// an upgrade without a second build.
func relabel(t *testing.T, deb, out, version string) string {
	t.Helper()
	tree := filepath.Join(t.TempDir(), "tree")
	if b, err := exec.Command("dpkg-deb", "--raw-extract", deb, tree).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -R: %v\n%s", err, b)
	}
	ctl := filepath.Join(tree, "DEBIAN/control")
	data, err := os.ReadFile(ctl)
	if err != nil {
		t.Fatal(err)
	}
	data = regexp.MustCompile(`(?m)^Version: .*$`).ReplaceAll(data, []byte("Version: "+version))
	if err := os.WriteFile(ctl, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", tree, out).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, b)
	}
	return out
}
