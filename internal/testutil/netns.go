package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"
)

// nsCounter makes namespace names unique within the test process; the PID
// makes them unique across processes.
var nsCounter atomic.Uint64

// reapOnce removes, once per test process, namespaces left by test
// processes that died before their cleanups ran (a test timeout, a kill).
var reapOnce sync.Once

// reapStale deletes l4t<pid>-* namespaces whose process is gone. It never
// touches a namespace of a live process or of another naming scheme.
func reapStale() {
	entries, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, "l4t")
		if !ok {
			continue
		}
		pid, _, ok := strings.Cut(rest, "-")
		if !ok || pid == strconv.Itoa(os.Getpid()) {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); os.IsNotExist(err) {
			_ = exec.Command("ip", "netns", "del", name).Run()
		}
	}
}

// Netns is a network namespace a test made; it is deleted on cleanup.
type Netns struct {
	Name string
}

// NewNetns creates a namespace named l4t-<pid>-<n>-<tag> with lo up.
func NewNetns(t testing.TB, tag string) *Netns {
	t.Helper()
	RequirePriv(t, "network namespaces")
	reapOnce.Do(reapStale)
	name := fmt.Sprintf("l4t%d-%d-%s", os.Getpid(), nsCounter.Add(1), tag)
	if len(name) > 40 {
		name = name[:40]
	}
	MustRun(t, "ip", "netns", "add", name)
	n := &Netns{Name: name}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	MustRun(t, "ip", "-n", name, "link", "set", "lo", "up")
	return n
}

// MustRun runs a command and fails the test with its output on error.
func MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// MustExec runs a command inside the namespace.
func (n *Netns) MustExec(t testing.TB, args ...string) string {
	t.Helper()
	return MustRun(t, "ip", append([]string{"netns", "exec", n.Name}, args...)...)
}

// Command returns an unstarted command that runs inside the namespace.
func (n *Netns) Command(args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name}, args...)...)
}

// Do runs fn on an OS thread switched into the namespace. Sockets that fn
// creates stay in the namespace after Do returns, so servers and clients
// made inside can be used from any goroutine.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("get netns: %w", err)
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(n.Name)
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", n.Name, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", n.Name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime discards it when this
			// goroutine exits, so no other goroutine runs in the wrong namespace.
			errc <- fmt.Errorf("return from netns %s: %w", n.Name, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Enter moves the calling goroutine's thread into the namespace for good:
// for a goroutine that locked its OS thread and never unlocks it (the
// runtime discards such a thread when the goroutine ends), such as a loop
// that a test runs inside a namespace.
func (n *Netns) Enter() error {
	target, err := netns.GetFromName(n.Name)
	if err != nil {
		return fmt.Errorf("netns %s: %w", n.Name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return fmt.Errorf("enter netns %s: %w", n.Name, err)
	}
	return nil
}

// MustDo is Do that fails the test on error.
func (n *Netns) MustDo(t testing.TB, fn func() error) {
	t.Helper()
	if err := n.Do(fn); err != nil {
		t.Fatal(err)
	}
}

// Veth connects a and b with a veth pair made directly inside them, assigns
// the addresses (CIDR; either may be empty) and brings both ends up.
func Veth(t testing.TB, a *Netns, aIf, aAddr string, b *Netns, bIf, bAddr string) {
	t.Helper()
	MustRun(t, "ip", "link", "add", aIf, "netns", a.Name, "type", "veth", "peer", "name", bIf, "netns", b.Name)
	for _, e := range []struct {
		ns        *Netns
		dev, addr string
	}{{a, aIf, aAddr}, {b, bIf, bAddr}} {
		if e.addr != "" {
			e.ns.MustExec(t, "ip", "addr", "add", e.addr, "dev", e.dev)
		}
		e.ns.MustExec(t, "ip", "link", "set", e.dev, "up")
	}
}
