// The values on the metrics endpoint of a running daemon, after a known
// sequence of connections and a backend's death.

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

var metricsVIP = newConf(`metrics_listen = "198.18.0.1:9370"`).vip("m", ":80", `algorithm = "round_robin"`).
	health(`type = "tcp"`, `interval = "200ms"`, `timeout = "100ms"`, `fall = 2`).backends(2, 7000).String()

// scrapeMetrics fetches /metrics from the client namespace and returns
// each sample line's value by its series ("name{labels}" as printed).
func scrapeMetrics(t *testing.T, tp *testutil.Topology) map[string]float64 {
	t.Helper()
	var c net.Conn
	tp.Client.MustDo(t, func() (err error) {
		c, err = net.DialTimeout("tcp4", "198.18.0.1:9370", 5*time.Second)
		return err
	})
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.0\r\nHost: l4lb\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading /metrics: %v", err)
	}
	if !strings.HasPrefix(string(body), "HTTP/1.0 200") {
		t.Fatalf("GET /metrics: %.200s", body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "l4lb_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// backendSeries names a backend series of VIP m (labels in the order the
// text format prints them: sorted).
func backendSeries(name string, i int) string {
	return fmt.Sprintf(`%s{address="198.18.1.%d:7000",backend="be%d",vip="m"}`, name, 11+i, i)
}

// TestMetricsValues: five connections through a round-robin VIP, one still
// open, each having sent 6 bytes and received 10: the endpoint counts
// exactly that per VIP and per backend; when a backend's server stops, its
// up gauge falls to 0 and the VIP's eligible backends to 1.
func TestMetricsValues(t *testing.T) {
	tp := testutil.NewTopology(t, 2)
	var lns [2]net.Listener
	for i := range 2 {
		tp.Backends[i].MustDo(t, func() (err error) {
			lns[i], err = net.Listen("tcp4", fmt.Sprintf("%s:7000", tp.BackendIP(i)))
			return err
		})
		t.Cleanup(func() { lns[i].Close() })
		testutil.ServeConns(lns[i], testutil.NamedEcho(fmt.Sprintf("be%d", i)))
	}
	lb := startLB(t, tp, metricsVIP)
	perBackend := map[string]int{}
	var held *clientConn
	for k := range 5 {
		c := mustDialVIP(t, tp, 80)
		if err := c.echo("hello"); err != nil { // 6 bytes each way, plus "beN\n"
			t.Fatal(err)
		}
		perBackend[c.backend]++
		if k < 4 {
			c.Close()
		} else {
			held = c
		}
	}
	if perBackend["be0"]+perBackend["be1"] != 5 || perBackend["be0"] == 0 || perBackend["be1"] == 0 {
		t.Fatalf("round robin spread 5 connections as %v", perBackend)
	}
	liveOn := map[string]float64{held.backend: 1}

	want := map[string]float64{
		`l4lb_vip_accepted_total{protocol="tcp",vip="m"}`:    5,
		`l4lb_vip_active{protocol="tcp",vip="m"}`:            1,
		`l4lb_vip_eligible_backends{protocol="tcp",vip="m"}`: 2,
	}
	for i := range 2 {
		n := float64(perBackend[fmt.Sprintf("be%d", i)])
		want[backendSeries("l4lb_backend_flows_total", i)] = n
		want[backendSeries("l4lb_backend_live_flows", i)] = liveOn[fmt.Sprintf("be%d", i)]
		want[backendSeries("l4lb_backend_bytes_in_total", i)] = 6 * n
		want[backendSeries("l4lb_backend_bytes_out_total", i)] = 10 * n
		want[backendSeries("l4lb_backend_up", i)] = 1
		want[backendSeries("l4lb_backend_connect_failures_total", i)] = 0
	}
	var got map[string]float64
	mismatch := func() string {
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				return fmt.Sprintf("%s = %v (present %v), want %v", k, g, ok, v)
			}
		}
		return ""
	}
	// Closing clients are counted down as l4lb sees their FIN: wait for it.
	deadline := time.Now().Add(5 * time.Second)
	for got = scrapeMetrics(t, tp); mismatch() != ""; got = scrapeMetrics(t, tp) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 connections: %s", mismatch())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// be1's server stops: probes are refused, two in a row take it down.
	lns[1].Close()
	want = map[string]float64{
		backendSeries("l4lb_backend_up", 0):                  1,
		backendSeries("l4lb_backend_up", 1):                  0,
		`l4lb_vip_eligible_backends{protocol="tcp",vip="m"}`: 1,
	}
	deadline = time.Now().Add(5 * time.Second)
	for got = scrapeMetrics(t, tp); mismatch() != ""; got = scrapeMetrics(t, tp) {
		if time.Now().After(deadline) {
			t.Fatalf("after be1 stopped: %s", mismatch())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = lb
}
