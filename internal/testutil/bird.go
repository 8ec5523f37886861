// BIRD 2 as the BGP router of tests: its own config, control socket and
// PID file in a temporary directory, run in the foreground in a namespace.

package testutil

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Bird is a running bird process.
type Bird struct {
	Sock string // control socket, for birdc -s
	ns   *Netns
	cmd  *exec.Cmd
	done chan struct{}
}

// BirdNeighbor is a BGP peer of the router: an l4lb.
type BirdNeighbor struct {
	Name string
	Addr netip.Addr
	ASN  uint32
	BFD  bool // bfd on: BFD down closes the session (a protocol bfd must run: BirdBFD)
}

// BirdConfig is a router that learns host routes from its neighbours
// over eBGP, announces nothing, and installs every route into the kernel
// with all equal paths merged into one multipath route (ECMP).
func BirdConfig(routerID netip.Addr, asn uint32, holdSeconds int, neighbors ...BirdNeighbor) string {
	var b strings.Builder
	fmt.Fprintf(&b, "router id %s;\nprotocol device { scan time 1; }\n", routerID)
	b.WriteString("protocol kernel { ipv4 { import none; export all; }; merge paths on; }\n")
	for _, n := range neighbors {
		bfd := ""
		if n.BFD {
			bfd = "\tbfd on;\n"
		}
		fmt.Fprintf(&b, `protocol bgp %s {
%s
	local as %d;
	neighbor %s as %d;
	passive on;
	hold time %d;
	keepalive time %d;
	ipv4 { import all; export none; };
}
`, n.Name, bfd, asn, n.Addr, n.ASN, holdSeconds, max(holdSeconds/3, 1))
	}
	return b.String()
}

// StartBird runs bird with conf in ns until the test ends (killed by PID).
func StartBird(t testing.TB, ns *Netns, conf string) *Bird {
	t.Helper()
	return startBird(t, ns, conf)
}

// startBird runs bird with conf in ns, under the prefix command (nice...).
func startBird(t testing.TB, ns *Netns, conf string, prefix ...string) *Bird {
	t.Helper()
	RequireTool(t, "bird", "birdc")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &Bird{Sock: filepath.Join(dir, "bird.ctl"), ns: ns, done: make(chan struct{})}
	b.cmd = ns.Command(append(prefix, "bird", "-f", "-c", cfg, "-s", b.Sock, "-P", filepath.Join(dir, "bird.pid"))...)
	out := &strings.Builder{}
	b.cmd.Stdout, b.cmd.Stderr = out, out
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
			t.Errorf("bird (pid %d) did not exit after SIGKILL", b.cmd.Process.Pid)
		}
	})
	Eventually(t, 10*time.Second, "bird answers on its control socket", func() bool {
		return exec.Command("birdc", "-s", b.Sock, "show", "status").Run() == nil
	})
	return b
}

// Show runs a birdc command ("show protocols all lb0") and returns its output.
func (b *Bird) Show(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("birdc", append([]string{"-s", b.Sock}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("birdc %v: %v: %s", args, err, out)
	}
	return string(out)
}

// NextHops returns the gateways of the router's kernel route to prefix,
// sorted; none when there is no such route.
func (b *Bird) NextHops(t testing.TB, prefix netip.Prefix) []netip.Addr {
	t.Helper()
	out, err := exec.Command("ip", "-n", b.ns.Name, "-j", "-4", "route", "show", "exact", prefix.String()).Output()
	if err != nil {
		t.Fatalf("ip route show %s: %v", prefix, err)
	}
	var routes []struct {
		Gateway  string `json:"gateway"`
		Nexthops []struct {
			Gateway string `json:"gateway"`
		} `json:"nexthops"`
	}
	if err := json.Unmarshal(out, &routes); err != nil {
		t.Fatalf("ip -j route: %v: %s", err, out)
	}
	var hops []netip.Addr
	for _, r := range routes {
		if a, err := netip.ParseAddr(r.Gateway); err == nil {
			hops = append(hops, a)
		}
		for _, nh := range r.Nexthops {
			if a, err := netip.ParseAddr(nh.Gateway); err == nil {
				hops = append(hops, a)
			}
		}
	}
	slices.SortFunc(hops, netip.Addr.Compare)
	return hops
}

// WaitNextHops waits until the route to prefix has exactly want (sorted)
// as next hops and returns how long that took.
func (b *Bird) WaitNextHops(t testing.TB, prefix netip.Prefix, d time.Duration, want ...netip.Addr) time.Duration {
	t.Helper()
	start := time.Now()
	slices.SortFunc(want, netip.Addr.Compare)
	var got []netip.Addr
	for {
		if got = b.NextHops(t, prefix); slices.Equal(got, want) {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("route %s: next hops %v after %v, want %v\n%s", prefix, got, d, want, b.Show(t, "show", "protocols"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
