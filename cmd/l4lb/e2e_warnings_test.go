// Config warnings of a running l4lb: logged once, not on every reload.

package main

import (
	"strings"
	"syscall"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
)

// warnConfig warns once (idle_timeout below keepalive); extra goes into
// its VIP.
func warnConfig(extra string) string {
	return `[global]
admin_socket = "@ADMIN@"
drain_timeout = "0"
[[vip]]
name = "w"
listen = "127.0.0.1:18080"
idle_timeout = "30s"
keepalive = "1m"
` + extra + `
  [[vip.backend]]
  address = "127.0.0.1:18081"
`
}

// TestReloadDoesNotRepeatWarnings (D13): the start logs a file's warnings;
// a reload of the same file logs them again only as a count, and a
// reload that brings a new warning logs just that one.
func TestReloadDoesNotRepeatWarnings(t *testing.T) {
	ns := testutil.NewNetns(t, "warn")
	lb := startLBIn(t, ns, warnConfig(""))
	const idle = "idle_timeout 30s closes a quiet connection before its first keepalive probe"
	if n := strings.Count(lb.log.String(), idle); n != 1 {
		t.Fatalf("the start logged the warning %d times", n)
	}
	admin := strings.TrimSuffix(lb.cfg, "l4lb.toml") + "admin.sock"
	for i := 1; i <= 2; i++ {
		lb.signal(t, syscall.SIGHUP)
		lb.waitLogN(t, "reload applied", i)
	}
	if n := strings.Count(lb.log.String(), idle); n != 1 {
		t.Fatalf("two reloads of the same file: the warning logged %d times in all, want once", n)
	}
	if n := strings.Count(lb.log.String(), "config warnings as before, not repeated"); n != 2 {
		t.Fatalf("each reload should count the warnings it does not repeat: %d lines", n)
	}

	// A new warning is logged; the old one is not.
	lb.writeConfig(t, strings.ReplaceAll(warnConfig("deny = [\"0.0.0.0/0\"]"), "@ADMIN@", admin))
	lb.signal(t, syscall.SIGHUP)
	lb.waitLogN(t, "reload applied", 3)
	if n := strings.Count(lb.log.String(), "deny covers every IPv4 address"); n != 1 {
		t.Errorf("the new warning logged %d times", n)
	}
	if n := strings.Count(lb.log.String(), idle); n != 1 {
		t.Errorf("the old warning logged %d times in all, want once", n)
	}
}
