// The hosts file before (or after) DNS, as nsswitch.conf orders it, read again when it changes.

package resolve_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/resolve"
	"github.com/l4lb/l4lb/internal/testutil"
)

// writeAtomically replaces path's content as editors and configuration
// tools do: a new file renamed over the old one.
func writeAtomically(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// hostsClient is a client of srv with its own hosts and nsswitch files.
func hostsClient(t *testing.T, srv *testutil.DNSServer, hosts, nsswitch string) (*resolve.Client, string) {
	t.Helper()
	dir := t.TempDir()
	hostsPath, nsPath := filepath.Join(dir, "hosts"), filepath.Join(dir, "nsswitch.conf")
	writeAtomically(t, hostsPath, hosts)
	if nsswitch != "" {
		writeAtomically(t, nsPath, nsswitch)
	}
	c, err := resolve.NewClient(resolve.Options{Servers: []netip.AddrPort{srv.Addr}, Timeout: time.Second, HostsFile: hostsPath, NSSwitch: nsPath})
	if err != nil {
		t.Fatal(err)
	}
	return c, hostsPath
}

const testHosts = `# a hosts file
198.18.1.21	pg.db.test pg-alias.db.test   # comment
2001:db8::21	pg.db.test
2001:db8::31	v6.db.test
198.18.1.22	hostsonly.db.test
fe80::1%eth0	zoned.db.test
`

// lookupOrErr returns the answer's addresses, or the error.
func lookupOrErr(c *resolve.Client, q resolve.Query) (string, time.Duration, error) {
	a, err := c.Lookup(context.Background(), q)
	return addrs(a), a.TTL, err
}

func TestHostsFileBeforeDNS(t *testing.T) {
	srv := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	srv.SetHost("pg.db.test", 30, netip.MustParseAddr("198.18.1.11"))
	srv.SetHost("dnsonly.db.test", 30, netip.MustParseAddr("198.18.1.13"))
	srv.SetHost("v6.db.test", 30, netip.MustParseAddr("198.18.1.31"))
	srv.SetHost("zoned.db.test", 30, netip.MustParseAddr("198.18.1.41"))
	c, hosts := hostsClient(t, srv, testHosts, "passwd: files\nhosts:          files mdns4_minimal [NOTFOUND=return] dns myhostname\n")
	for _, tc := range []struct {
		name string
		q    resolve.Query
		want string
		ttl  time.Duration
	}{
		// The file wins over DNS, with no TTL: looked at again after resolve_min.
		{"in both", resolve.Query{Name: "pg.db.test", Port: 5432}, "[198.18.1.21:5432/0 [2001:db8::21]:5432/0]", 0},
		{"alias, any case", resolve.Query{Name: "PG-Alias.db.test", Port: 5432}, "[198.18.1.21:5432/0]", 0},
		{"family", resolve.Query{Name: "pg.db.test", Port: 5432, Family: resolve.IPv6}, "[[2001:db8::21]:5432/0]", 0},
		{"only in the file", resolve.Query{Name: "hostsonly.db.test", Port: 1}, "[198.18.1.22:1/0]", 0},
		{"only in DNS", resolve.Query{Name: "dnsonly.db.test", Port: 1}, "[198.18.1.13:1/0]", 30 * time.Second},
		// The file has the name but no IPv4 address: DNS gives one (glibc too).
		{"file lacks the family", resolve.Query{Name: "v6.db.test", Port: 1, Family: resolve.IPv4}, "[198.18.1.31:1/0]", 30 * time.Second},
		{"zoned address skipped", resolve.Query{Name: "zoned.db.test", Port: 1}, "[198.18.1.41:1/0]", 30 * time.Second},
	} {
		got, ttl, err := lookupOrErr(c, tc.q)
		if err != nil || got != tc.want || ttl != tc.ttl {
			t.Errorf("%s: Lookup(%s) = %s ttl %v, %v; want %s ttl %v", tc.name, tc.q, got, ttl, err, tc.want, tc.ttl)
		}
	}

	// The file changes: the next lookup reads it again.
	writeAtomically(t, hosts, "198.18.1.23 pg.db.test\n")
	if got, _, err := lookupOrErr(c, resolve.Query{Name: "pg.db.test", Port: 5432}); err != nil || got != "[198.18.1.23:5432/0]" {
		t.Errorf("after the file changed: %s, %v", got, err)
	}
	// The name leaves the file: DNS answers it again.
	writeAtomically(t, hosts, "198.18.1.23 other.db.test\n")
	if got, _, err := lookupOrErr(c, resolve.Query{Name: "pg.db.test", Port: 5432}); err != nil || got != "[198.18.1.11:5432/0]" {
		t.Errorf("after the name left the file: %s, %v", got, err)
	}
	// The file is removed: DNS only, no error.
	if err := os.Remove(hosts); err != nil {
		t.Fatal(err)
	}
	if got, _, err := lookupOrErr(c, resolve.Query{Name: "pg.db.test", Port: 5432}); err != nil || got != "[198.18.1.11:5432/0]" {
		t.Errorf("without a hosts file: %s, %v", got, err)
	}
}

// nsswitch.conf's hosts line decides whether, and when, the file counts.
func TestHostsFileOrderFromNSSwitch(t *testing.T) {
	srv := testutil.StartDNSServer(t, nil, "127.0.0.1:0")
	srv.SetHost("pg.db.test", 30, netip.MustParseAddr("198.18.1.11"))
	pg, only := resolve.Query{Name: "pg.db.test", Port: 1}, resolve.Query{Name: "hostsonly.db.test", Port: 1}
	for _, tc := range []struct {
		nsswitch       string
		wantPG, wantHO string // "" = ErrNoRecords
	}{
		{"", "[198.18.1.21:1/0 [2001:db8::21]:1/0]", "[198.18.1.22:1/0]"}, // no nsswitch.conf: files, then dns
		{"hosts: files dns\n", "[198.18.1.21:1/0 [2001:db8::21]:1/0]", "[198.18.1.22:1/0]"},
		{"hosts: dns files\n", "[198.18.1.11:1/0]", "[198.18.1.22:1/0]"}, // the file only where DNS has nothing
		{"hosts: dns\n", "[198.18.1.11:1/0]", ""},
	} {
		c, _ := hostsClient(t, srv, testHosts, tc.nsswitch)
		for q, want := range map[resolve.Query]string{pg: tc.wantPG, only: tc.wantHO} {
			got, _, err := lookupOrErr(c, q)
			if want == "" && !errors.Is(err, resolve.ErrNoRecords) || want != "" && (err != nil || got != want) {
				t.Errorf("nsswitch %q: Lookup(%s) = %s, %v; want %s", tc.nsswitch, q, got, err, want)
			}
		}
	}
}
