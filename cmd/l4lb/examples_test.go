// examples/: one config per common job; each passes `l4lb check`, shows
// only warnings about the host it is checked on, and is linked from the
// README.

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// hostWarnings are the warnings that depend on the machine the check runs
// on (its interfaces, sysctls, limits), not on the file.
var hostWarnings = regexp.MustCompile(`no interface has |IP forwarding is off|open-file limit`)

// exampleJobs: the jobs the examples directory must cover, by file.
var exampleJobs = []string{
	"l4lb.toml",
	"postgres-primary-replicas.toml",
	"mysql.toml",
	"redis-affinity.toml",
	"websocket-fleet.toml",
	"dns-udp.toml",
	"tls-sni.toml",
	"xdp-dsr.toml",
	"bgp-ecmp-lb1.toml",
	"bgp-ecmp-lb2.toml",
}

func TestExamplesCheck(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.toml")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range files {
		have[filepath.Base(f)] = true
	}
	for _, want := range exampleJobs {
		if !have[want] {
			t.Errorf("examples/%s is missing", want)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			out, errOut, code := l4lbCmd(t, "check", f)
			if code != 0 || !strings.Contains(out, ": ok,") {
				t.Fatalf("l4lb check %s: exit %d\n%s%s", name, code, out, errOut)
			}
			for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
				if line != "" && !hostWarnings.MatchString(line) {
					t.Errorf("l4lb check %s warns about the file: %s", name, line)
				}
			}
			if !strings.Contains(string(readme), "](examples/"+name+")") {
				t.Errorf("README.md does not link examples/%s", name)
			}
		})
	}
}
