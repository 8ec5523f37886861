// dsr_cleanup_test.go: a DSR network touches nothing outside its namespaces and is gone after cleanup, even when its test fails.

package testutil

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestDSRCleanupAfterFailure builds a network with servers and open
// connections under a stand-in testing.TB, fails it on purpose, runs its
// cleanups and checks that the namespaces, sockets, XDP links and
// programs are gone and that the root namespace is as it was.
func TestDSRCleanupAfterFailure(t *testing.T) {
	RequirePriv(t, "network namespaces")
	warmUpNetpoll(t)
	root := snapshotRoot(t)
	fds := kernelFDs(t)

	ft := &failingTB{TB: t}
	var names []string
	ft.run(func() {
		d := NewDSR(ft, DSROptions{Backends: 2, IPv6: true})
		for _, ns := range d.Namespaces() {
			names = append(names, ns.Name)
		}
		d.ServeVIPs(ft, 7004)
		for _, b := range d.Backends {
			for _, a := range b.Addrs() {
				ap := netip.AddrPortFrom(a, 7004)
				d.ServeTCP(ft, b, ap, NamedEcho(b.Name))
				d.ServeUDP(ft, b, ap)
				d.AskUDP(ft, ap)
				d.DialTCP(ft, ap) // left open for cleanup to close
			}
		}
		if now := snapshotRoot(t); now.diff(root) != "" {
			t.Errorf("root namespace changed while the network was up:\n%s", now.diff(root))
		}
		ft.Fatalf("failing on purpose")
		t.Error("Fatalf returned")
	})
	if want := []string{"failing on purpose"}; !slices.Equal(ft.msgs, want) || len(names) != 5 {
		t.Fatalf("stand-in test failed with %q after %d namespaces, want %q after 5", ft.msgs, len(names), want)
	}
	for _, n := range names {
		if !nsExists(n) {
			t.Fatalf("namespace %s gone before cleanup: the check below could not fail", n)
		}
	}
	ft.cleanup()
	for _, n := range names {
		if nsExists(n) {
			t.Errorf("namespace %s still exists after cleanup", n)
		}
	}
	if now := kernelFDs(t); !slices.Equal(now, fds) {
		t.Errorf("open sockets, namespaces and BPF objects: %v before, %v after cleanup", fds, now)
	}
	if now := snapshotRoot(t); now.diff(root) != "" {
		t.Errorf("root namespace changed:\n%s", now.diff(root))
	}
}

// failingTB stands in for a test that fails: Fatal ends the goroutine
// like the real one, and cleanups wait for cleanup().
type failingTB struct {
	testing.TB
	mu       sync.Mutex
	failed   bool
	msgs     []string
	cleanups []func()
}

func (f *failingTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

func (f *failingTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	f.failed = true
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	f.TB.Logf("stand-in test: "+format, args...)
}

func (f *failingTB) Error(args ...any)                 { f.Errorf("%s", fmt.Sprint(args...)) }
func (f *failingTB) Fatal(args ...any)                 { f.Error(args...); runtime.Goexit() }
func (f *failingTB) Fatalf(format string, args ...any) { f.Errorf(format, args...); runtime.Goexit() }
func (f *failingTB) FailNow()                          { f.Errorf("FailNow"); runtime.Goexit() }
func (f *failingTB) Fail()                             { f.Errorf("Fail") }

func (f *failingTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// run runs body on a goroutine of its own, as the testing package does.
func (f *failingTB) run(body func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		body()
	}()
	<-done
}

// cleanup runs the registered cleanups, last first.
func (f *failingTB) cleanup() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func nsExists(name string) bool {
	_, err := os.Stat("/run/netns/" + name)
	return err == nil
}

// warmUpNetpoll makes the runtime open its poller descriptors before fds
// are counted.
func warmUpNetpoll(t *testing.T) {
	ln := ListenLoopback(t)
	_ = ln.Close()
}

// kernelFDs counts this process's open sockets, namespace handles and BPF
// objects by kind.
func kernelFDs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range entries {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		for _, kind := range []string{"socket:", "net:", "anon_inode:bpf"} {
			if strings.HasPrefix(target, kind) {
				count[strings.TrimSuffix(strings.SplitN(target, "[", 2)[0], ":")+":"]++
			}
		}
	}
	var out []string
	for k, n := range count {
		out = append(out, fmt.Sprintf("%s%d", k, n))
	}
	slices.Sort(out)
	return out
}

// rootState is what the root namespace looks like to these tests: links
// with their settings and addresses, routes of all tables, and the
// sysctls a DSR network sets in its own namespaces.
type rootState struct {
	links   map[string]string // name -> settings and addresses
	routes  []string
	sysctls []string
}

func snapshotRoot(t *testing.T) rootState {
	t.Helper()
	st := rootState{links: map[string]string{}}
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatalf("root links: %v", err)
	}
	for _, l := range links {
		st.links[l.Attrs().Name] = describeRootLink(t, l)
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatalf("root routes: %v", err)
	}
	for _, r := range routes {
		st.routes = append(st.routes, r.String())
	}
	slices.Sort(st.routes)
	st.sysctls = rootSysctls(t)
	return st
}

func describeRootLink(t *testing.T, l netlink.Link) string {
	t.Helper()
	a := l.Attrs()
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatalf("addresses of %s: %v", a.Name, err)
	}
	var as []string
	for _, ad := range addrs {
		as = append(as, ad.IPNet.String())
	}
	slices.Sort(as)
	xdp := a.Xdp != nil && a.Xdp.Attached
	return fmt.Sprintf("index %d mtu %d flags %v mac %s master %d xdp %v addrs %v", a.Index, a.MTU, a.Flags, a.HardwareAddr, a.MasterIndex, xdp, as)
}

// rootSysctls reads, in the root namespace, every sysctl NewDSR writes in
// its own.
func rootSysctls(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, k := range []string{
		"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding",
		"net/ipv4/conf/all/rp_filter", "net/ipv4/conf/all/arp_ignore", "net/ipv4/conf/all/arp_announce",
		"net/ipv4/conf/all/send_redirects", "net/ipv4/conf/all/accept_redirects", "net/ipv6/conf/all/accept_redirects",
		"net/ipv6/conf/all/accept_dad", "net/ipv6/conf/default/accept_dad",
		"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6",
	} {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			t.Fatalf("root sysctl: %v", err)
		}
		out = append(out, k+"="+strings.TrimSpace(string(b)))
	}
	return out
}

// diff lists what changed from before: links that changed or vanished,
// new links with a name a DSR network uses, routes and sysctls. Links
// that others make in the root namespace meanwhile are not ours to judge.
func (now rootState) diff(before rootState) string {
	var b strings.Builder
	for name, was := range before.links {
		if is, ok := now.links[name]; !ok || is != was {
			fmt.Fprintf(&b, "link %s: %q -> %q\n", name, was, is)
		}
	}
	for name := range now.links {
		if _, ok := before.links[name]; !ok && (name == dsrLink || name == dsrBridge || strings.HasPrefix(name, "sw-")) {
			fmt.Fprintf(&b, "new link %s\n", name)
		}
	}
	if !slices.Equal(now.routes, before.routes) {
		fmt.Fprintf(&b, "routes: %v -> %v\n", before.routes, now.routes)
	}
	if !slices.Equal(now.sysctls, before.sysctls) {
		fmt.Fprintf(&b, "sysctls: %v -> %v\n", before.sysctls, now.sysctls)
	}
	return b.String()
}
