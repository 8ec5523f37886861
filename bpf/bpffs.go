// bpffs: whether a pin path is on a bpffs, and whether that bpffs outlives this process.

package bpf

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount tables: the host's (PID 1's mount namespace, which lives as long
// as the machine or container) and this thread's (which may be a private
// namespace that dies with the process: ip netns exec, systemd's
// ProtectSystem and friends).
const (
	hostMountinfo = "/proc/1/mountinfo"
	selfMountinfo = "/proc/thread-self/mountinfo"
)

// ErrPinUnverified is wrapped by the pin path checks when they cannot tell
// whether the bpffs outlives this process (PID 1's mount table cannot be
// read, and the mount is not a copy of another namespace's).
var ErrPinUnverified = errors.New("cannot tell whether the bpffs outlives this process")

// errPinPrivate is wrapped when the bpffs is mounted only in this
// process's mount namespace: its pins go when that namespace does.
var errPinPrivate = errors.New("its bpffs is mounted only in this process's mount namespace (ip netns exec, systemd sandboxing), so the pins would vanish with l4lb")

// pinPathError is a pin path problem with the operator's fix.
func pinPathError(dir string, err error) error {
	return fmt.Errorf("pin path %s: %w; pins must be on a bpffs that outlives l4lb: mount one in the host's mount namespace "+
		"(mount -t bpf bpf %s) or use a directory on a bpffs the host has mounted (systemd mounts one on /sys/fs/bpf)", dir, err, dir)
}

// bpffsDev is the device ("major:minor", as mount tables write it) of the
// bpffs holding path; ok is false when path is on another file system.
func bpffsDev(path string) (dev string, ok bool, err error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err != nil {
		return "", false, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	if sfs.Type != unix.BPF_FS_MAGIC {
		return "", false, nil
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", false, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)), true, nil
}

// mount is one line of a mountinfo table.
type mount struct {
	id, dev, point, fstype string
	optional               []string // propagation: shared:N, master:N, ...
}

// readMounts parses a mountinfo file (proc(5)).
func readMounts(path string) ([]mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 7 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, mount{id: fields[0], dev: fields[2], point: fields[4], fstype: fields[sep+1], optional: fields[6:sep]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// outlivesProcess says whether the bpffs with device dev stays after this
// process and its mount namespace are gone: nil when PID 1's mount
// namespace has it too (the superblock, and its pins, live while any
// mount of it does), errPinPrivate when it does not. Without PID 1's
// table, a mount of ours that is a slave of another namespace's
// (master:N, systemd's sandboxing) counts; else ErrPinUnverified.
func outlivesProcess(dev string) error {
	host, err := readMounts(hostMountinfo)
	if err == nil {
		if hasBPFFS(host, dev, false) {
			return nil
		}
		return errPinPrivate
	}
	self, serr := readMounts(selfMountinfo)
	if serr == nil && hasBPFFS(self, dev, true) {
		return nil
	}
	return fmt.Errorf("%w (reading %s: %v)", ErrPinUnverified, hostMountinfo, err)
}

// hasBPFFS reports whether mounts hold the bpffs dev (with slave, only as
// a slave of another mount).
func hasBPFFS(mounts []mount, dev string, slave bool) bool {
	for _, m := range mounts {
		if m.fstype != "bpf" || m.dev != dev {
			continue
		}
		if !slave {
			return true
		}
		for _, o := range m.optional {
			if strings.HasPrefix(o, "master:") {
				return true
			}
		}
	}
	return false
}

// inHostMountNS reports whether this thread shares PID 1's mount
// namespace, where a bpffs it mounts outlives it; known is false when
// either mount table cannot be read. Mount ids are unique across
// namespaces (a namespace's copy of a mount gets a new one), so one id in
// both tables means one namespace. (/proc/1/ns/mnt would say it directly,
// but reading it needs ptrace rights over PID 1 that a sandboxed root
// lacks; the tables are world-readable.)
func inHostMountNS() (same, known bool) {
	self, err := readMounts(selfMountinfo)
	if err != nil || len(self) == 0 {
		return false, false
	}
	host, err := readMounts(hostMountinfo)
	if err != nil {
		return false, false
	}
	for _, m := range host {
		if m.id == self[0].id {
			return true, true
		}
	}
	return false, true
}

// nearestExisting is dir or its closest ancestor that exists.
func nearestExisting(dir string) string {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			return d
		}
	}
}

// isEmptyDir reports whether dir is a directory with nothing in it.
func isEmptyDir(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	return len(entries) == 0, nil
}

// CheckPinPath tells, changing nothing, whether Load could pin under dir
// so that the pins (and the XDP program's link) outlive this process: nil,
// or what Load would refuse, with the fix. When it cannot tell (Load
// would mount a bpffs, and this process's mount namespace cannot be
// compared with the host's) it says nil: Load checks after mounting.
func CheckPinPath(dir string) error {
	base := nearestExisting(dir)
	dev, ok, err := bpffsDev(base)
	switch {
	case err != nil:
		return pinPathError(dir, err)
	case ok:
		if err := outlivesProcess(dev); err != nil {
			return pinPathError(dir, err)
		}
		return nil
	}
	if err := mountable(dir, base); err != nil {
		return pinPathError(dir, err)
	}
	if same, known := inHostMountNS(); known && !same {
		return pinPathError(dir, errMountPrivate)
	}
	return nil
}

// errMountPrivate: a bpffs that l4lb mounted here would be private.
var errMountPrivate = errors.New("not a bpffs, and one that l4lb mounted there would exist only in its own mount namespace (ip netns exec, systemd sandboxing) and vanish with it")

// mountable says why a bpffs cannot be mounted on dir (not a bpffs), whose
// nearest existing ancestor (or itself) is base: dir must be an empty
// directory, or absent below a directory.
func mountable(dir, base string) error {
	if fi, err := os.Stat(base); err != nil {
		return err
	} else if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", base)
	}
	if base != dir {
		return nil
	}
	empty, err := isEmptyDir(dir)
	if err != nil || !empty {
		return notBPFFS(err)
	}
	return nil
}

// notBPFFS explains why a directory that is not a bpffs is refused.
func notBPFFS(readErr error) error {
	if readErr != nil {
		return fmt.Errorf("not a bpffs: %w", readErr)
	}
	return errors.New("not a bpffs and not empty (l4lb mounts a bpffs only on an empty or absent directory)")
}

// ensureBPFFS makes dir a directory on a bpffs that outlives this process:
// on one already (made inside it if absent), or an empty or absent
// directory on which a bpffs is mounted (mode 0700) when this process is
// in the host's mount namespace. A bpffs that would vanish with the
// process is refused (one it mounted is unmounted again), as is a
// non-empty directory on another file system: never hidden under a mount.
func ensureBPFFS(dir string) error {
	base := nearestExisting(dir)
	dev, ok, err := bpffsDev(base)
	if err != nil {
		return pinPathError(dir, err)
	}
	if ok {
		if err := outlivesProcess(dev); err != nil {
			return pinPathError(dir, err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return pinPathError(dir, err)
		}
		return nil
	}
	if err := mountable(dir, base); err != nil {
		return pinPathError(dir, err)
	}
	return mountBPFFS(dir)
}

// mountBPFFS mounts a bpffs on dir (created if absent) and keeps it only
// if it outlives this process.
func mountBPFFS(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return pinPathError(dir, err)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return pinPathError(dir, fmt.Errorf("mount bpffs: %w", err))
	}
	dev, ok, err := bpffsDev(dir)
	if err == nil && ok {
		err = outlivesProcess(dev)
	} else if err == nil {
		err = errors.New("mounted a bpffs, but it is not there")
	}
	if err == nil {
		return nil
	}
	_ = unix.Unmount(dir, unix.MNT_DETACH)
	if errors.Is(err, errPinPrivate) {
		err = errMountPrivate
	}
	return pinPathError(dir, err)
}
