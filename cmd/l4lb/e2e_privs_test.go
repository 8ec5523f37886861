// drop_capabilities through the binary: what every thread of the daemon
// holds after start, and that reloads still work with only that.

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/l4lb/l4lb/internal/privs"
	"github.com/l4lb/l4lb/internal/testutil"
)

// wantCaps is what a daemon with drop_capabilities keeps: the names given
// that this test process (root, as the daemon) holds itself.
func wantCaps(t *testing.T, names ...string) []string {
	t.Helper()
	own, err := privs.Read()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range own.Permitted {
		if slices.Contains(names, n) {
			out = append(out, n)
		}
	}
	return out
}

// proxyCaps and xdpCaps are the capabilities l4lb needs after start.
var (
	proxyCaps = []string{"cap_net_bind_service", "cap_sys_resource"}
	xdpCaps   = append([]string{"cap_net_admin", "cap_sys_admin", "cap_perfmon", "cap_bpf"}, proxyCaps...)
)

// checkThreadCaps fails unless every thread of pid has exactly want in
// its effective, permitted and bounding sets.
func checkThreadCaps(t *testing.T, pid int, want []string) {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) < 3 {
		t.Fatalf("l4lb has %d threads: the test means to see many", len(tasks))
	}
	for _, task := range tasks {
		s, err := privs.ReadStatus(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for name, got := range map[string][]string{"CapEff": s.Effective, "CapPrm": s.Permitted, "CapBnd": s.Bounding} {
			if !slices.Equal(got, want) {
				t.Fatalf("thread %s of %d threads: %s %v, want %v", task.Name(), len(tasks), name, got, want)
			}
		}
	}
}

// dropCaps turns drop_capabilities on in a config's [global] table.
func dropCaps(cfg string) string {
	return strings.Replace(cfg, "[global]\n", "[global]\ndrop_capabilities = true\n", 1)
}

// TestDropCapabilitiesProxy: with drop_capabilities l4lb keeps only what a reload
// needs on every thread; a reload that adds a VIP on a port below 1024
// works; status says what is held; a config file made writable by others
// is refused at the next reload; drop_capabilities = false keeps all.
func TestDropCapabilitiesProxy(t *testing.T) {
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	lb := startLB(t, tp, dropCaps(vipA))
	lb.waitLog(t, "capabilities dropped") // just after "l4lb running"
	want := wantCaps(t, proxyCaps...)
	checkThreadCaps(t, lb.cmd.Process.Pid, want)
	if seen := backendsSeen(t, tp, 80, 4); seen["be0"]+seen["be1"] != 4 {
		t.Fatalf("before reload: %v", seen)
	}

	lb.writeConfig(t, dropCaps(vipAReloaded))
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload applied")
	if seen := backendsSeen(t, tp, 81, 2); seen["be2"] != 2 {
		t.Fatalf("VIP b on port 81, added by a reload: %v", seen)
	}
	checkThreadCaps(t, lb.cmd.Process.Pid, want)

	st := lb.status(t)
	if c := st.Process.Capabilities; c == nil || !c.Dropped || !slices.Equal(c.Effective, want) || !slices.Equal(c.Bounding, want) {
		t.Fatalf("status capabilities %+v, want %v", st.Process.Capabilities, want)
	}

	if err := os.Chmod(lb.cfg, 0o666); err != nil {
		t.Fatal(err)
	}
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload refused")
	if log := lb.log.String(); !strings.Contains(log, "chmod go-w "+lb.cfg) {
		t.Fatalf("the refusal does not give the fix:\n%s", log)
	}
	if seen := backendsSeen(t, tp, 81, 1); seen["be2"] != 1 {
		t.Fatalf("VIP b after the refused reload: %v", seen)
	}
}

func TestKeepCapabilities(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	namedEchoes(t, tp)
	lb := startLB(t, tp, strings.Replace(vipA, "[global]\n", "[global]\ndrop_capabilities = false\n", 1))
	own, err := privs.Read()
	if err != nil {
		t.Fatal(err)
	}
	checkThreadCaps(t, lb.cmd.Process.Pid, own.Permitted)
	if c := lb.status(t).Process.Capabilities; c == nil || c.Dropped {
		t.Fatalf("status capabilities %+v", c)
	}
}

// TestDropCapabilitiesXDP: with an [xdp] table l4lb keeps what the XDP
// maps need; a reload that changes backends, and one that moves a VIP
// from proxy to xdp (loading and attaching the program after the drop),
// work with only that.
func TestDropCapabilitiesXDP(t *testing.T) {
	n := newXDPNet(t, 3)
	lb := startLBIn(t, n.LB.NS, dropCaps(n.config("", "", 0, 1)))
	lb.waitLog(t, "capabilities dropped")
	checkThreadCaps(t, lb.cmd.Process.Pid, wantCaps(t, xdpCaps...))
	seen := map[string]int{}
	for range 10 {
		seen[n.AskTCP(t, n.vip4)]++
	}
	if seen["be3"] != 0 || seen["be1"]+seen["be2"] != 10 {
		t.Fatalf("before the reload: %v", seen)
	}
	cfg := strings.ReplaceAll(dropCaps(n.config("", "", 2)), "@ADMIN@", lb.sock)
	lb.writeConfig(t, cfg)
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload applied")
	for range 10 {
		if name := n.AskTCP(t, n.vip4); name != "be3" {
			t.Fatalf("after the reload to be3 only: a new flow went to %s", name)
		}
	}
	if name := n.AskUDP(t, n.vip4); name != "be3" {
		t.Fatalf("udp after the reload: %s", name)
	}
	// Explain reads the inner Maglev map by its ID (cap_sys_admin).
	if e := explainJSON(t, lb, "web4", "198.18.250.1:40000"); e.Backend == nil || e.Backend.ID != "be3" {
		t.Fatalf("explain after the drop: %s %v", e.Because, e.Notes)
	}
	checkThreadCaps(t, lb.cmd.Process.Pid, wantCaps(t, xdpCaps...))
}

// unitCapabilities is the CapabilityBoundingSet of the shipped systemd
// unit, as setpriv(1) names them ("net_admin").
func unitCapabilities(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../scripts/l4lb.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapabilityBoundingSet="); ok {
			var out []string
			for _, c := range strings.Fields(v) {
				out = append(out, strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
			return out
		}
	}
	t.Fatal("the unit sets no CapabilityBoundingSet")
	return nil
}

// TestHardenedUnitXDP runs l4lb in xdp mode as the shipped unit would
// (systemd is not PID 1 on the test machines): only the unit's
// CapabilityBoundingSet, no_new_privs, and the kernel's
// memory-deny-write-execute (MemoryDenyWriteExecute=). It loads and
// attaches the XDP program, forwards, drops to the kept set and reloads.
func TestHardenedUnitXDP(t *testing.T) {
	testutil.RequireTool(t, "setpriv")
	n := newXDPNet(t, 2)
	dir := t.TempDir()
	mdwe := filepath.Join(dir, "mdwe")
	if out, err := exec.Command("go", "build", "-o", mdwe, "./testdata/mdwe").CombinedOutput(); err != nil {
		t.Fatalf("build mdwe: %v\n%s", err, out)
	}
	caps := unitCapabilities(t)
	bounding := "-all"
	for _, c := range caps {
		bounding += ",+" + c
	}
	wrapper := filepath.Join(dir, "l4lb-hardened")
	script := fmt.Sprintf("#!/bin/sh\nexec setpriv --bounding-set=%s --inh-caps=-all -- %s %s \"$@\"\n", bounding, mdwe, mustBin(t))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	lb := startBinaryIn(t, n.LB.NS, wrapper, dropCaps(n.config("", "", 0)))
	lb.waitLog(t, "capabilities dropped")
	var inUnit []string
	for _, c := range xdpCaps {
		if slices.Contains(caps, strings.TrimPrefix(c, "cap_")) {
			inUnit = append(inUnit, c)
		}
	}
	checkThreadCaps(t, lb.cmd.Process.Pid, wantCaps(t, inUnit...))
	if name := n.AskTCP(t, n.vip4); name != "be1" {
		t.Fatalf("answered by %q", name)
	}
	lb.writeConfig(t, strings.ReplaceAll(dropCaps(n.config("", "", 1)), "@ADMIN@", lb.sock))
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload applied")
	for range 5 {
		if name := n.AskTCP(t, n.vip4); name != "be2" {
			t.Fatalf("after the reload to be2: answered by %q", name)
		}
	}
}

// TestDropCapabilitiesLoadXDPAfter: a file whose only VIP is proxied
// starts without the XDP program; a reload that moves the VIP to xdp
// loads and attaches it after the drop (cap_bpf, cap_perfmon for the
// verifier, cap_net_admin for an XDP program and its attach).
func TestDropCapabilitiesLoadXDPAfter(t *testing.T) {
	n := newXDPNet(t, 2)
	n.LB.NS.MustExec(t, "ip", "addr", "add", n.VIP4.String()+"/32", "dev", "lo") // proxy mode needs the VIP local
	cfg := func(mode string, port int) string {
		return n.modeConf([]string{"drop_capabilities = true"}, mode, port)
	}
	lb := startLBIn(t, n.LB.NS, cfg("proxy", 8080))
	lb.waitLog(t, "capabilities dropped")
	checkThreadCaps(t, lb.cmd.Process.Pid, wantCaps(t, xdpCaps...))
	lb.writeConfig(t, strings.ReplaceAll(cfg("xdp", 80), "@ADMIN@", lb.sock))
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload applied")
	if name := n.AskTCP(t, n.vip4); !strings.HasPrefix(name, "be") {
		t.Fatalf("after the move to xdp: answered by %q", name)
	}
	if v := lb.vip(t, "web"); v.XDP == nil || v.XDP.NewFlows == 0 {
		t.Fatalf("the xdp plane forwarded nothing: %+v", v.XDP)
	}
}

// TestDropCapabilitiesUpgrade: an upgrade's new binary, exec'd by a
// process that dropped its bounding set, starts (XDP program loaded and
// attached from the pins) with only the kept set, keeps it, and serves.
func TestDropCapabilitiesUpgrade(t *testing.T) {
	n := newXDPNet(t, 2)
	pins := mountBPF(t)
	lb := startUpgradable(t, n.LB.NS, dropCaps(n.config(fmt.Sprintf("pin_path = %q", pins), "", 0, 1)))
	want := wantCaps(t, xdpCaps...)
	lb.waitLog(t, "capabilities dropped")
	checkThreadCaps(t, lb.cmd.Process.Pid, want)
	pid, _ := lb.upgradeOK(t)
	lb.waitLogN(t, "capabilities dropped", 2) // the new process's log goes to the same file
	for range 5 {
		if name := n.AskTCP(t, n.vip4); !strings.HasPrefix(name, "be") {
			t.Fatalf("after the upgrade: answered by %q", name)
		}
	}
	checkThreadCaps(t, pid, want)
}
