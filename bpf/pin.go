// Pinning: the versioned pin directory, bpffs, and the layout hash.
package bpf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
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
	lbMapVips, lbMapConntrack, lbMapMaglev, lbMapBackends,
	lbMapConfig, lbMapVipStats, lbMapBackendStats, lbMapCounters,
	lbMapAcl, lbMapSynSources, lbMapVipRates,
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

// ensureBPFFS makes dir a bpffs: it is one already, or it is absent or
// empty and gets one mounted (mode 0700). A non-empty directory on another
// file system is refused rather than hidden under a mount.
func ensureBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pin path: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("pin path: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("pin path %s is not a bpffs and not empty: mount one there (mount -t bpf bpf %s)", dir, dir)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("pin path %s: mount bpffs: %w", dir, err)
	}
	return nil
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
