// The demos' step titles: bold on a terminal, plain text in a log or pipe and under NO_COLOR.

package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
)

// TestDemoColourOnlyOnATerminal: `make demo > log` printed raw escape
// codes. Both demos take step from scripts/lib/demo.sh, which colours
// only a terminal without NO_COLOR (script(1) gives the shell one).
func TestDemoColourOnlyOnATerminal(t *testing.T) {
	testutil.RequireTool(t, "bash", "script")
	const run = "cd ../.. && source scripts/lib/demo.sh && step title"
	for _, c := range []struct {
		name    string
		cmd     *exec.Cmd
		escapes bool
	}{
		{"pipe", exec.Command("bash", "-c", run), false},
		{"terminal", exec.Command("script", "-qec", "bash -c '"+run+"'", "/dev/null"), true},
		{"terminal, NO_COLOR", exec.Command("script", "-qec", "NO_COLOR=1 bash -c '"+run+"'", "/dev/null"), false},
	} {
		c.cmd.Env = append(os.Environ(), "NO_COLOR=")
		out, err := c.cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "== title") {
			t.Fatalf("%s: %q, %v", c.name, out, err)
		}
		if got := strings.Contains(string(out), "\033["); got != c.escapes {
			t.Errorf("%s: escape codes %v, want %v: %q", c.name, got, c.escapes, out)
		}
	}
	for _, script := range []string{"demo.sh", "demo-ecmp.sh"} {
		src, err := os.ReadFile("../../scripts/" + script)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), "source scripts/lib/demo.sh") || strings.Contains(string(src), "step() {") || strings.Contains(string(src), `\033`) {
			t.Errorf("scripts/%s does not take step from scripts/lib/demo.sh, or writes escape codes itself", script)
		}
	}
}
