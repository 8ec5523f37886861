package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// fdProc is l4lb running on loopback under a descriptor limit.
type fdProc struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	vip  string
	vips []string // every VIP; vip is the first
}

func startLimited(t *testing.T, nofile int) *fdProc {
	t.Helper()
	return startLimitedVIPs(t, nofile, 1)
}

// startLimitedVIPs is startLimited with n VIPs in front of the same echo
// server.
func startLimitedVIPs(t *testing.T, nofile, n int) *fdProc {
	t.Helper()
	testutil.RequireTool(t, "prlimit")
	echo, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	testutil.ServeConns(echo, testutil.Echo)
	p := &fdProc{log: &syncBuffer{}}
	for range n {
		p.vips = append(p.vips, testutil.FreeTCPAddr(t).String())
	}
	p.vip = p.vips[0]
	cfg := loopbackConfig(t, t.TempDir(), echo.Addr().String(), p.vips...)
	limit := strconv.Itoa(nofile)
	p.cmd = exec.Command("prlimit", "--nofile="+limit+":"+limit, mustBin(t), "run", "--config", cfg)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		if t.Failed() {
			t.Logf("l4lb log:\n%s", p.log.String())
		}
	})
	testutil.Eventually(t, 5*time.Second, "l4lb to start", func() bool { return strings.Contains(p.log.String(), "l4lb running") })
	return p
}

// loopbackConfig writes a config with a TCP VIP on each of vips in front
// of one backend, no health checks and no admin socket, into dir; it
// returns its path.
func loopbackConfig(t *testing.T, dir, backend string, vips ...string) string {
	t.Helper()
	cfg := filepath.Join(dir, "l4lb.toml")
	text := "[global]\nadmin_socket = \"off\"\n"
	for i, vip := range vips {
		name := "lo"
		if i > 0 {
			name = fmt.Sprintf("lo%d", i)
		}
		text += fmt.Sprintf("[[vip]]\nname = %q\nlisten = %q\n  [vip.health]\n  type = \"none\"\n  [[vip.backend]]\n  address = %q\n", name, vip, backend)
	}
	err := os.WriteFile(cfg, []byte(text), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// state of one client connection: served (echoed), waiting (no answer
// yet) or reset (closed by l4lb).
type connState int

const (
	served connState = iota
	waiting
	reset
)

func probe(c net.Conn, wait time.Duration) connState {
	c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte("x")); err != nil {
		return reset
	}
	_, err := io.ReadFull(c, make([]byte, 1))
	var ne net.Error
	switch {
	case err == nil:
		return served
	case errors.As(err, &ne) && ne.Timeout():
		return waiting
	}
	return reset
}

func (p *fdProc) dial(t *testing.T, n int) map[connState][]net.Conn {
	t.Helper()
	return p.dialVIP(t, p.vip, n)
}

// dialVIP is dial to a given VIP.
func (p *fdProc) dialVIP(t *testing.T, vip string, n int) map[connState][]net.Conn {
	t.Helper()
	out := map[connState][]net.Conn{}
	for range n {
		c, err := net.DialTimeout("tcp4", vip, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s := probe(c, 300*time.Millisecond)
		out[s] = append(out[s], c)
	}
	return out
}

// servedLater checks that every waiting connection is served once
// descriptors free up.
func servedLater(t *testing.T, conns []net.Conn) {
	t.Helper()
	for i, c := range conns {
		deadline := time.Now().Add(3 * time.Second)
		for probe(c, 200*time.Millisecond) != served {
			if time.Now().After(deadline) {
				t.Fatalf("waiting connection %d of %d never served", i, len(conns))
			}
		}
	}
}

// TestConnectionBudgetFromFileLimit: l4lb derives a connection cap from its
// open-file limit, so at the cap clients wait in the listen backlog instead
// of being accepted and reset for lack of a backend socket.
func TestConnectionBudgetFromFileLimit(t *testing.T) {
	p := startLimited(t, 160) // (160 - 64) / 3 = 32 connections
	got := p.dial(t, 40)
	if len(got[served]) != 32 || len(got[waiting]) != 8 || len(got[reset]) != 0 {
		t.Fatalf("served %d, waiting %d, reset %d; want 32, 8, 0", len(got[served]), len(got[waiting]), len(got[reset]))
	}
	for _, c := range got[served] {
		c.Close()
	}
	servedLater(t, got[waiting])
}

// TestConnectionBudgetAcrossVIPs: the budget is the process's, not a
// VIP's: with one VIP holding every slot, clients of another wait, and the
// end of the first VIP's connections (not of their own VIP's, which has
// none) lets them in.
func TestConnectionBudgetAcrossVIPs(t *testing.T) {
	p := startLimitedVIPs(t, 160, 2) // 32 connections, as above
	a := p.dialVIP(t, p.vips[0], 32)
	if len(a[served]) != 32 {
		t.Fatalf("VIP 1: served %d, waiting %d, reset %d; want 32 served", len(a[served]), len(a[waiting]), len(a[reset]))
	}
	b := p.dialVIP(t, p.vips[1], 4)
	if len(b[waiting]) != 4 {
		t.Fatalf("VIP 2 with the budget taken by VIP 1: served %d, waiting %d, reset %d; want 4 waiting", len(b[served]), len(b[waiting]), len(b[reset]))
	}
	for _, c := range a[served][:4] {
		c.Close()
	}
	servedLater(t, b[waiting])
}

// TestAcceptSurvivesEMFILE lowers the running l4lb's descriptor limit below
// its connection budget: backend sockets (or accepts) fail with EMFILE, the
// accept loop pauses and logs at most once a second, no backend is marked
// down for it, and once descriptors free up (and the limit is restored)
// the waiting clients are served.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	p := startLimited(t, 1000)
	pid := strconv.Itoa(p.cmd.Process.Pid)
	testutil.MustRun(t, "prlimit", "--pid", pid, "--nofile=48:1000")
	start := time.Now()
	got := p.dial(t, 40)
	// A client accepted just as descriptors ran out waits up to
	// connect_timeout (2s) for its backend socket, then is reset; the
	// others wait in the backlog.
	if len(got[waiting]) < 10 || len(got[reset]) > 8 {
		t.Fatalf("under a 48-descriptor limit: served %d, waiting %d, reset %d", len(got[served]), len(got[waiting]), len(got[reset]))
	}
	// Whichever runs out first (accept4, the backend socket or a pipe) is
	// logged, each kind at most once a second.
	logged := p.log.String()
	secs := int(time.Since(start).Seconds()) + 1
	if n := strings.Count(logged, "local resources exhausted") + strings.Count(logged, "accept failed"); n < 1 || n > 3*secs {
		t.Fatalf("%d descriptor-shortage log lines over %d s, want at most one a second for each of the 3 kinds", n, secs)
	}
	if strings.Contains(p.log.String(), "health changed") {
		t.Fatal("a local descriptor shortage marked the backend down")
	}
	testutil.MustRun(t, "prlimit", "--pid", pid, "--nofile=1000:1000")
	for _, c := range got[served] {
		c.Close()
	}
	// Waiting clients still in the backlog are served now; one that was
	// accepted during the shortage may already have been reset at its
	// connect_timeout. None may hang.
	later := map[connState]int{}
	for _, c := range got[waiting] {
		st := probe(c, 3*time.Second)
		later[st]++
	}
	if later[waiting] != 0 || later[reset]+len(got[reset]) > 8 {
		t.Fatalf("after the limit was restored: %v (earlier resets %d)", later, len(got[reset]))
	}
	t.Logf("served %d at once; of %d waiting, %d served later and %d reset; %d reset while short", len(got[served]), len(got[waiting]), later[served], later[reset], len(got[reset]))
}
