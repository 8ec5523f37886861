package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/testutil"
)

const trustVIP = "[[vip]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\n[[vip.backend]]\naddress = \"127.0.0.1:9000\"\n"

// nobody is the uid of a user who must not be trusted.
const nobody = 65534

// TestLoadTrustedRefusesWritableFiles writes real files with each bad
// mode and owner and checks the message names the path, what was found
// and the fix.
func TestLoadTrustedRefusesWritableFiles(t *testing.T) {
	euid := os.Geteuid()
	tests := []struct {
		name     string
		fileMode os.FileMode
		fileUID  int // -1: leave (the test's euid)
		dirMode  os.FileMode
		dirUID   int
		asNobody bool // check as a daemon whose euid is nobody
		ok       bool
		want     []string // in the message; "FILE"/"DIR" stand for the paths
	}{
		{name: "0600 own", fileMode: 0o600, fileUID: -1, dirMode: 0o700, dirUID: -1, ok: true},
		{name: "0644 own", fileMode: 0o644, fileUID: -1, dirMode: 0o755, dirUID: -1, ok: true},
		{name: "0444 own", fileMode: 0o444, fileUID: -1, dirMode: 0o755, dirUID: -1, ok: true},
		{name: "group writable", fileMode: 0o664, fileUID: -1, dirMode: 0o700, dirUID: -1,
			want: []string{"FILE is writable by group (mode 0664", "fix: chmod go-w FILE"}},
		{name: "world writable", fileMode: 0o646, fileUID: -1, dirMode: 0o700, dirUID: -1,
			want: []string{"FILE is writable by others (mode 0646", "fix: chmod go-w FILE"}},
		{name: "0666", fileMode: 0o666, fileUID: -1, dirMode: 0o700, dirUID: -1,
			want: []string{"writable by group and others (mode 0666", "chmod go-w FILE"}},
		{name: "owned by nobody", fileMode: 0o644, fileUID: nobody, dirMode: 0o700, dirUID: -1,
			want: []string{"FILE is owned by nobody, not root (mode 0644, owner nobody", "fix: chown root FILE"}},
		{name: "dir world writable", fileMode: 0o644, fileUID: -1, dirMode: 0o777, dirUID: -1,
			want: []string{"directory DIR is writable by group and others (mode 0777", "fix: chmod go-w DIR"}},
		{name: "dir group writable", fileMode: 0o644, fileUID: -1, dirMode: 0o775, dirUID: -1,
			want: []string{"directory DIR is writable by group", "chmod go-w DIR"}},
		{name: "dir owned by nobody", fileMode: 0o644, fileUID: -1, dirMode: 0o755, dirUID: nobody,
			want: []string{"directory DIR is owned by nobody", "fix: chown root DIR"}},
		{name: "sticky dir owned by root", fileMode: 0o644, fileUID: -1, dirMode: 0o777 | os.ModeSticky, dirUID: 0, ok: euid == 0,
			want: []string{"directory DIR is owned by"}},
		{name: "sticky dir owned by nobody", fileMode: 0o644, fileUID: -1, dirMode: 0o777 | os.ModeSticky, dirUID: nobody,
			want: []string{"directory DIR is owned by nobody"}},
		// The daemon's own user may own the file and its directory, but
		// a sticky directory that others write must be root's.
		{name: "daemon user owns all", fileMode: 0o644, fileUID: nobody, dirMode: 0o755, dirUID: nobody, asNobody: true, ok: true},
		{name: "sticky dir owned by daemon user", fileMode: 0o644, fileUID: -1, dirMode: 0o777 | os.ModeSticky, dirUID: nobody, asNobody: true,
			want: []string{"directory DIR is writable by group and others (mode 1777, owner nobody", "fix: chmod go-w DIR"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fileUID >= 0 || tc.dirUID >= 0 {
				testutil.RequirePriv(t, "chown to another user")
			}
			dir := filepath.Join(t.TempDir(), "etc")
			file := filepath.Join(dir, "l4lb.toml")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(trustVIP), 0o600); err != nil {
				t.Fatal(err)
			}
			setOwnerMode(t, file, tc.fileUID, tc.fileMode)
			setOwnerMode(t, dir, tc.dirUID, tc.dirMode)
			as := euid
			if tc.asNobody {
				as = nobody
			}
			cfg, err := config.LoadTrusted(file, as)
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if len(cfg.VIPs) != 1 {
					t.Fatalf("got %d VIPs", len(cfg.VIPs))
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, config.ErrUntrusted) {
				t.Errorf("error %v is not ErrUntrusted", err)
			}
			for _, w := range tc.want {
				w = strings.NewReplacer("FILE", file, "DIR", dir).Replace(w)
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestLoadTrustedChecksParents: a writable directory two levels up, and
// a symbolic link's target directory, are refused too.
func TestLoadTrustedChecksParents(t *testing.T) {
	base := t.TempDir()
	open, safe := filepath.Join(base, "open"), filepath.Join(base, "safe")
	for _, d := range []string{filepath.Join(open, "etc"), safe} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(open, "etc", "l4lb.toml")
	if err := os.WriteFile(deep, []byte(trustVIP), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadTrusted(deep, os.Geteuid()); err == nil || !strings.Contains(err.Error(), "directory "+open+" is writable") {
		t.Errorf("grandparent 0777: got %v", err)
	}
	link := filepath.Join(safe, "l4lb.toml")
	if err := os.Symlink(deep, link); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadTrusted(link, os.Geteuid()); err == nil || !strings.Contains(err.Error(), "directory "+open+" is writable") {
		t.Errorf("link to a file under a 0777 directory: got %v", err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadTrusted(link, os.Geteuid()); err != nil {
		t.Errorf("after chmod go-w: %v", err)
	}
}

func setOwnerMode(t *testing.T, path string, uid int, mode os.FileMode) {
	t.Helper()
	if uid >= 0 {
		if err := os.Chown(path, uid, -1); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(path, mode); err != nil { // after chown, which clears setuid bits
		t.Fatal(err)
	}
}
