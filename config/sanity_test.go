// Cross-VIP checks (bind conflicts, loops), address classes, warnings, and
// the host checks behind `l4lb check`.

package config_test

import (
	"cmp"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/config"
)

// vipTable is a [[vip]] with one backend.
func vipTable(name, proto, listen, backend string) string {
	return "[[vip]]\nname = \"" + name + "\"\nprotocol = \"" + proto + "\"\nlisten = \"" + listen + "\"\n" +
		"  [[vip.backend]]\n  address = \"" + backend + "\"\n"
}

func TestCrossVIPProblems(t *testing.T) {
	for _, c := range []problemCase{
		{
			name: "wildcard beside specific, tcp",
			src: vipTable("a", "tcp", "0.0.0.0:80", "198.18.1.1:80") +
				"[[vip]]\nname = \"b\"\nlisten = \"198.18.0.1:80\" " + marker + "\n  [[vip.backend]]\n  address = \"198.18.1.2:80\"\n",
			key: "vip[1].listen", vip: "b", msg: "a wildcard and a specific address on one port clash",
		},
		{
			name: "specific before wildcard, udp",
			src: vipTable("a", "udp", "[2001:db8::1]:53", "[2001:db8::9]:53") +
				"[[vip]]\nname = \"b\"\nprotocol = \"udp\"\nlisten = \"[::]:53\" " + marker + "\n  [[vip.backend]]\n  address = \"[2001:db8::8]:53\"\n",
			key: "vip[1].listen", vip: "b", msg: "cannot be bound beside vip \"a\"",
		},
		{
			name: "metrics port",
			src:  "[global]\nmetrics_listen = \"127.0.0.1:9370\"\n" + "[[vip]]\nname = \"a\"\nlisten = \"0.0.0.0:9370\" " + marker + "\n  [[vip.backend]]\n  address = \"198.18.1.1:80\"\n",
			key:  "vip[0].listen", vip: "a", msg: "is also metrics_listen",
		},
		{
			name: "backend is the VIP",
			src:  "[[vip]]\nname = \"a\"\nlisten = \"198.18.0.1:80\"\n  [[vip.backend]]\n  address = \"198.18.0.1:80\" " + marker + "\n",
			key:  "vip[0].backend[0].address", vip: "a", msg: "this VIP's own listener",
		},
		{
			name: "loopback backend of a wildcard VIP",
			src:  "[[vip]]\nname = \"a\"\nlisten = \"0.0.0.0:80\"\n  [[vip.backend]]\n  address = \"127.0.0.5:80\" " + marker + "\n",
			key:  "vip[0].backend[0].address", vip: "a", msg: "this VIP's own listener",
		},
		{
			name: "loop through two VIPs",
			src: "[[vip]]\nname = \"a\"\nlisten = \"198.18.0.1:80\"\n  [[vip.backend]]\n  address = \"198.18.0.2:81\" " + marker + "\n" +
				vipTable("b", "tcp", "198.18.0.2:81", "198.18.0.1:80"),
			key: "vip[0].backend[0].address", vip: "a", msg: `leads back here ("a" -> "b" -> "a")`,
		},
		{
			name: "broadcast backend",
			src:  "[[vip]]\nname = \"a\"\nlisten = \"198.18.0.1:80\"\n  [[vip.backend]]\n  address = \"255.255.255.255:80\" " + marker + "\n",
			key:  "vip[0].backend[0].address", vip: "a", msg: "broadcast address is not a host",
		},
		{
			name: "this-network backend",
			src:  "[[vip]]\nname = \"a\"\nlisten = \"198.18.0.1:80\"\n  [[vip.backend]]\n  address = \"0.1.2.3:80\" " + marker + "\n",
			key:  "vip[0].backend[0].address", vip: "a", msg: "0.0.0.0/8",
		},
		{
			name: "link-local v6 listen",
			src:  "[[vip]]\nname = \"a\"\nlisten = \"[fe80::1]:80\" " + marker + "\n  [[vip.backend]]\n  address = \"198.18.1.1:80\"\n",
			key:  "vip[0].listen", vip: "a", msg: "link-local",
		},
		{
			name: "udp VIP with a postgres check",
			src:  "[[vip]]\nname = \"a\"\nprotocol = \"udp\"\nlisten = \"198.18.0.1:53\"\n  [vip.health]\n  type = \"postgres\" " + marker + "\n  [[vip.backend]]\n  address = \"198.18.1.1:53\"\n",
			key:  "vip[0].health.type", vip: "a", msg: "postgres is a TCP service",
		},
		{
			name: "freebind on an xdp VIP",
			src:  "[xdp]\ninterface = \"veth0\"\n[[vip]]\nname = \"a\"\nmode = \"xdp\"\nfreebind = true " + marker + "\nlisten = \"198.18.0.1:53\"\n  [[vip.backend]]\n  address = \"198.18.1.1:53\"\n",
			key:  "vip[0].freebind", vip: "a", msg: "applies only to mode proxy",
		},
	} {
		t.Run(c.name, c.run)
	}
}

// What is legal together parses without a problem.
func TestCrossVIPAllowed(t *testing.T) {
	for name, src := range map[string]string{
		"v4 and v6 wildcards": vipTable("a", "tcp", "0.0.0.0:80", "198.18.1.1:80") + vipTable("b", "tcp", "[::]:80", "[2001:db8::1]:80"),
		"tcp and udp":         vipTable("a", "tcp", "0.0.0.0:53", "198.18.1.1:53") + vipTable("b", "udp", "198.18.0.1:53", "198.18.1.1:53"),
		"a chain":             vipTable("a", "tcp", "198.18.0.1:80", "198.18.0.2:81") + vipTable("b", "tcp", "198.18.0.2:81", "198.18.1.1:80"),
		"udp backend on a tcp VIP's address": vipTable("a", "tcp", "198.18.0.1:53", "198.18.1.1:53") +
			vipTable("b", "udp", "198.18.0.2:53", "198.18.0.1:53"),
	} {
		if _, err := config.Parse("ok.toml", []byte(src)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestWarnings(t *testing.T) {
	src := `[[vip]]
name = "drained"
listen = "198.18.0.1:80"
  [[vip.backend]]
  address = "198.18.1.1:80"
  weight = 0
  [[vip.backend]]
  address = "198.18.1.2:80"
  weight = 0
[[vip]]
name = "udp-http"
protocol = "udp"
listen = "198.18.0.1:53"
health = { type = "http" }
  [[vip.backend]]
  address = "198.18.1.1:53"
`
	c, err := config.Parse("w.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`w.toml:4: vip "drained": vip[0].backend: every backend has weight 0`,
		`w.toml:14: vip "udp-http": vip[1].health.type: http probes TCP port 53`,
	}
	if len(c.Warnings) != len(want) {
		t.Fatalf("warnings %v, want %d", c.Warnings, len(want))
	}
	for i, w := range want {
		if got := c.Warnings[i].String(); !strings.HasPrefix(got, w) {
			t.Errorf("warning %d = %q, want prefix %q", i, got, w)
		}
	}
}

// fakeHost answers CheckHost's questions from fixed data; a zero count
// stands for a roomy host (64 CPUs, 1Mi files, 64 GiB).
type fakeHost struct {
	addrs  []netip.Addr
	files  map[string]fs.FileMode // path -> type; absent = does not exist
	cpus   int
	nofile uint64
	mem    uint64
}

func (h fakeHost) LocalAddrs() ([]netip.Addr, error) { return h.addrs, nil }
func (h fakeHost) HasInterface(name string) bool     { return name == "veth0" }
func (h fakeHost) CPUs() int                         { return cmp.Or(h.cpus, 64) }
func (h fakeHost) FileLimit() (uint64, error)        { return cmp.Or(h.nofile, 1<<20), nil }
func (h fakeHost) Memory() (uint64, error)           { return cmp.Or(h.mem, 64<<30), nil }

func (h fakeHost) Lstat(path string) (fs.FileInfo, error) {
	if m, ok := h.files[path]; ok {
		return fakeInfo{m}, nil
	}
	return nil, &fs.PathError{Op: "lstat", Path: path, Err: fs.ErrNotExist}
}

type fakeInfo struct{ mode fs.FileMode }

func (f fakeInfo) Name() string       { return "x" }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fakeInfo) Sys() any           { return nil }

func TestCheckHost(t *testing.T) {
	local := []netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.7")}
	for _, tc := range []struct {
		name, src string
		files     map[string]fs.FileMode
		problem   string
		warning   string
		host      fakeHost // CPUs, files and memory
	}{
		{name: "admin socket is the config file", src: "[global]\nadmin_socket = \"/etc/l4lb/l4lb.toml\"\n" + vipTable("a", "tcp", "198.18.0.1:80", "198.18.1.1:80"),
			files: map[string]fs.FileMode{"/etc/l4lb/l4lb.toml": 0}, problem: "exists and is a regular file, not a socket"},
		{name: "admin socket is a directory", src: "[global]\nadmin_socket = \"/run/x\"\n" + vipTable("a", "tcp", "198.18.0.1:80", "198.18.1.1:80"),
			files: map[string]fs.FileMode{"/run/x": fs.ModeDir}, problem: "exists and is a directory"},
		{name: "stale admin socket is fine", src: "[global]\nadmin_socket = \"/run/x.sock\"\n" + vipTable("a", "tcp", "198.18.0.1:80", "198.18.1.1:80"),
			files: map[string]fs.FileMode{"/run/x.sock": fs.ModeSocket}},
		{name: "backend on a local address of a wildcard VIP", src: vipTable("a", "tcp", "0.0.0.0:80", "198.18.0.7:80"),
			problem: `198.18.0.7:80 is a local address, and vip "a" listens on 0.0.0.0:80`},
		{name: "VIP address on no interface", src: vipTable("a", "tcp", "198.18.0.99:80", "198.18.1.1:80"),
			warning: "no interface has 198.18.0.99"},
		{name: "freebind VIP address on no interface", src: strings.Replace(vipTable("a", "tcp", "198.18.0.99:80", "198.18.1.1:80"), "listen", "freebind = true\nlisten", 1)},
		{name: "local backend of a specific VIP", src: vipTable("a", "tcp", "198.18.0.1:80", "198.18.0.7:80")},
		// D13: only when the program is attached at all.
		{name: "xdp interface missing, no xdp user", src: "[xdp]\ninterface = \"nope0\"\n" + vipTable("a", "tcp", "198.18.0.1:80", "198.18.1.1:80")},
		{name: "xdp interface missing, xdp VIP", src: "[xdp]\ninterface = \"nope0\"\n" + strings.Replace(vipTable("a", "udp", "198.18.0.1:53", "198.18.1.1:53"), "listen", "mode = \"xdp\"\nlisten", 1),
			warning: `this host has no interface "nope0"`},
		{name: "xdp interface missing, proxy VIP guarded", src: "[xdp]\ninterface = \"nope0\"\n" + strings.Replace(vipTable("a", "tcp", "198.18.0.1:80", "198.18.1.1:80"), "listen", "deny = [\"198.18.9.0/24\"]\nlisten", 1),
			warning: `this host has no interface "nope0"`},
		{name: "xdp interface present", src: "[xdp]\ninterface = \"veth0\"\n" + strings.Replace(vipTable("a", "udp", "198.18.0.1:53", "198.18.1.1:53"), "listen", "mode = \"xdp\"\nlisten", 1)},
		// D22: numbers far beyond what the host has.
		{name: "workers beyond the CPUs", src: "[global]\nworkers = 1024\n" + vipTable("a", "tcp", "198.18.0.1:80", "198.18.1.1:80"), host: fakeHost{cpus: 2},
			warning: "1024 event loops on 2 CPUs: a loop beyond one per CPU only adds context switches"},
		{name: "workers one per CPU", src: "[global]\nworkers = 2\n" + vipTable("a", "tcp", "198.18.0.1:80", "198.18.1.1:80"), host: fakeHost{cpus: 2}},
		{name: "pipes beyond memory", src: "[global]\nmax_pipes = 4194304\npipe_size = 16777216\n" + vipTable("a", "tcp", "198.18.0.1:80", "198.18.1.1:80"), host: fakeHost{mem: 8 << 30},
			warning: "max_pipes 4194304 x pipe_size 16 MiB = 64 TiB of pipe buffers, more than this host's 8 GiB of memory"},
		{name: "pipes within memory", src: "[global]\nmax_pipes = 1024\n" + vipTable("a", "tcp", "198.18.0.1:80", "198.18.1.1:80"), host: fakeHost{mem: 8 << 30}},
		{name: "sessions beyond the file limit", src: strings.Replace(vipTable("a", "udp", "198.18.0.1:53", "198.18.1.1:53"), "listen", "max_sessions = 16777216\nlisten", 1), host: fakeHost{nofile: 20000},
			warning: "max_sessions 16777216 is more than the open-file limit 20000: each session holds a socket"},
		{name: "sessions from defaults", src: "[defaults]\nmax_sessions = 30000\n" + vipTable("a", "udp", "198.18.0.1:53", "198.18.1.1:53"), host: fakeHost{nofile: 20000},
			warning: "max_sessions 30000"},
		{name: "sessions of two VIPs", src: strings.Replace(vipTable("a", "udp", "198.18.0.1:53", "198.18.1.1:53"), "listen", "max_sessions = 15000\nlisten", 1) +
			vipTable("b", "udp", "198.18.0.7:53", "198.18.1.1:53"), host: fakeHost{nofile: 20000},
			warning: "max_sessions of the udp VIPs add up to 80536, which is more than the open-file limit 20000"},
		{name: "built-in max_sessions", src: vipTable("a", "udp", "198.18.0.1:53", "198.18.1.1:53"), host: fakeHost{nofile: 20000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse("h.toml", []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			h := tc.host
			h.addrs, h.files = local, tc.files
			problems, warnings := config.CheckHost(c, h)
			expectOne(t, "problem", problems, tc.problem)
			expectOne(t, "warning", warnings, tc.warning)
		})
	}
}

// expectOne wants exactly one entry containing want, or none if want is "".
func expectOne(t *testing.T, what string, got []config.Problem, want string) {
	t.Helper()
	if want == "" {
		if len(got) != 0 {
			t.Errorf("unexpected %ss: %v", what, got)
		}
		return
	}
	if len(got) != 1 || !strings.Contains(got[0].Msg, want) || got[0].Line == 0 {
		t.Errorf("%ss = %v, want one with a line containing %q", what, got, want)
	}
}

// The host check on a real file system: the config file as admin socket.
func TestCheckHostOnDisk(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "l4lb.toml")
	src := "[global]\nadmin_socket = \"" + path + "\"\n" + vipTable("a", "tcp", "127.0.0.1:80", "198.18.1.1:80")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	problems, _ := config.CheckHost(c, osHost{})
	expectOne(t, "problem", problems, "exists and is a regular file")
}

type osHost struct{}

func (osHost) LocalAddrs() ([]netip.Addr, error)      { return nil, nil }
func (osHost) HasInterface(string) bool               { return false }
func (osHost) Lstat(path string) (fs.FileInfo, error) { return os.Lstat(path) }
func (osHost) CPUs() int                              { return 64 }
func (osHost) FileLimit() (uint64, error)             { return 1 << 20, nil }
func (osHost) Memory() (uint64, error)                { return 64 << 30, nil }

func TestCheckReload(t *testing.T) {
	running := mustParse(t, vipTable("a", "tcp", "198.18.0.1:80", "198.18.1.1:80"))
	moved := mustParse(t, vipTable("b", "tcp", "0.0.0.0:80", "198.18.1.1:80"))
	if ps := config.CheckReload(running, moved); len(ps) != 1 || !strings.Contains(ps[0].Msg, `remove vip "a" in one reload`) || ps[0].Line == 0 {
		t.Fatalf("moving to a wildcard in one reload: %v", ps)
	}
	kept := mustParse(t, vipTable("a", "tcp", "198.18.0.1:80", "198.18.1.1:80")+vipTable("c", "udp", "0.0.0.0:80", "198.18.1.1:80"))
	if ps := config.CheckReload(running, kept); len(ps) != 0 {
		t.Fatalf("a udp wildcard beside a kept tcp VIP: %v", ps)
	}
}

// TestAttachesXDP: the program is attached for xdp VIPs, and for proxy
// VIPs only when an [xdp] table gives its guards work they can do.
func TestAttachesXDP(t *testing.T) {
	const xdp = "[xdp]\ninterface = \"veth0\"\n"
	for _, c := range []struct {
		name, src string
		want      bool
	}{
		{"no [xdp]", oneVIP(`deny = ["198.18.0.0/24"]`), false},
		{"[xdp], no guard", xdp + oneVIP(""), false},
		{"xdp VIP", xdp + strings.Replace(vipTable("d", "udp", "198.18.0.20:53", "198.18.1.21:53"), "listen", "mode = \"xdp\"\nlisten", 1), true},
		{"syn rate", strings.Replace(xdp, "\n", "\nsyn_rate_per_source = 100\n", 1) + oneVIP(""), true},
		{"list on a concrete address", xdp + oneVIP(`deny = ["198.18.0.0/24"]`), true},
		{"list on a wildcard address", xdp + strings.Replace(oneVIP(`deny = ["198.18.0.0/24"]`), "198.18.0.10:5432", "0.0.0.0:5432", 1), false},
	} {
		if got := mustParse(t, c.src).AttachesXDP(); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
