// Hosts: the hosts file and the order nsswitch.conf gives it, as the system resolver uses them.

package resolve

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hostsOrder is where the hosts file stands beside DNS ("hosts:" line of
// nsswitch.conf).
type hostsOrder uint8

const (
	filesFirst hostsOrder = iota // files dns: Debian's default, and without nsswitch.conf
	filesLast                    // dns files: the file only when DNS has no address
	filesNever                   // no files source
)

// readHostsOrder reads the hosts line of an nsswitch.conf. Sources other
// than files and dns (myhostname, mdns4_minimal, ...) and actions in
// brackets are not modules l4lb has: they are skipped. A missing file or
// line means files then dns, as Go's and musl's resolvers take it.
func readHostsOrder(path string) hostsOrder {
	data, err := os.ReadFile(path)
	if err != nil {
		return filesFirst
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		db, sources, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(db) != "hosts" {
			continue
		}
		fields := strings.Fields(sources)
		for _, src := range fields {
			switch src {
			case "files":
				return filesFirst
			case "dns":
				if slices.Contains(fields, "files") {
					return filesLast
				}
				return filesNever
			}
		}
		return filesNever
	}
	return filesFirst
}

// hostsFile is a hosts file, read again when it changes (its size, mtime
// or inode). Safe for concurrent use.
type hostsFile struct {
	path string

	mu     sync.Mutex
	stamp  fileStamp
	byName map[string][]netip.Addr // lower-case name or alias -> addresses in file order
}

// fileStamp tells a changed file from the one read before.
type fileStamp struct {
	size  int64
	mtime time.Time
	ino   uint64
	ok    bool // the file existed
}

func stampOf(fi fs.FileInfo) fileStamp {
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime(), ok: true}
	if s, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = s.Ino
	}
	return st
}

// lookup returns the addresses the file gives name, of family fam. A
// missing or unreadable file has no names (the system resolver then asks
// DNS too).
func (h *hostsFile) lookup(name string, fam Family) []netip.Addr {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refresh()
	var out []netip.Addr
	for _, a := range h.byName[strings.ToLower(strings.TrimSuffix(name, "."))] {
		if fam == IPv4 && !a.Is4() || fam == IPv6 && a.Is4() {
			continue
		}
		out = append(out, a)
	}
	return out
}

// refresh reads the file again when it changed since the last read (mu held).
func (h *hostsFile) refresh() {
	var st fileStamp
	fi, err := os.Stat(h.path)
	if err == nil {
		st = stampOf(fi)
	}
	if st == h.stamp && h.byName != nil {
		return
	}
	data, err := os.ReadFile(h.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		data = nil // unreadable: as if empty, and read again next time
		st = fileStamp{}
	}
	h.stamp, h.byName = st, parseHosts(data)
}

// parseHosts reads "address name [alias...]" lines; # starts a comment.
// Addresses with a zone are skipped (backends cannot have one), and
// IPv4-mapped IPv6 addresses become IPv4.
func parseHosts(data []byte) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for line := range strings.SplitSeq(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil || a.Zone() != "" {
			continue
		}
		for _, name := range f[1:] {
			name = strings.ToLower(strings.TrimSuffix(name, "."))
			out[name] = append(out[name], a.Unmap())
		}
	}
	return out
}
