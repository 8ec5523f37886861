// Pin paths that would not outlive the process are refused with the fix;
// the shutdown check and DetachPinned say what is really there.

package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
	"golang.org/x/sys/unix"
)

// inPrivateMountNS runs fn on an OS thread that has its own mount
// namespace (a copy of the test's, as `ip netns exec` and systemd's
// sandboxing give a process): mounts fn makes there vanish with it. The
// thread is never reused (its goroutine ends locked).
func inPrivateMountNS(t *testing.T, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			errc <- fmt.Errorf("make / a slave: %w", err)
			return
		}
		errc <- fn()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// wantPinError checks that err refuses dir and tells how to fix it.
func wantPinError(err error, dir, why string) error {
	if err == nil {
		return fmt.Errorf("%s: accepted", dir)
	}
	for _, s := range []string{why, "mount -t bpf bpf " + dir} {
		if !strings.Contains(err.Error(), s) {
			return fmt.Errorf("%s: error %q lacks %q", dir, err, s)
		}
	}
	return nil
}

func isBPFFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.BPF_FS_MAGIC
}

// TestPinPathPrivateMountNS: in a private mount namespace, Load refuses to
// mount a bpffs that would vanish with the process (and leaves none
// mounted), refuses a bpffs mounted only there, and accepts one the host
// has; CheckPinPath says the same beforehand, changing nothing.
func TestPinPathPrivateMountNS(t *testing.T) {
	host := bpffs(t) // mounted in the test's (the host's) namespace
	absent := filepath.Join(t.TempDir(), "pins")
	private := t.TempDir()
	inPrivateMountNS(t, func() error {
		if err := wantPinError(CheckPinPath(absent), absent, "exist only in its own mount namespace"); err != nil {
			return fmt.Errorf("CheckPinPath: %w", err)
		}
		if _, err := os.Stat(absent); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("CheckPinPath created %s: %v", absent, err)
		}
		lb, err := Load(pinOptions(absent))
		if lb != nil {
			lb.Close()
		}
		if err := wantPinError(err, absent, "exist only in its own mount namespace"); err != nil {
			return fmt.Errorf("Load: %w", err)
		}
		if isBPFFS(absent) {
			return fmt.Errorf("Load left its private bpffs mounted on %s", absent)
		}

		if err := unix.Mount("bpf", private, "bpf", 0, ""); err != nil {
			return err
		}
		for name, err := range map[string]error{"CheckPinPath": CheckPinPath(private), "Load": loadErr(pinOptions(private))} {
			if err := wantPinError(err, private, "mounted only in this process's mount namespace"); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}

		sub := filepath.Join(host, "l4lb")
		if err := CheckPinPath(sub); err != nil {
			return fmt.Errorf("CheckPinPath on the host's bpffs: %w", err)
		}
		lb, err = Load(pinOptions(sub))
		if err != nil {
			return fmt.Errorf("Load on the host's bpffs: %w", err)
		}
		defer lb.Close()
		return lb.Unpin()
	})
}

func loadErr(o Options) error {
	lb, err := Load(o)
	if lb != nil {
		lb.Close()
	}
	return err
}

// TestPinPathFixes: every refused pin path names the fix, and a path
// inside a bpffs is made there, not hidden under a bpffs of its own.
func TestPinPathFixes(t *testing.T) {
	testutil.RequirePriv(t, "mounts bpffs")
	file := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(file, nil, 0o600))
	busy := filepath.Dir(file)
	for dir, why := range map[string]string{
		filepath.Join(file, "pins"): file + " is not a directory",
		busy:                        "not a bpffs and not empty",
	} {
		if err := wantPinError(CheckPinPath(dir), dir, why); err != nil {
			t.Errorf("CheckPinPath: %v", err)
		}
		if err := wantPinError(loadErr(pinOptions(dir)), dir, why); err != nil {
			t.Errorf("Load: %v", err)
		}
	}

	root := bpffs(t)
	inside := filepath.Join(root, "a", "b")
	lb := newTestLB(t, pinOptions(inside))
	defer lb.Unpin()
	devOf := func(p string) string {
		dev, ok, err := bpffsDev(p)
		if err != nil || !ok {
			t.Fatalf("%s: bpffs %v, %v", p, ok, err)
		}
		return dev
	}
	if devOf(inside) != devOf(root) {
		t.Fatalf("%s got a bpffs of its own instead of a directory in %s's", inside, root)
	}
}

// TestLinkOutlivesProcess: the pinned link of this process on a host
// bpffs passes; once its pin is gone it does not (the program would go
// with the process), and an unpinned balancer never does.
func TestLinkOutlivesProcess(t *testing.T) {
	dir := bpffs(t)
	ns, idx := decapNet(t)
	lb := newTestLB(t, pinOptions(dir))
	t.Cleanup(func() { lb.Detach(); lb.Unpin() })
	ns.MustDo(t, func() error { return lb.Attach(idx, AttachGeneric) })
	if err := lb.LinkOutlivesProcess(idx); err != nil {
		t.Fatalf("pinned on the host's bpffs: %v", err)
	}
	must(t, os.Remove(filepath.Join(lb.PinDir(), linkPinName(idx))))
	if err := lb.LinkOutlivesProcess(idx); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("pin removed: %v", err)
	}
	plain := newTestLB(t, testOptions)
	if err := plain.LinkOutlivesProcess(idx); err == nil {
		t.Fatal("an unpinned balancer outlives the process")
	}
}

// TestDetachPinned: nothing pinned (an absent root, which stays absent, or
// an empty bpffs) detaches nothing; a stopped balancer's pinned link is
// taken off with its maps; what is not l4lb's is left alone.
func TestDetachPinned(t *testing.T) {
	ns, idx := decapNet(t)
	absent := filepath.Join(t.TempDir(), "none")
	dir := bpffs(t)
	must(t, os.Mkdir(filepath.Join(dir, "not-ours"), 0o700))
	for _, root := range []string{absent, dir} {
		var u Unpinned
		ns.MustDo(t, func() (err error) { u, err = DetachPinned(root, idx); return err })
		if u.Detached() || len(u.LinkPins)+len(u.Dirs)+len(u.Kept) != 0 || u.Attached != "" {
			t.Fatalf("%s with nothing pinned: %+v", root, u)
		}
	}
	if _, err := os.Stat(absent); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("DetachPinned created %s: %v", absent, err)
	}

	lb := newTestLB(t, pinOptions(dir))
	ns.MustDo(t, func() error { return lb.Attach(idx, AttachGeneric) })
	pinDir := lb.PinDir()
	must(t, lb.Close())
	if name, _ := attachedName(t, ns, idx); name != lbProgName {
		t.Fatalf("after Close with pins: %q attached", name)
	}
	var u Unpinned
	ns.MustDo(t, func() (err error) { u, err = DetachPinned(dir, idx); return err })
	if !u.Detached() || len(u.LinkPins) != 1 || len(u.Dirs) != 1 || u.Dirs[0].Path != pinDir || u.Dirs[0].Pins != len(pinnedMaps) {
		t.Fatalf("detach of a stopped balancer: %+v", u)
	}
	if name, _ := attachedName(t, ns, idx); name != "" {
		t.Fatalf("after DetachPinned: %q attached", name)
	}
	if _, err := os.Stat(filepath.Join(dir, "not-ours")); err != nil {
		t.Fatalf("a directory that is not l4lb's was touched: %v", err)
	}
	if _, err := os.Stat(pinDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pin dir left: %v", err)
	}
}
