package testutil

import (
	"os"
	"testing"
)

// RequirePriv skips t when the process is not root, with the reason, unless
// L4LB_REQUIRE_PRIV=1 is set (as CI does): then it fails, so that a CI run
// can never pass by skipping the tests that matter.
func RequirePriv(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("L4LB_REQUIRE_PRIV") == "1" {
		t.Fatalf("needs root (%s) and L4LB_REQUIRE_PRIV=1 forbids skipping", why)
	}
	t.Skipf("needs root: %s", why)
}

// RequireTool fails (under L4LB_REQUIRE_PRIV=1) or skips when a program the
// test needs is not installed.
func RequireTool(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := lookPath(n); err != nil {
			if os.Getenv("L4LB_REQUIRE_PRIV") == "1" {
				t.Fatalf("needs %s (.ci/run installs it): %v", n, err)
			}
			t.Skipf("needs %s: %v", n, err)
		}
	}
}
