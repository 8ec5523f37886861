package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// TestServiceManagerNotify plays systemd's part of Type=notify: l4lb says
// READY=1 only once its VIP accepts connections, RELOADING=1 (with the
// monotonic timestamp systemd requires) then READY=1 around a SIGHUP, and
// STOPPING=1 when SIGTERM starts the drain.
func TestServiceManagerNotify(t *testing.T) {
	dir := t.TempDir()
	sockPath := filepath.Join(dir, "notify.sock")
	manager, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer manager.Close()
	backend, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	testutil.ServeConns(backend, func(net.Conn) {}) // accept and close
	vip := testutil.FreeTCPAddr(t).String()
	cfg := loopbackConfig(t, dir, backend.Addr().String(), vip)
	cmd := exec.Command(mustBin(t), "run", "--config", cfg)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sockPath)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("l4lb log:\n%s", out.String())
		}
	}()
	next := func() string {
		t.Helper()
		buf := make([]byte, 512)
		manager.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := manager.Read(buf)
		if err != nil {
			t.Fatalf("no message from l4lb: %v", err)
		}
		return string(buf[:n])
	}
	if msg := next(); !strings.HasPrefix(msg, "READY=1") {
		t.Fatalf("first message %q, want READY=1", msg)
	}
	c, err := net.DialTimeout("tcp4", vip, time.Second)
	if err != nil {
		t.Fatalf("READY=1 sent before the VIP accepts: %v", err)
	}
	c.Close()

	cmd.Process.Signal(syscall.SIGHUP)
	if msg := next(); !strings.HasPrefix(msg, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("on SIGHUP %q, want RELOADING=1 with MONOTONIC_USEC", msg)
	}
	if msg := next(); !strings.HasPrefix(msg, "READY=1") {
		t.Fatalf("after the reload %q, want READY=1", msg)
	}
	// The log reaches us through a pipe, a little after READY=1 was sent
	// (it was written before).
	testutil.Eventually(t, 2*time.Second, "the reload to be logged as applied", func() bool {
		return strings.Contains(out.String(), "reload applied")
	})

	cmd.Process.Signal(syscall.SIGTERM)
	if msg := next(); msg != "STOPPING=1" {
		t.Fatalf("on SIGTERM %q, want STOPPING=1", msg)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}
