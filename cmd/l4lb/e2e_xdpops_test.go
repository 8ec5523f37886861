// What an operator is told in xdp mode: pin paths that would not outlive
// l4lb, forwarding it needs but never switches on, interfaces without
// native XDP, and what `xdp detach` and `decap attach` really did.

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
)

// opsNet is the smallest xdp setup: the balancer's namespace with a veth
// x0 (198.18.60.1/24, 2001:db8:60::1/64) toward a peer namespace
// (198.18.60.2), forwarding off. Nothing answers behind it: these tests
// look at what l4lb says and does to the host, not at traffic.
type opsNet struct {
	ns *testutil.Netns
}

func newOpsNet(t *testing.T) *opsNet {
	t.Helper()
	testutil.RequirePriv(t, "XDP programs and network namespaces")
	ns := testutil.NewNetns(t, "xops")
	peer := testutil.NewNetns(t, "xopp")
	testutil.Veth(t, ns, "x0", "198.18.60.1/24", peer, "x1", "198.18.60.2/24")
	ns.MustExec(t, "ip", "addr", "add", "2001:db8:60::1/64", "dev", "x0", "nodad")
	n := &opsNet{ns: ns}
	n.setForwarding(t, "0", "0")
	return n
}

// setForwarding sets IPv4 and IPv6 forwarding in the namespace (the
// global switches, which set every interface's too).
func (n *opsNet) setForwarding(t *testing.T, v4, v6 string) {
	t.Helper()
	n.ns.MustExec(t, "sysctl", "-qw", "net.ipv4.ip_forward="+v4, "net.ipv6.conf.all.forwarding="+v6)
}

// forwarding reads them back.
func (n *opsNet) forwarding(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(n.ns.MustExec(t, "sysctl", "-n", "net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"))
}

// config is one xdp VIP on x0 forwarding by fwd to the backends (198.18.60.2
// if none), with xdpExtra in [xdp].
func (n *opsNet) config(fwd, xdpExtra string, backends ...string) string {
	if len(backends) == 0 {
		backends = []string{"198.18.60.2:80"}
	}
	var b strings.Builder
	for _, a := range backends {
		fmt.Fprintf(&b, "  [[vip.backend]]\n  address = %q\n", a)
	}
	return fmt.Sprintf(`
[global]
admin_socket = "@ADMIN@"
drain_timeout = "1s"
[xdp]
interface = "x0"
%s
[[vip]]
name = "web"
listen = "198.18.61.10:80"
mode = "xdp"
forward = %q
  [vip.health]
  type = "none"
%s`, xdpExtra, fwd, b.String())
}

// writeOpsConfig writes config (with @ADMIN@ set) to a file of the test's.
func writeOpsConfig(t *testing.T, config string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "l4lb.toml")
	config = strings.ReplaceAll(config, "@ADMIN@", filepath.Join(dir, "admin.sock"))
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runIn runs the l4lb binary with args in ns (after the shell command
// before, when set) and returns its output and exit code; it must end
// within a minute.
func runIn(t *testing.T, ns *testutil.Netns, before string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	argv := append([]string{"netns", "exec", ns.Name, mustBin(t)}, args...)
	if before != "" {
		argv = append([]string{"netns", "exec", ns.Name, "sh", "-c", before + ` && exec "$@"`, "sh", mustBin(t)}, args...)
	}
	out, err := exec.CommandContext(ctx, "ip", argv...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("l4lb %v did not end within a minute:\n%s", args, out)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// wantIn fails t unless out has every one of wants.
func wantIn(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, out)
		}
	}
}

// xdpOn is the XDP program line of x0 in the namespace ("" if none).
func (n *opsNet) xdpOn(t *testing.T, ifname string) string {
	t.Helper()
	out := n.ns.MustExec(t, "ip", "link", "show", ifname)
	if i := strings.Index(out, "prog/xdp"); i >= 0 {
		return strings.Fields(out[i:])[0] + " " + strings.Join(strings.Fields(out[i:])[1:5], " ")
	}
	return ""
}

// TestXDPForwardingIsTheOperators: l4lb never writes a sysctl. With
// forwarding off, `check` warns with the exact sysctl, `run` of an ipip
// VIP refuses to start saying the same, an l2 VIP (no FIB) runs, and a
// reload to ipip is refused until the operator switches forwarding on.
func TestXDPForwardingIsTheOperators(t *testing.T) {
	n := newOpsNet(t)
	ipip := writeOpsConfig(t, n.config("ipip", ""))
	out, code := runIn(t, n.ns, "", "check", ipip)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s", code, out)
	}
	wantIn(t, "check", out, "warning:", "xdp.interface", "sysctl -w net.ipv4.ip_forward=1")
	out, code = runIn(t, n.ns, "", "run", ipip)
	if code == 0 {
		t.Fatalf("run of an ipip VIP with forwarding off started:\n%s", out)
	}
	wantIn(t, "run", out, "sysctl -w net.ipv4.ip_forward=1", "l4lb writes no sysctl")
	if f := n.forwarding(t); f != "0\n0" {
		t.Fatalf("forwarding after the refused start: %q, want both still 0", f)
	}

	lb := startLBIn(t, n.ns, n.config("l2", ""))
	if out, _ := runIn(t, n.ns, "", "check", lb.cfg); strings.Contains(out, "forwarding") {
		t.Errorf("check warns about forwarding for an l2 VIP:\n%s", out)
	}
	lb.writeConfig(t, strings.Replace(lb.currentConfig(t), `forward = "l2"`, `forward = "ipip"`, 1))
	out, errOut, code := lb.run(t, "reload")
	if code == 0 {
		t.Fatalf("reload to ipip with forwarding off applied:\n%s%s", out, errOut)
	}
	wantIn(t, "refused reload", out+errOut, "sysctl -w net.ipv4.ip_forward=1")
	if f := n.forwarding(t); f != "0\n0" {
		t.Fatalf("forwarding after the refused reload: %q, want both still 0", f)
	}
	n.setForwarding(t, "1", "0")
	if out, errOut, code := lb.run(t, "reload"); code != 0 {
		t.Fatalf("reload once IPv4 forwarding is on: exit %d\n%s%s", code, out, errOut)
	}
	// An IPv6 VIP's backends need IPv6 forwarding, which is still off.
	lb.writeConfig(t, lb.currentConfig(t)+`
[[vip]]
name = "web6"
listen = "[2001:db8:61::10]:80"
mode = "xdp"
  [vip.health]
  type = "none"
  [[vip.backend]]
  address = "[2001:db8:60::2]:80"
`)
	out, errOut, code = lb.run(t, "reload")
	if code == 0 {
		t.Fatalf("reload adding an IPv6 VIP with IPv6 forwarding off applied:\n%s%s", out, errOut)
	}
	wantIn(t, "refused reload", out+errOut, "sysctl -w net.ipv6.conf.all.forwarding=1")
	if f := n.forwarding(t); f != "1\n0" {
		t.Fatalf("forwarding: %q, want IPv6 still 0", f)
	}
	lb.signal(t, syscall.SIGTERM)
	<-lb.exited
}

// TestXDPPinPathMustOutliveL4LB: under `ip netns exec` (a private mount
// namespace, as a hardened unit's), a pin path whose bpffs would vanish
// with l4lb, taking the program off the interface, is refused by `run`
// and flagged by `check`, each with the mount command; so is a path on
// /sys/fs/bpf, which `ip netns exec` hides. Nothing is attached.
func TestXDPPinPathMustOutliveL4LB(t *testing.T) {
	n := newOpsNet(t)
	n.setForwarding(t, "1", "0")
	empty := t.TempDir()
	sysfs := fmt.Sprintf("/sys/fs/bpf/l4lb-test-%d", os.Getpid())
	for _, c := range []struct {
		name, dir, before, why string
		checkToo               bool
	}{
		{"l4lb would mount it privately", empty, "", "would exist only in its own mount namespace", true},
		{"mounted only in l4lb's namespace", empty, fmt.Sprintf("mount -t bpf bpf %q", empty), "mounted only in this process's mount namespace", false},
		{"/sys/fs/bpf hidden by ip netns exec", sysfs, "", "mount -t bpf bpf " + sysfs, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := writeOpsConfig(t, n.config("ipip", fmt.Sprintf("pin_path = %q", c.dir)))
			out, code := runIn(t, n.ns, c.before, "run", cfg)
			if code == 0 {
				t.Fatalf("run started:\n%s", out)
			}
			wantIn(t, "run", out, c.why, "mount -t bpf bpf "+c.dir)
			if c.checkToo {
				out, code := runIn(t, n.ns, c.before, "check", cfg)
				if code != 0 {
					t.Fatalf("check: exit %d\n%s", code, out)
				}
				wantIn(t, "check", out, "warning:", "xdp.pin_path", "`l4lb run` will fail", c.why, "mount -t bpf bpf "+c.dir)
			}
			if p := n.xdpOn(t, "x0"); p != "" {
				t.Fatalf("x0 runs %s after the refused start", p)
			}
			var st unix.Statfs_t
			if err := unix.Statfs(c.dir, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
				t.Fatalf("a bpffs is mounted on %s", c.dir)
			}
		})
	}
}

// TestXDPStopSaysWhatHappened: a stopping l4lb says "left attached" only
// when the program's pin will keep it. When the link's pin was removed,
// or the host unmounted the bpffs, while l4lb ran, it detaches and says
// so, and the interface is left without the program.
func TestXDPStopSaysWhatHappened(t *testing.T) {
	n := newOpsNet(t)
	n.setForwarding(t, "1", "0")
	for _, c := range []struct {
		name   string
		break_ func(t *testing.T, pins string)
	}{
		{"link pin removed", func(t *testing.T, pins string) {
			links, _ := filepath.Glob(filepath.Join(pins, "*", "link_xdp_*"))
			if len(links) != 1 {
				t.Fatalf("link pins under %s: %v", pins, links)
			}
			if err := os.Remove(links[0]); err != nil {
				t.Fatal(err)
			}
		}},
		{"bpffs unmounted by the host", func(t *testing.T, pins string) {
			if err := unix.Unmount(pins, unix.MNT_DETACH); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pins := mountBPF(t)
			lb := startLBIn(t, n.ns, n.config("ipip", fmt.Sprintf("pin_path = %q", pins)))
			if p := n.xdpOn(t, "x0"); !strings.Contains(p, "xdp_lb") {
				t.Fatalf("x0 runs %q", p)
			}
			c.break_(t, pins)
			lb.signal(t, syscall.SIGTERM)
			<-lb.exited
			log := lb.log.String()
			if strings.Contains(log, "left attached") {
				t.Fatalf("l4lb said the program was left attached:\n%s", log)
			}
			wantIn(t, "log", log, "xdp program detached: its pin would not keep it attached")
			if p := n.xdpOn(t, "x0"); p != "" {
				t.Fatalf("x0 still runs %s", p)
			}
		})
	}
}

// TestXDPDetachSaysWhatItDid: `l4lb xdp detach` with nothing pinned says
// so and creates nothing; after a stop that left the program attached it
// takes it off and removes the pins, and says exactly that.
func TestXDPDetachSaysWhatItDid(t *testing.T) {
	n := newOpsNet(t)
	n.setForwarding(t, "1", "0")
	pins := mountBPF(t)
	cfg := n.config("ipip", fmt.Sprintf("pin_path = %q", pins))
	nothing := func() {
		t.Helper()
		out, code := runIn(t, n.ns, "", "xdp", "detach", writeOpsConfig(t, cfg))
		if code != 0 || strings.Contains(out, "xdp program detached") {
			t.Fatalf("detach with nothing pinned: exit %d\n%s", code, out)
		}
		wantIn(t, "detach with nothing pinned", out, "nothing detached", "no l4lb pins under "+pins)
		if left, _ := filepath.Glob(filepath.Join(pins, "v*")); len(left) != 0 {
			t.Fatalf("detach with nothing pinned left pins: %v", left)
		}
		if p := n.xdpOn(t, "x0"); p != "" {
			t.Fatalf("x0 runs %s", p)
		}
	}
	nothing()

	lb := startLBIn(t, n.ns, cfg)
	lb.signal(t, syscall.SIGTERM)
	<-lb.exited
	lb.waitLog(t, "xdp program left attached")
	if p := n.xdpOn(t, "x0"); !strings.Contains(p, "xdp_lb") {
		t.Fatalf("after the stop x0 runs %q, want xdp_lb left attached", p)
	}
	out, code := runIn(t, n.ns, "", "xdp", "detach", lb.cfg)
	if code != 0 {
		t.Fatalf("detach: exit %d\n%s", code, out)
	}
	wantIn(t, "detach", out, "xdp program detached from x0", "removed "+pins+"/v")
	if p := n.xdpOn(t, "x0"); p != "" {
		t.Fatalf("after detach x0 runs %s", p)
	}
	nothing()
}

// TestDecapAttachSaysWhatItDid: `l4lb decap attach` says whether it
// attached, kept what ran, or moved it to the other mode; on an interface
// without native XDP it fails and names --mode generic; --gue-port
// reaches the attached program, and status shows it.
func TestDecapAttachSaysWhatItDid(t *testing.T) {
	n := newOpsNet(t)
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"--iface", "x0"}, "decap attached to x0 (driver mode)"},
		{[]string{"--iface", "x0"}, "decap already attached to x0 (driver mode): kept"},
		{[]string{"--iface", "x0", "--mode", "generic"}, "decap on x0 moved from driver to generic mode"},
	} {
		out, code := runIn(t, n.ns, "", append([]string{"decap", "attach"}, step.args...)...)
		if code != 0 || !strings.Contains(out, step.want) {
			t.Fatalf("decap attach %v: exit %d, want %q:\n%s", step.args, code, step.want, out)
		}
	}
	if p := n.xdpOn(t, "x0"); !strings.Contains(p, "xdp_decap") {
		t.Fatalf("x0 runs %q", p)
	}
	// The GUE port reaches the program another process attached (kept).
	for _, port := range []string{"7000", "0"} {
		out, code := runIn(t, n.ns, "", "decap", "attach", "--iface", "x0", "--mode", "generic", "--gue-port", port)
		if code != 0 {
			t.Fatalf("decap attach --gue-port %s: exit %d\n%s", port, code, out)
		}
		want := map[string]string{"7000": "gue on udp port 7000", "0": "gue off"}[port]
		wantIn(t, "decap attach --gue-port "+port, out, "kept", want)
		out, _ = runIn(t, n.ns, "", "decap", "status", "--iface", "x0")
		wantIn(t, "decap status", out, "decap on x0 ("+want+")")
	}
	out, code := runIn(t, n.ns, "", "decap", "attach", "--iface", "lo")
	if code != 1 {
		t.Fatalf("decap attach on lo: exit %d\n%s", code, out)
	}
	wantIn(t, "decap attach on lo", out, "native XDP", "--mode generic")
}

// TestXDPDriverModeOnLoopback: [xdp] on lo in the default driver mode is
// flagged by `check` and refused by `run`, both naming attach = "generic".
func TestXDPDriverModeOnLoopback(t *testing.T) {
	n := newOpsNet(t)
	cfg := writeOpsConfig(t, strings.Replace(n.config("l2", ""), `interface = "x0"`, `interface = "lo"`, 1))
	out, code := runIn(t, n.ns, "", "check", cfg)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s", code, out)
	}
	wantIn(t, "check", out, "warning:", "xdp.attach", `attach = "generic"`)
	out, code = runIn(t, n.ns, "", "run", cfg)
	if code == 0 {
		t.Fatalf("run on lo in driver mode started:\n%s", out)
	}
	wantIn(t, "run", out, "native XDP", `set attach = \"generic\" in [xdp]`) // quotes escaped in the log line
}
