// `l4lb check` and `l4lb run` refuse a config file others could change.

package main

import (
	"os"
	"strings"
	"testing"
)

func TestCheckRefusesWritableConfig(t *testing.T) {
	path := writeFile(t, "l4lb.toml", goodConfig)
	if code, out, errs := runCLI("check", path); code != 0 {
		t.Fatalf("0644: exit %d\n%s%s", code, out, errs)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	// Only check in process: a run that wrongly accepted the file would
	// serve until the test's timeout. The daemon's refusal (start and
	// reload) is tested through the binary (e2e_privs_test.go).
	code, out, errs := runCLI("check", path)
	if code != 1 || out != "" || !strings.Contains(errs, path+" is writable by group and others (mode 0666") ||
		!strings.Contains(errs, "fix: chmod go-w "+path) {
		t.Errorf("check with a 0666 file: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
}
