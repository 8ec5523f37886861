// Golden outputs: what operators and their tools read from a running
// l4lb (status --json, the text status, explain --json and the metrics
// scrape), pinned byte for byte with the volatile values masked, so that a
// refactor of the packages behind them cannot change a field, a label or
// an order unseen. Rewrite them with L4LB_GOLDEN_UPDATE=1 when a change is
// meant, and read the diff.

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// goldenKeepNumbers are the JSON keys whose numbers the golden test's
// traffic makes exact; every other number is masked (packet counts depend
// on segmentation, RTTs and times on the machine, and live_flows of xdp
// VIPs on when the flow table was last counted, every 2 s).
var goldenKeepNumbers = map[string]bool{
	"weight": true, "effective_weight": true, "max_flows": true,
	"accepted": true, "active": true, "live": true, "flows": true, "no_backend": true,
	"connect_fails": true, "denied": true, "client_limited": true,
	"table_size": true, "slot": true, "generation": true, "eligible": true, "backends": true,
	"port": true, "rise": true, "fall": true, "loops": true,
}

// goldenMaskStrings are the JSON keys whose strings vary by run.
var goldenMaskStrings = map[string]bool{
	"version": true, "go_version": true, "started": true, "since": true, "last_change": true,
	"at": true, "time": true, "last_check": true, "last_error": true, "commit": true,
	"uptime": true, "checked": true, "changed": true,
}

// goldenCollapse are the JSON keys whose whole value varies by machine
// or by traffic: the capability sets (the kernel's) and the XDP event
// counters (listed when not zero).
var goldenCollapse = map[string]bool{"effective": true, "permitted": true, "bounding": true, "counters": true, "config": true}

// timeLike matches a timestamp or a Go duration, wherever they stand.
var timeLike = regexp.MustCompile(`^\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d)$|^[0-9.]+(ns|µs|us|ms|s|m|h)([0-9.]+(ns|µs|us|ms|s|m|h))*$`)

// maskJSON re-indents raw keeping its key order, with numbers and strings
// masked as above.
func maskJSON(t *testing.T, raw []byte) string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	var stack []byte // '{' or '['
	var inObj []bool // per level: the next string is a key
	key := ""
	depth := func() string { return strings.Repeat("  ", len(stack)) }
	first := true
	sep := func() {
		if !first {
			b.WriteString(",")
		}
		first = false
		b.WriteString("\n")
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("golden: decoding %s: %v", raw, err)
		}
		if k, isKey := tok.(string); isKey && len(stack) > 0 && stack[len(stack)-1] == '{' && inObj[len(inObj)-1] {
			key = k
			sep()
			fmt.Fprintf(&b, "%s%q: ", depth(), key)
			inObj[len(inObj)-1] = false
			continue
		}
		if d, end := tok.(json.Delim); goldenCollapse[key] && len(stack) > 0 && stack[len(stack)-1] == '{' && (!end || d == '{' || d == '[') {
			skipValue(t, dec, tok)
			b.WriteString(`"<masked>"`)
			inObj[len(inObj)-1] = true
			key = ""
			continue
		}
		if d, end := tok.(json.Delim); len(stack) > 0 && stack[len(stack)-1] == '[' && (!end || d == '{' || d == '[') {
			sep()
			b.WriteString(depth())
			key = ""
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				b.WriteString(string(v))
				stack = append(stack, byte(v))
				inObj = append(inObj, v == '{')
				first = true
			case '}', ']':
				stack, inObj = stack[:len(stack)-1], inObj[:len(inObj)-1]
				if !first {
					b.WriteString("\n" + depth())
				}
				b.WriteString(string(v))
				first = false
			}
		case json.Number:
			if goldenKeepNumbers[key] {
				b.WriteString(v.String())
			} else {
				b.WriteString("<n>")
			}
		case string:
			if goldenMaskStrings[key] || timeLike.MatchString(v) {
				b.WriteString(`"<s>"`)
			} else {
				fmt.Fprintf(&b, "%q", ephemeralPort.ReplaceAllString(v, ":<port>"))
			}
		default:
			fmt.Fprintf(&b, "%v", v)
		}
		if len(inObj) > 0 && stack[len(stack)-1] == '{' {
			inObj[len(inObj)-1] = true
		}
	}
	return b.String() + "\n"
}

// skipValue reads the rest of the value that tok begins.
func skipValue(t *testing.T, dec *json.Decoder, tok json.Token) {
	t.Helper()
	d, ok := tok.(json.Delim)
	if !ok || (d != '{' && d != '[') {
		return
	}
	for level := 1; level > 0; {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("golden: %v", err)
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			level++
		case json.Delim('}'), json.Delim(']'):
			level--
		}
	}
}

// ephemeralPort matches the client port of a connection the kernel
// numbered (the test's own are below 32768).
var ephemeralPort = regexp.MustCompile(`:(3[2-9][0-9]{3}|[4-6][0-9]{4})\b`)

var (
	metricValue = regexp.MustCompile(`^(l4lb_[^ ]+) .*$`)
	numberRun   = regexp.MustCompile(`[0-9]+([.,][0-9]+)*(ns|µs|us|ms|s|m|h|%|B|KiB|MiB|GiB|k|M)?`)
	spaceRun    = regexp.MustCompile(`[ \t]+`)
)

// maskMetrics keeps every HELP and TYPE line and every l4lb series with
// its labels, in the endpoint's order, and masks the values; the series
// of the Go runtime and the process are left out (they come from the
// Prometheus client, not from l4lb), and so are the samples of the XDP
// program's events (one per event that is not 0).
func maskMetrics(scrape string) string {
	var b strings.Builder
	for _, line := range strings.Split(scrape, "\n") {
		switch {
		case strings.HasPrefix(line, "# HELP l4lb_"), strings.HasPrefix(line, "# TYPE l4lb_"):
			b.WriteString(line + "\n")
		case strings.HasPrefix(line, "l4lb_xdp_events_total{"):
		case strings.HasPrefix(line, "l4lb_"):
			b.WriteString(metricValue.ReplaceAllString(line, "$1 <n>") + "\n")
		}
	}
	return b.String()
}

// maskText masks every number and collapses runs of blanks, so that the
// text status keeps its words and its order but not its column widths;
// the XDP event counters are listed when not zero, so their line is
// masked whole.
func maskText(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "counters: ") {
			line = "  counters: <masked>"
		}
		line = numberRun.ReplaceAllString(line, "#")
		b.WriteString(strings.TrimRight(spaceRun.ReplaceAllString(line, " "), " ") + "\n")
	}
	return b.String()
}

// compareGolden compares got with testdata/golden/name, or rewrites it.
func compareGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if os.Getenv("L4LB_GOLDEN_UPDATE") == "1" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden %s: %v (L4LB_GOLDEN_UPDATE=1 writes it)", name, err)
	}
	if got != string(want) {
		t.Errorf("%s differs from its golden file (L4LB_GOLDEN_UPDATE=1 rewrites it if the change is meant):\n%s", name, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines of want and got that differ, by line number.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)) && b.Len() < 4000; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want %s\n  got  %s\n", i+1, wl, gl)
		}
	}
	return b.String()
}

// goldenProbe is the check of the golden test's xdp VIPs: a TCP connect
// like xdpProbe's, with time to spare on a loaded machine. A check that
// times out shows in the outputs (health down, its reason, one backend
// less eligible, a later generation; or its reason in the text status's
// LAST CHECK): xdpProbe's 300 ms, down at the first failure, did in 1 of
// 40 loaded runs ("timeout after 300ms connecting" on dns4's be1; over a
// veth a connect takes microseconds, so it was the race-built daemon
// that ran late). This one waits 2 s and marks a backend down after 3
// failures in a row.
var goldenProbe = []string{`type = "tcp"`, `port = 8080`, `interval = "2s"`, `timeout = "2s"`, `fall = 3`}

// TestGoldenOutputs runs the demo's kinds of VIP side by side (xdp TCP
// over IPv4 and IPv6, xdp UDP, a proxy TCP VIP with Maglev and a proxy UDP
// VIP), sends a known set of flows, and compares what l4lb reports.
func TestGoldenOutputs(t *testing.T) {
	n := newXDPNet(t, 3)
	for _, b := range n.Backends {
		n.ServeUDP(t, b, netip.AddrPortFrom(b.Addr4, 5300))
	}
	metricsAddr := netip.AddrPortFrom(n.LB.Addr4, 9370)
	c := n.xdpConfProbe([]string{fmt.Sprintf("metrics_listen = %q", metricsAddr)}, "", goldenProbe, 0, 1, 2)
	c.vip("pg", netip.AddrPortFrom(n.LB.Addr4, 8080).String(), `algorithm = "maglev"`).health(`type = "none"`)
	n.backendsOn(c, 8080, false, 0, 1, 2)
	c.vip("dns", netip.AddrPortFrom(n.LB.Addr4, 5300).String(), `protocol = "udp"`, `algorithm = "maglev"`).health(`type = "none"`)
	n.backendsOn(c, 5300, false, 0, 1, 2)
	lb := startLBIn(t, n.LB.NS, c.String())
	waitAllUp(t, lb)

	// The flows: one xdp flow from a fixed client port, first (its
	// count comes with the conntrack read, every 2 s: it may be taken
	// while the others are sent); three TCP connections through the
	// proxy VIP from one address (Maglev on the source address: one
	// backend), one held open; three UDP exchanges from fixed ports (the
	// same).
	c4, _ := dialFromPort(t, n, 22001, n.vip4)
	defer c4.Close()
	var held net.Conn
	for i := range 3 {
		c := greetTCP(t, n, netip.AddrPortFrom(n.LB.Addr4, 8080))
		if i < 2 {
			c.Close()
		} else {
			held = c
		}
	}
	defer held.Close()
	for _, port := range []uint16{21001, 21002, 21003} {
		askUDPFrom(t, n, port, netip.AddrPortFrom(n.LB.Addr4, 5300))
	}
	// Status waits for what l4lb counts after the fact: the proxy's
	// counters (the closed connections may still be ending) and the xdp
	// flow in web4's active, which is the conntrack's count of the last
	// read (until that read, active 0 and no peak_flows on be3: the
	// failure of loaded runs, where the read fell between the dial and
	// the status in about 1 run of 12).
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := lb.status(t)
		pg, web4 := mustVIP(t, st, "pg"), mustVIP(t, st, "web4")
		if pg.Active == 1 && pg.Accepted == 3 && web4.Active == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: pg active %d accepted %d (want 1, 3), web4 active %d (want 1: the held xdp flow, counted every 2 s)", pg.Active, pg.Accepted, web4.Active)
		}
		time.Sleep(50 * time.Millisecond)
	}

	status, errOut, code := lb.run(t, "status", "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d: %s", code, errOut)
	}
	compareGolden(t, "status.json", maskJSON(t, []byte(status)))
	text, errOut, code := lb.run(t, "status")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	compareGolden(t, "status.txt", maskText(text))
	for _, q := range []struct{ file, vip, client string }{
		{"explain-proxy.json", "pg", n.Client.Addr4.String()},
		{"explain-udp.json", "dns", netip.AddrPortFrom(n.Client.Addr4, 21001).String()},
		{"explain-xdp.json", "web4", netip.AddrPortFrom(n.Client.Addr4, 22001).String()},
		{"explain-xdp6.json", "web6", netip.AddrPortFrom(n.Client.Addr6, 22002).String()},
	} {
		compareGolden(t, q.file, maskJSON(t, []byte(lb.verb(t, "explain", "--json", q.vip, q.client))))
	}
	compareGolden(t, "metrics.txt", maskMetrics(scrape(t, n.LB.NS, metricsAddr, "/metrics")))
}

// waitAllUp waits until every backend is up (the VIPs without checks:
// unknown).
func waitAllUp(t *testing.T, lb *lbProcess) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		down := ""
		for _, v := range lb.status(t).VIPs {
			for _, b := range v.Backends {
				if b.Health != "up" && (b.Health != "unknown" || v.Name == "web4" || v.Name == "dns4") {
					down = v.Name + "/" + b.ID + " is " + b.Health
				}
			}
		}
		if down == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backends not up after 20s: %s", down)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// greetTCP connects from the client to addr (a NamedEcho) and reads the
// backend's name.
func greetTCP(t *testing.T, n *xdpNet, addr netip.AddrPort) net.Conn {
	t.Helper()
	c := n.DialTCP(t, addr)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatalf("%s: greeting: %v", addr, err)
	}
	return c
}

// askUDPFrom sends one datagram from the client's address and port to
// addr and waits for the reply.
func askUDPFrom(t *testing.T, n *xdpNet, port uint16, addr netip.AddrPort) {
	t.Helper()
	n.Client.NS.MustDo(t, func() error {
		c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(n.Client.Addr4, port)), net.UDPAddrFromAddrPort(addr))
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("hello")); err != nil {
			return err
		}
		_, err = c.Read(make([]byte, 512))
		return err
	})
}
