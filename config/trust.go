// LoadTrusted: refuse a config file that a user other than root (or the
// daemon's own user) could change, as sshd's StrictModes does.

package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// ErrUntrusted marks a config file refused for its owner or mode.
var ErrUntrusted = errors.New("config file could be changed by another user")

// LoadTrusted is Load for the daemon and `l4lb check`: the file must be
// owned by root or by euid and not writable by group or others, and so
// must every directory above it (a directory writable by others is
// allowed only with the sticky bit and owned by root, like /tmp). The
// file is checked through the descriptor it is read from, so it cannot
// be swapped between the check and the read. Whoever can write the file
// chooses the backends traffic goes to and the program attached to the
// NIC of a process that runs as root.
func LoadTrusted(path string, euid int) (*Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	data, err := readFile(path, func(fi os.FileInfo) error { return trustedFile(path, fi, euid) })
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	if err := trustedDirs(abs, euid); err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return Parse(path, data)
}

// trustedFile checks the config file's own owner and mode.
func trustedFile(path string, fi os.FileInfo, euid int) error {
	uid, gid := owner(fi)
	found := describe(fi, uid, gid)
	switch {
	case uid != 0 && uid != euid:
		return untrusted("%s is owned by %s, not root (%s): fix: chown root %s", path, userName(uid), found, path)
	case fi.Mode().Perm()&0o022 != 0:
		return untrusted("%s is writable by %s (%s): fix: chmod go-w %s", path, writers(fi.Mode()), found, path)
	}
	return nil
}

// trustedDirs checks every directory above path, both as given and with
// symbolic links resolved: whoever can write any of them can replace the
// file (or the link to it).
func trustedDirs(abs string, euid int) error {
	chains := []string{filepath.Dir(abs)}
	if real, err := filepath.EvalSymlinks(abs); err == nil && filepath.Dir(real) != chains[0] {
		chains = append(chains, filepath.Dir(real))
	}
	seen := map[string]bool{}
	for _, dir := range chains {
		for {
			if !seen[dir] {
				seen[dir] = true
				if err := trustedDir(dir, euid); err != nil {
					return err
				}
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return nil
}

// trustedDir checks one directory above the config file.
func trustedDir(dir string, euid int) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	uid, gid := owner(fi)
	found := describe(fi, uid, gid)
	m := fi.Mode()
	sticky := m&fs.ModeSticky != 0
	switch {
	case uid != 0 && uid != euid:
		return untrusted("directory %s is owned by %s, not root (%s): fix: chown root %s", dir, userName(uid), found, dir)
	case m.Perm()&0o022 != 0 && !(sticky && uid == 0):
		return untrusted("directory %s is writable by %s (%s): fix: chmod go-w %s", dir, writers(m), found, dir)
	}
	return nil
}

func untrusted(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUntrusted}, a...)...)
}

// owner returns a file's owner and group.
func owner(fi os.FileInfo) (uid, gid int) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, -1
	}
	return int(st.Uid), int(st.Gid)
}

// describe says what was found: "mode 0666, owner root, group root".
func describe(fi os.FileInfo, uid, gid int) string {
	mode := uint32(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return fmt.Sprintf("mode %04o, owner %s, group %s", mode, userName(uid), groupName(gid))
}

// writers names who besides the owner may write: "group", "others" or both.
func writers(m fs.FileMode) string {
	switch m.Perm() & 0o022 {
	case 0o022:
		return "group and others"
	case 0o020:
		return "group"
	}
	return "others"
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(uid)
}

func groupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return g.Name
	}
	return "gid " + strconv.Itoa(gid)
}
