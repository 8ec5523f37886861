// Pinning: the versioned pin directory, bpffs, and the layout hash.

package bpf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// layoutVersion names the meaning of the maps' contents. Bump it when a
// field keeps its type but changes meaning (a flag bit, an index rule):
// the layout hash below already covers every change of type, size or name.
const layoutVersion = 1

// pinnedMaps are the maps a restarted process adopts. Everything the
// control plane writes is among them, so a restart that dies before it
// rewrites the maps still forwards as before.
var pinnedMaps = []string{
	lbMapVips, lbMapVipRefs, lbMapConntrack, lbMapMaglev, lbMapBackends,
	lbMapConfig, lbMapVipStats, lbMapBackendStats, lbMapCounters,
	lbMapAcl, lbMapSynSources, lbMapVipRates,
	lbMapNatFlows, lbMapNatReverse,
}

// pinDirName is the subdirectory of PinPath for a layout: the version and
// a hash of every pinned map's type, key and value layout, so that maps of
// an older binary are never adopted when anything in them changed.
func pinDirName(spec *ebpf.CollectionSpec, version int) (string, error) {
	h := sha256.New()
	for _, name := range pinnedMaps {
		ms, ok := spec.Maps[name]
		if !ok {
			return "", fmt.Errorf("map %s missing from the object", name)
		}
		describeMap(h, name, ms)
	}
	return fmt.Sprintf("v%d-%s", version, hex.EncodeToString(h.Sum(nil))[:12]), nil
}

// describeMap writes what makes a map's contents compatible, leaving out
// max_entries (a size, checked by the kernel object itself).
func describeMap(w io.Writer, name string, ms *ebpf.MapSpec) {
	fmt.Fprintf(w, "map %s type %v key %d value %d flags %#x\n", name, ms.Type, ms.KeySize, ms.ValueSize, ms.Flags)
	describeType(w, ms.Key, 0)
	describeType(w, ms.Value, 0)
	if ms.InnerMap != nil {
		describeMap(w, name+".inner", ms.InnerMap)
	}
}

// describeType writes a BTF type with member names, offsets and sizes.
func describeType(w io.Writer, t btf.Type, depth int) {
	if depth > 8 {
		fmt.Fprint(w, "...")
		return
	}
	switch t := t.(type) {
	case nil:
		fmt.Fprint(w, "none;")
	case *btf.Struct:
		fmt.Fprintf(w, "struct %s %d{", t.Name, t.Size)
		describeMembers(w, t.Members, depth)
	case *btf.Union:
		fmt.Fprintf(w, "union %s %d{", t.Name, t.Size)
		describeMembers(w, t.Members, depth)
	case *btf.Array:
		fmt.Fprintf(w, "[%d]", t.Nelems)
		describeType(w, t.Type, depth+1)
	case *btf.Typedef:
		fmt.Fprintf(w, "%s=", t.Name)
		describeType(w, t.Type, depth+1)
	case *btf.Int:
		fmt.Fprintf(w, "int %s %d %v;", t.Name, t.Size, t.Encoding)
	case *btf.Enum:
		fmt.Fprintf(w, "enum %s %d;", t.Name, t.Size)
	case *btf.Const, *btf.Volatile, *btf.Restrict, *btf.TypeTag:
		describeType(w, btf.QualifiedType(t), depth+1)
	default:
		fmt.Fprintf(w, "%T;", t)
	}
}

func describeMembers(w io.Writer, ms []btf.Member, depth int) {
	for _, m := range ms {
		fmt.Fprintf(w, "%s@%d:%d ", m.Name, m.Offset, m.BitfieldSize)
		describeType(w, m.Type, depth+1)
	}
	fmt.Fprint(w, "}")
}

// preparePins mounts bpffs if needed, creates the layout's directory and
// marks the maps for pinning by name in it. It returns the directory.
func preparePins(spec *ebpf.CollectionSpec, root string, version int) (string, error) {
	name, err := pinDirName(spec, version)
	if err != nil {
		return "", err
	}
	if err := ensureBPFFS(root); err != nil {
		return "", err
	}
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("pin dir: %w", err)
	}
	for _, m := range pinnedMaps {
		spec.Maps[m].Pinning = ebpf.PinByName
	}
	return dir, nil
}

// linkPinName is the pin file of the XDP link on ifindex.
func linkPinName(ifindex int) string { return fmt.Sprintf("link_xdp_%d", ifindex) }

// olderLinkPins lists pins of the XDP link on ifindex left by other layout
// versions under root: a new binary takes the interface over from them.
func olderLinkPins(root, current string, ifindex int) []string {
	found, _ := filepath.Glob(filepath.Join(root, "*", linkPinName(ifindex)))
	return slices.DeleteFunc(found, func(p string) bool { return filepath.Dir(p) == current })
}

// removeIfEmpty removes dir when nothing is pinned in it any more.
func removeIfEmpty(dir string) error {
	err := os.Remove(dir)
	if err == nil || errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOTEMPTY) {
		return nil
	}
	return err
}

// removePins removes every pin in dir, then dir. A pinned map lives on
// while a process holds it open; nothing else does.
func removePins(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("remove pins: %w", err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("remove pins: %w", err)
		}
	}
	return removeIfEmpty(dir)
}

// LinkOutlivesProcess says whether the XDP program this LB attached to
// ifindex stays attached after the process exits: nil when its link is
// pinned (the pin is the link this LB holds) on a bpffs that the host's
// mount namespace has too; otherwise why not, wrapping ErrPinUnverified
// when that cannot be told.
func (lb *LB) LinkOutlivesProcess(ifindex int) error {
	if lb.pinDir == "" {
		return errors.New("the link is not pinned")
	}
	lb.mu.Lock()
	held := lb.links[ifindex]
	lb.mu.Unlock()
	if held == nil {
		return fmt.Errorf("no link on ifindex %d", ifindex)
	}
	path := filepath.Join(lb.pinDir, linkPinName(ifindex))
	pinned, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return fmt.Errorf("its link pin %s is gone: %w", path, err)
	}
	defer pinned.Close()
	a, errA := held.Info()
	b, errB := pinned.Info()
	if err := errors.Join(errA, errB); err != nil {
		return fmt.Errorf("link pin %s: %w", path, err)
	}
	if a.ID != b.ID {
		return fmt.Errorf("the pin %s holds link %d, not this process's link %d", path, b.ID, a.ID)
	}
	dev, ok, err := bpffsDev(path)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%s is not on a bpffs", path)
	}
	return outlivesProcess(dev)
}

// Unpinned is what DetachPinned found and did.
type Unpinned struct {
	// LinkPins are the pins of XDP links on the interface that were
	// removed (at most one per layout directory).
	LinkPins []string
	// Dirs are the layout directories removed with their pins.
	Dirs []RemovedDir
	// Kept are layout directories left in place: they still pin the link
	// of another interface, which uses their maps.
	Kept []string
	// Attached names the XDP program on the interface afterwards ("" =
	// none), and AttachedID its id: a program that a removed pin held is
	// still there while another process holds its link.
	Attached   string
	AttachedID uint32
}

// RemovedDir is a layout directory DetachPinned removed, and how many
// pins (maps, links) were in it.
type RemovedDir struct {
	Path string
	Pins int
}

// Detached reports whether a pinned link was removed and no xdp_lb runs on
// the interface any more.
func (u Unpinned) Detached() bool { return len(u.LinkPins) > 0 && u.Attached != lbProgName }

// isLayoutDir reports whether name is one pinDirName gives:
// v<version>-<12 hex digits>.
func isLayoutDir(name string) bool {
	version, hash, ok := strings.Cut(strings.TrimPrefix(name, "v"), "-")
	if !ok || !strings.HasPrefix(name, "v") || version == "" || len(hash) != 12 {
		return false
	}
	digits := func(s, set string) bool { return strings.Trim(s, set) == "" }
	return digits(version, "0123456789") && digits(hash, "0123456789abcdef")
}

// lbProgName is the kernel name of xdp_lb.
const lbProgName = "xdp_lb"

// DetachPinned takes off the XDP link that a stopped process left pinned
// under root for ifindex, and removes the pins of every layout directory
// that holds no other interface's link. It never mounts, creates or loads
// anything: a root that does not exist or is not a bpffs has nothing
// pinned. It reports what it found and did; the program is gone only
// when no other process holds its link (Unpinned.Detached).
func DetachPinned(root string, ifindex int) (Unpinned, error) {
	var u Unpinned
	if _, ok, err := bpffsDev(root); err != nil || !ok {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return u, err
		}
		return u, u.readAttached(ifindex)
	}
	dirs, err := filepath.Glob(filepath.Join(root, "v*-*"))
	if err != nil {
		return u, err
	}
	for _, dir := range dirs {
		if !isLayoutDir(filepath.Base(dir)) {
			continue // not ours: pin_path may be a shared bpffs
		}
		if err := u.unpinDir(dir, ifindex); err != nil {
			return u, err
		}
	}
	return u, u.readAttached(ifindex)
}

// unpinDir removes dir's link pin for ifindex, then, when no other link is
// pinned there, the directory with its maps.
func (u *Unpinned) unpinDir(dir string, ifindex int) error {
	path := filepath.Join(dir, linkPinName(ifindex))
	if _, err := os.Lstat(path); err == nil {
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			return fmt.Errorf("load pinned link %s: %w", path, err)
		}
		err = l.Unpin()
		if cerr := l.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("unpin %s: %w", path, err)
		}
		u.LinkPins = append(u.LinkPins, path)
	}
	if others, _ := filepath.Glob(filepath.Join(dir, "link_xdp_*")); len(others) > 0 {
		u.Kept = append(u.Kept, dir)
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("remove pins: %w", err)
	}
	if err := removePins(dir); err != nil {
		return err
	}
	u.Dirs = append(u.Dirs, RemovedDir{Path: dir, Pins: len(entries)})
	return nil
}

// readAttached records the XDP program on ifindex.
func (u *Unpinned) readAttached(ifindex int) (err error) {
	u.Attached, u.AttachedID, err = AttachedProgram(ifindex)
	return err
}

// AttachedProgram names the XDP program attached to ifindex, by any
// process and in any mode, and gives its id ("", 0 when none).
func AttachedProgram(ifindex int) (name string, id uint32, err error) {
	_, cur, err := attachedXDP(ifindex)
	if err != nil || cur == nil {
		return "", 0, err
	}
	name, _, err = progNameTag(ebpf.ProgramID(cur.ProgId))
	return name, cur.ProgId, err
}

// IsBalancer reports whether a program name (AttachedProgram) is xdp_lb.
func IsBalancer(name string) bool { return name == lbProgName }
