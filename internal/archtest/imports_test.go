package archtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/l4lb/l4lb/"

// rules: for each package, project packages and other imports it must not
// depend on (directly or not).
var rules = map[string][]string{
	"l4":           {mod},
	"config":       {mod + "l4/", mod + "health", mod + "conntrack", mod + "bpf", mod + "internal", "go.uber.org/zap"},
	"l4/balance":   {mod + "config", mod + "conntrack", mod + "health", mod + "l4/proxy", "net", "go.uber.org/zap"},
	"l4/guard":     {mod, "net", "go.uber.org/zap"},
	"l4/sni":       {mod, "net", "go.uber.org/zap"},
	"l4/pgstartup": {mod, "net", "go.uber.org/zap"},
	"l4/appframe":  {mod, "net", "go.uber.org/zap"},
	"l4/proxyhdr":  {mod, "net", "go.uber.org/zap"},
	"conntrack":    {mod + "config", mod + "l4/proxy", mod + "l4/balance", mod + "health", "go.uber.org/zap"},
	"health":       {mod + "config", mod + "l4/balance", mod + "l4/snapshot", mod + "l4/proxy", "go.uber.org/zap"},
	"l4/snapshot":  {mod + "config", mod + "health", mod + "l4/proxy", "net"},
	"l4/proxy":     {mod + "config", mod + "health", mod + "bpf", mod + "l4/xdpplane", mod + "l4/reconcile"},
	// The data-plane contract: no plane, no config, no sockets, no logs.
	"l4/plane": {mod + "config", mod + "health", mod + "bpf", mod + "conntrack", mod + "internal", mod + "l4/proxy", mod + "l4/xdpplane", mod + "l4/reconcile", "net", "go.uber.org/zap"},
	// The XDP control half reads its own options, never the config.
	"l4/xdpplane":      {mod + "config", mod + "health", mod + "l4/proxy", mod + "l4/reconcile", mod + "internal/names", mod + "internal/resolve"},
	"internal/names":   {mod + "l4/reconcile", mod + "l4/proxy", mod + "l4/xdpplane", mod + "bpf", mod + "health"},
	"internal/netif":   {mod + "config", mod + "l4/", mod + "health", mod + "bpf", mod + "conntrack", "go.uber.org/zap"},
	"bpf":              {mod + "config", mod + "health", mod + "l4/proxy", mod + "l4/reconcile", mod + "internal", "go.uber.org/zap"},
	"internal/resolve": {mod, "go.uber.org/zap"},
	"l4/reconcile":     {mod + "cmd"},
	"internal/admin":   {mod + "cmd"},
	"internal/bgp":     {mod + "config", mod + "l4/", mod + "health", mod + "bpf", mod + "conntrack", mod + "internal/"},
	// What main was split into: the daemon starts the others; none of
	// them reaches back into it, into each other's jobs, or into cmd.
	"internal/daemon":   {mod + "cmd", mod + "internal/report"},
	"internal/upgrade":  {mod + "cmd", mod + "internal/daemon", mod + "internal/metrics", mod + "internal/announce", mod + "internal/report", mod + "internal/bgp"},
	"internal/metrics":  {mod + "cmd", mod + "internal/daemon", mod + "internal/upgrade", mod + "internal/announce", mod + "internal/report", mod + "internal/admin", mod + "internal/bgp"},
	"internal/announce": {mod + "cmd", mod + "internal/daemon", mod + "internal/upgrade", mod + "internal/metrics", mod + "internal/report", mod + "internal/admin"},
	"internal/report":   {mod + "cmd", mod + "internal/daemon", mod + "internal/upgrade", mod + "internal/metrics", mod + "internal/announce", mod + "internal/bgp"},
}

// onlyBGP are imports that the BGP speaker package alone may bring in:
// everything else in l4lb stays free of GoBGP and gRPC.
var onlyBGP = []string{"github.com/osrg/gobgp/", "google.golang.org/grpc"}

// allowedProject lists the project packages each may import at all.
var allowedProject = map[string][]string{
	"l4":               {},
	"config":           {"l4"},
	"l4/balance":       {"l4"},
	"l4/guard":         {},
	"l4/sni":           {},
	"l4/pgstartup":     {},
	"l4/appframe":      {},
	"conntrack":        {"l4"},
	"l4/proxyhdr":      {},
	"health":           {"l4", "l4/proxyhdr"},
	"l4/snapshot":      {"l4", "l4/balance"},
	"l4/proxy":         {"l4", "l4/snapshot", "l4/balance", "l4/guard", "l4/sni", "l4/pgstartup", "l4/appframe", "l4/proxyhdr", "conntrack", "l4/plane"},
	"l4/plane":         {"l4", "l4/snapshot", "l4/balance"},                                                               // l4/balance through l4/snapshot
	"l4/xdpplane":      {"l4", "l4/plane", "l4/balance", "l4/snapshot", "l4/guard", "bpf", "internal/netif", "conntrack"}, // conntrack through bpf
	"internal/names":   {"config", "l4", "l4/plane", "l4/snapshot", "l4/balance", "internal/resolve"},
	"internal/netif":   {"l4"},
	"bpf":              {"l4", "l4/balance", "l4/snapshot", "l4/guard", "conntrack"},
	"internal/privs":   {},
	"internal/resolve": {},
	"internal/docpage": {},
	"internal/pcapng":  {},
	"internal/bgp":     {"l4"},
	// The metrics read the status wire types alone; the BGP wiring joins
	// the speaker, the [bgp] table and those types, never the runtime.
	"internal/metrics": {"l4/plane", "l4", "l4/snapshot", "l4/balance", "internal/statuspage"},
	// The status page reads the status wire types alone.
	"internal/statuspage": {"l4/plane", "l4", "l4/snapshot", "l4/balance"},
	"internal/announce":   {"config", "internal/bgp", "l4/plane", "l4", "l4/snapshot", "l4/balance"},
}

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func TestImportDirection(t *testing.T) {
	for pkg, banned := range rules {
		for _, d := range deps(t, pkg) {
			if d == mod+pkg {
				continue
			}
			for _, b := range banned {
				if d == b || (strings.HasSuffix(b, "/") && strings.HasPrefix(d, b)) {
					t.Errorf("%s depends on %s", pkg, d)
				}
			}
		}
	}
}

func TestProjectImportsAllowed(t *testing.T) {
	for pkg, allowed := range allowedProject {
		ok := map[string]bool{mod + pkg: true}
		for _, a := range allowed {
			ok[mod+a] = true
		}
		for _, d := range deps(t, pkg) {
			if strings.HasPrefix(d, mod) && !ok[d] {
				t.Errorf("%s imports project package %s; allowed: %v", pkg, d, allowed)
			}
		}
	}
}

// directProject lists the project packages each may import directly (it
// may reach others through them). The admin API takes its wire types from
// the contract and its commands from the loop, never a data plane; the
// contract stands on the vocabulary and the snapshot alone; the loop
// reaches the data planes through l4/plane and their settings types, and
// names, bpf, netlink and the flow table only through them. Of what main
// was split into, the verbs' text reads the admin API's answers and the
// wire types; the upgrade protocol moves the runtime's sockets and the
// proxy's connections; only the daemon wires the others.
var directProject = map[string][]string{
	"internal/admin":   {"l4", "l4/plane", "l4/reconcile"},
	"l4/plane":         {"l4", "l4/snapshot"},
	"l4/reconcile":     {"config", "health", "l4", "l4/balance", "l4/plane", "l4/proxy", "l4/snapshot", "l4/xdpplane"},
	"internal/report":  {"config", "internal/admin", "l4/plane"},
	"internal/upgrade": {"config", "internal/admin", "l4/proxy", "l4/reconcile"},
	"internal/daemon":  {"config", "internal/admin", "internal/announce", "internal/metrics", "internal/names", "internal/privs", "internal/upgrade", "l4", "l4/plane", "l4/proxy", "l4/reconcile"},
}

func TestDirectImportsAllowed(t *testing.T) {
	for pkg, allowed := range directProject {
		out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, mod+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		ok := map[string]bool{}
		for _, a := range allowed {
			ok[mod+a] = true
		}
		for _, d := range strings.Fields(string(out)) {
			if strings.HasPrefix(d, mod) && !ok[d] {
				t.Errorf("%s imports project package %s directly; allowed: %v", pkg, d, allowed)
			}
		}
	}
}

// TestOnlyBGPImportsGoBGP: GoBGP and gRPC come into l4lb through
// internal/bgp alone: no other package imports them directly, and one
// that does not link internal/bgp (all but the BGP wiring, the daemon and
// cmd/l4lb) does not depend on them at all.
func TestOnlyBGPImportsGoBGP(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		rel := strings.TrimPrefix(f[0], mod)
		if rel == "internal/bgp" {
			continue
		}
		for _, d := range f[1:] {
			if goBGP(d) {
				t.Errorf("%s imports %s; only internal/bgp may", rel, d)
			}
		}
		all := deps(t, rel)
		if slices.Contains(all, mod+"internal/bgp") {
			continue
		}
		for _, d := range all {
			if goBGP(d) {
				t.Errorf("%s depends on %s without internal/bgp; only internal/bgp may", rel, d)
			}
		}
	}
}

func goBGP(pkg string) bool {
	for _, b := range onlyBGP {
		if strings.HasPrefix(pkg, b) {
			return true
		}
	}
	return false
}
