// Pinning: a restarted process adopts maps (conntrack survives) and the
// XDP link (program swapped, never detached); other layouts never are.

package bpf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"golang.org/x/sys/unix"
)

// bpffs mounts a private bpffs on a temp dir (the test's own, never
// /sys/fs/bpf) and unmounts it on cleanup.
func bpffs(t *testing.T) string {
	testutil.RequirePriv(t, "mounts a bpffs")
	dir := t.TempDir()
	must(t, unix.Mount("bpf", dir, "bpf", 0, "mode=0700"))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func pinOptions(dir string) Options {
	o := testOptions
	o.PinPath = dir
	return o
}

// TestPinAdopt: entries written by one process are there for the next;
// a different layout version gets its own empty maps; a size change is
// refused; Unpin starts over.
func TestPinAdopt(t *testing.T) {
	dir := bpffs(t)
	f := flowTo(vip4TCP)
	lb1 := pinFirstLife(t, dir, f)
	lb2 := newTestLB(t, pinOptions(dir))
	if lb2.PinDir() != lb1.PinDir() {
		t.Fatalf("pin dir moved: %s -> %s", lb1.PinDir(), lb2.PinDir())
	}
	pinCheckAdopted(t, lb2, f)

	lb3, err := load(pinOptions(dir), layoutVersion+1)
	must(t, err)
	t.Cleanup(func() { lb3.Close(); lb3.Unpin() })
	if lb3.PinDir() == lb2.PinDir() {
		t.Fatal("a new layout version reused the pin dir")
	}
	if _, err := lb3.LookupFlow(f); !errors.Is(err, ErrNotFound) {
		t.Fatalf("new layout adopted conntrack: %v", err)
	}

	bigger := pinOptions(dir)
	bigger.ConntrackSize *= 2
	if lb, err := Load(bigger); !errors.Is(err, ErrPinMismatch) {
		if lb != nil {
			lb.Close()
		}
		t.Fatalf("size change: %v, want ErrPinMismatch", err)
	}

	must(t, lb2.Unpin())
	if _, err := os.Stat(lb2.PinDir()); !os.IsNotExist(err) {
		t.Fatalf("pin dir after Unpin: %v", err)
	}
	lb4 := newTestLB(t, pinOptions(dir))
	if _, err := lb4.LookupFlow(f); !errors.Is(err, ErrNotFound) {
		t.Fatalf("entry after Unpin: %v", err)
	}
	must(t, lb4.Unpin())
}

// pinFirstLife configures a pinned balancer, pins flow f to backend 3
// with a SYN, and closes it.
func pinFirstLife(t *testing.T, dir string, f l4.Flow) *LB {
	lb := newTestLB(t, pinOptions(dir))
	addBackend(t, lb, 3, be4Near)
	addVIP(t, lb, vip4TCP, 2, l4.ForwardL2, l4.HashFiveTuple, []uint32{3})
	frame, _ := frameSpec{flow: f, flags: thSYN}.build()
	if ret, _ := (runner{prog: lb.objs.XdpLb}).run(t, frame); ret != xdpTX {
		t.Fatalf("verdict %s", verdictName(ret))
	}
	must(t, lb.Close())
	return lb
}

// pinCheckAdopted: the second life sees the first one's conntrack entry,
// VIP, table and counters, and forwards f without being configured.
func pinCheckAdopted(t *testing.T, lb *LB, f l4.Flow) {
	if fe, err := lb.LookupFlow(f); err != nil || fe.Backend != 3 {
		t.Fatalf("conntrack after restart: %+v %v", fe, err)
	}
	if e, err := lb.LookupVIP(vip4TCP); err != nil || e.Index != 2 {
		t.Fatalf("vip after restart: %+v %v", e, err)
	}
	if tab, err := lb.MaglevTable(2); err != nil || len(tab) != 1 || tab[0] != 3 {
		t.Fatalf("table after restart: %v %v", tab, err)
	}
	frame, _ := frameSpec{flow: f, flags: thACK}.build()
	d := counterDelta(t, lb, func() { runner{prog: lb.objs.XdpLb}.run(t, frame) })
	onlyCounters(t, d, CounterCTHit, CounterTX)
	if vs, _ := lb.VIPStats(2); vs.Packets != 2 {
		t.Errorf("vip stats across restart %+v, want 2 packets", vs)
	}
}

// TestPinDirName: the directory names the version and changes with any
// map layout change.
func TestPinDirName(t *testing.T) {
	spec, err := loadLb()
	must(t, err)
	a, err := pinDirName(spec, 1)
	must(t, err)
	if !strings.HasPrefix(a, "v1-") {
		t.Fatalf("dir %q", a)
	}
	if b, _ := pinDirName(spec, 2); b == a {
		t.Fatal("version not in the name")
	}
	spec.Maps[lbMapConntrack].MaxEntries++
	if b, _ := pinDirName(spec, 1); b != a {
		t.Fatal("a size change changed the layout name")
	}
	spec.Maps[lbMapConntrack].ValueSize += 8
	if b, _ := pinDirName(spec, 1); b == a {
		t.Fatal("a value size change kept the layout name")
	}
	spec, _ = loadLb()
	spec.Maps[lbMapBackends].Value = spec.Maps[lbMapVips].Value // same size class, other fields
	if b, _ := pinDirName(spec, 1); b == a {
		t.Fatal("a value type change kept the layout name")
	}
}

// TestPinMountsBPFFS: a pin path that does not exist becomes a bpffs; a
// non-empty directory on another file system is refused.
func TestPinMountsBPFFS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pins")
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	lb := newTestLB(t, pinOptions(dir))
	var st unix.Statfs_t
	must(t, unix.Statfs(dir, &st))
	if st.Type != unix.BPF_FS_MAGIC {
		t.Fatalf("pin path is not a bpffs (type %#x)", st.Type)
	}
	must(t, lb.Unpin())

	busy := t.TempDir()
	must(t, os.WriteFile(filepath.Join(busy, "file"), nil, 0o600))
	if lb, err := Load(pinOptions(busy)); err == nil || !strings.Contains(err.Error(), "not a bpffs") {
		if lb != nil {
			lb.Close()
		}
		t.Fatalf("non-empty non-bpffs pin path: %v", err)
	}
}

// TestPinnedLinkHandover: a restarted balancer swaps its program into the
// pinned link (same link, new program, never detached), also from an
// older layout's directory (whose pins it then removes); Detach then
// removes it.
func TestPinnedLinkHandover(t *testing.T) {
	dir := bpffs(t)
	ns, idx := decapNet(t)
	lb1 := newTestLB(t, pinOptions(dir))
	ns.MustDo(t, func() error { return lb1.Attach(idx, AttachDriver) })
	link1 := attachedLinkID(t, lb1, idx)
	must(t, lb1.Close())
	if name, _ := attachedName(t, ns, idx); name != "xdp_lb" {
		t.Fatalf("after Close with pinning: %q attached, want xdp_lb", name)
	}

	lb2, err := load(pinOptions(dir), layoutVersion+1) // a newer layout takes over
	must(t, err)
	t.Cleanup(func() { lb2.Close(); lb2.Unpin() })
	ns.MustDo(t, func() error { return lb2.Attach(idx, AttachDriver) })
	if link2 := attachedLinkID(t, lb2, idx); link2 != link1 {
		t.Fatalf("link replaced (%d -> %d), want the same link updated", link1, link2)
	}
	if got, want := attachedProgID(t, ns, idx), progIDOf(t, lb2.objs.XdpLb); got != want {
		t.Fatalf("attached program %d, want the new one %d", got, want)
	}
	if _, err := os.Stat(filepath.Join(lb2.PinDir(), linkPinName(idx))); err != nil {
		t.Fatalf("link not re-pinned in the new layout dir: %v", err)
	}
	if _, err := os.Stat(lb1.PinDir()); !os.IsNotExist(err) {
		t.Fatalf("older layout's pins left behind: %v", err)
	}
	must(t, lb2.Detach())
	if name, _ := attachedName(t, ns, idx); name != "" {
		t.Fatalf("after Detach: %q attached", name)
	}
}

func attachedLinkID(t *testing.T, lb *LB, ifindex int) uint32 {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	info, err := lb.links[ifindex].Info()
	must(t, err)
	return uint32(info.ID)
}
