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
	for _, cmd := range []string{"check", "run"} {
		code, out, errs := runCLI(cmd, path)
		if code != 1 || out != "" || !strings.Contains(errs, path+" is writable by group and others (mode 0666") ||
			!strings.Contains(errs, "fix: chmod go-w "+path) {
			t.Errorf("%s with a 0666 file: exit %d\nstdout %s\nstderr %s", cmd, code, out, errs)
		}
	}
}
