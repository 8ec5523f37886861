package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// rec is one raw record.
type rec map[string]any

// num returns the numeric value of key, if present.
func (r rec) num(key string) (float64, bool) {
	v, ok := r[key].(float64)
	return v, ok
}

func (r rec) str(key string) string { s, _ := r[key].(string); return s }

// row is one line of the results table.
type row struct {
	test, key, label, unit string
	prec                   int  // decimals
	noRatio                bool // retransmits and loss: ratios mean nothing (often 0)
	lbOnly                 bool // a balancer's own figure: none for direct
	lower                  bool // less is better (latency, memory, CPU); else more is
}

var rows = []row{
	{test: "T1-1", key: "gbit_s", label: "T1 bulk TCP, 1 stream", unit: "Gbit/s", prec: 2},
	{test: "T1-8", key: "gbit_s", label: "T1 bulk TCP, 8 streams", unit: "Gbit/s", prec: 2},
	{test: "T1-8", key: "retransmits", label: "T1 retransmits, 8 streams", unit: "segments", noRatio: true, lower: true},
	{test: "T2", key: "conn_per_s", label: "T2 new connections (c=64)", unit: "conn/s"},
	{test: "T2", key: "p50_ms", label: "T2 connect+request+close p50", unit: "ms", prec: 2, lower: true},
	{test: "T2", key: "p99_ms", label: "T2 connect+request+close p99", unit: "ms", prec: 2, lower: true},
	{test: "T3", key: "p50_us", label: "T3 keep-alive RTT p50 (c=4, 2000 req/s)", unit: "µs", lower: true},
	{test: "T3", key: "p99_us", label: "T3 keep-alive RTT p99 (c=4, 2000 req/s)", unit: "µs", lower: true},
	{test: "T3b", key: "req_per_s", label: "T3b keep-alive req/s (c=64, closed loop)", unit: "req/s"},
	{test: "T3b", key: "p99_us", label: "T3b keep-alive RTT p99 (c=64, closed loop)", unit: "µs", lower: true},
	{test: "T4", key: "req_per_s", label: "T4 UDP req/resp rate ({flows} flows x {inflight})", unit: "req/s"},
	{test: "T4", key: "loss_pct", label: "T4 UDP loss", unit: "%", prec: 2, noRatio: true, lower: true},
	{test: "T4", key: "p99_us", label: "T4 UDP RTT p99", unit: "µs", lower: true},
	{test: "T5", key: "alive", label: "T5 idle conns alive after hold", unit: "conns", lbOnly: true},
	{test: "T5", key: "rss_mib", label: "T5 LB RSS holding the conns", unit: "MiB", prec: 1, lbOnly: true, lower: true},
	{test: "T5", key: "rss_per_conn_kib", label: "T5 LB RSS growth per conn", unit: "KiB", prec: 1, lbOnly: true, lower: true},
	{test: "T5", key: "lb_fds_per_conn", label: "T5 LB descriptors per conn", unit: "fds", prec: 2, lbOnly: true, lower: true},
	{test: "T6", key: "tps", label: "T6 pgbench -S TPS (16 clients, 1 server)", unit: "tx/s"},
	{test: "T6", key: "lat_avg_ms", label: "T6 pgbench -S latency average", unit: "ms", prec: 3, lower: true},
	{test: "T7-set", key: "req_per_s", label: "T7 redis-benchmark SET (c=50)", unit: "req/s"},
	{test: "T7-set", key: "p50_ms", label: "T7 redis-benchmark SET p50", unit: "ms", prec: 3, lower: true},
	{test: "T7-get", key: "req_per_s", label: "T7 redis-benchmark GET (c=50)", unit: "req/s"},
	{test: "T7-get", key: "p50_ms", label: "T7 redis-benchmark GET p50", unit: "ms", prec: 3, lower: true},
	{test: "T8", key: "alive", label: "T8 WebSockets alive after the hold (a message a second each)", unit: "conns"},
	{test: "T8", key: "p50_us", label: "T8 WebSocket message echo p50", unit: "µs", lower: true},
	{test: "T8", key: "p99_us", label: "T8 WebSocket message echo p99", unit: "µs", lower: true},
	{test: "T8", key: "rss_mib", label: "T8 LB RSS holding the WebSockets", unit: "MiB", prec: 1, lbOnly: true, lower: true},
	{test: "T9-plain", key: "conn_per_s", label: "T9 new connections sending a ClientHello, plain VIP (c=64)", unit: "conn/s", lbOnly: true},
	{test: "T9-sni", key: "conn_per_s", label: "T9 the same through an SNI route", unit: "conn/s", lbOnly: true},
	{test: "T1-8", key: "gbit_per_lb_core", label: "LB cost: bulk Gbit/s per LB core (T1, 8 streams)", unit: "Gbit/s/core", prec: 1, lbOnly: true},
	{test: "T2", key: "lb_cpu_us_per_conn", label: "LB cost: CPU per new connection (T2)", unit: "µs", prec: 1, lbOnly: true, lower: true},
	{test: "T9-plain", key: "lb_cpu_us_per_conn", label: "LB cost: CPU per new connection, plain VIP (T9)", unit: "µs", prec: 1, lbOnly: true, lower: true},
	{test: "T9-sni", key: "lb_cpu_us_per_conn", label: "LB cost: CPU per new connection, SNI route (T9)", unit: "µs", prec: 1, lbOnly: true, lower: true},
	{test: "T3b", key: "lb_cpu_us_per_req", label: "LB cost: CPU per keep-alive request (T3b)", unit: "µs", prec: 1, lbOnly: true, lower: true},
	{test: "T4", key: "lb_cpu_us_per_req", label: "LB cost: CPU per UDP request+reply (T4)", unit: "µs", prec: 1, lbOnly: true, lower: true},
	{test: "T6", key: "lb_cpu_us_per_tx", label: "LB cost: CPU per pgbench transaction (T6)", unit: "µs", prec: 1, lbOnly: true, lower: true},
	{test: "T7-set", key: "lb_cpu_us_per_req", label: "LB cost: CPU per Redis SET (T7)", unit: "µs", prec: 1, lbOnly: true, lower: true},
	{test: "T7-get", key: "lb_cpu_us_per_req", label: "LB cost: CPU per Redis GET (T7)", unit: "µs", prec: 1, lbOnly: true, lower: true},
	{test: "T8", key: "lb_cpu_us_per_msg", label: "LB cost: CPU per WebSocket message and echo (T8)", unit: "µs", prec: 1, lbOnly: true, lower: true},
}

func main() {
	in := flag.String("in", "", "raw records (JSON lines)")
	lbDir := flag.String("lbdir", "", "directory with the balancers' <path>-r<N>.{exit,log,events,status.json}")
	out := flag.String("out", "", "also write the document here")
	paths := flag.String("paths", "direct l4lb iocopy", "columns, in order")
	peers := flag.String("peers", "haproxy nginx", "paths that are peers: each row's best of them is the \"best peer\"")
	peerInfo := flag.String("peerinfo", "", "versions and settings of the peers, one line")
	cmdline := flag.String("cmd", "make bench", "command that produced the records")
	knobs := flag.String("knobs", "", "settings of the run, one line")
	pinning := flag.String("pinning", "", "CPU pinning of the run, one line")
	flag.Parse()
	recs, err := readRecords(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	var doc bytes.Buffer
	d := &document{w: &doc, recs: recs, paths: strings.Fields(*paths)}
	for _, p := range strings.Fields(*peers) {
		if slices.Contains(d.paths, p) {
			d.peers = append(d.peers, p)
		}
	}
	d.header(*cmdline, *knobs, *pinning, *peerInfo)
	d.table()
	d.connLog()
	d.sniCost()
	d.balancers(*lbDir)
	d.rounds()
	os.Stdout.Write(doc.Bytes())
	if *out != "" {
		if err := os.WriteFile(*out, doc.Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
	}
}

func readRecords(path string) ([]rec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []rec
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r rec
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("%s: bad record %q: %w", path, line, err)
		}
		recs = append(recs, r)
	}
	return recs, sc.Err()
}

// document writes the markdown.
type document struct {
	w     *bytes.Buffer
	recs  []rec
	paths []string
	peers []string // the columns that are peers, in column order
}

func (d *document) printf(format string, args ...any) { fmt.Fprintf(d.w, format, args...) }

// ran reports whether any record of test exists (WORKLOADS may leave some out).
func (d *document) ran(test string) bool {
	return slices.ContainsFunc(d.recs, func(r rec) bool { return r.str("test") == test })
}

// pick returns the records of test and path, in round order.
func (d *document) pick(test, path string) []rec {
	var out []rec
	for _, r := range d.recs {
		if r.str("test") == test && r.str("path") == path {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b rec) int {
		x, _ := a.num("round")
		y, _ := b.num("round")
		return int(x - y)
	})
	return out
}

func (d *document) header(cmdline, knobs, pinning, peerInfo string) {
	d.printf("# l4lb proxy benchmark\n\n")
	d.printf("Generated by `scripts/bench.sh` (`make bench`) on %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	d.printf("- Command: `%s`\n", cmdline)
	d.printf("- Machine: %s, kernel %s\n", machine(), kernel())
	if knobs != "" {
		d.printf("- Settings: %s\n", knobs)
	}
	if pinning != "" {
		d.printf("- Pinning: %s\n", pinning)
	}
	if peerInfo != "" {
		d.printf("- Peers: %s\n", peerInfo)
	}
	d.printf("\n%s\n", aboutText)
}

const aboutText = `Topology (network namespaces made for the run, 198.18.0.0/15 only): a client
namespace, a balancer namespace holding the VIP 198.18.2.10 on lo with
ip_forward=1, and three backend namespaces on a bridge behind it. Paths:
**direct** = no balancer, the client reaches backend 1 through the balancer
namespace's kernel forwarding; **l4lb** = bin/l4lb with one VIP per service;
**l4lb-log** = the same with ` + "`log_connections = true`" + ` on every VIP at log_level
info, its stderr to a file (T2 only: what the per-connection log costs);
**l4lb-poll** (only when PATHS asks for it) = the same as l4lb with ` + "`busy_poll`" + ` set
in [global] (BUSY_POLL); **l4lb-kern** (only when PATHS asks for it) = the same
as l4lb with ` + "`kernel_forwarding = \"auto\"`" + ` in [global]; **l4lb-alt** (only when PATHS asks for it) = another
build of l4lb (ALT_BIN) with l4lb's config, to compare two builds in one run;
**iocopy** = scripts/bench/iocopy, a plain io.Copy proxy (the naive Go
baseline); and the peers, each when it is installed: **haproxy** = HAProxy
in mode tcp with splice forced in both directions (TCP only: it has no UDP
proxying), **nginx** = nginx's stream module, one worker (TCP and UDP).
Every balancer runs alone on the balancer core and balances round-robin;
l4lb and HAProxy check their backends every 2 s, their default (a TCP
connect; l4lb's WebSocket VIP by an HTTP upgrade; l4lb also checks the
backends of its TLS VIPs, which the peers do not serve; PEER_CHECKS=0
turns HAProxy's off), nginx's stream module has no active checks. The bulk, PostgreSQL and Redis VIPs forward
to backend 1 only (one server, as for a single-primary database), the
others spread over the three. Workloads: T1 iperf3 (1 and 8 streams), T2
new connections (HTTP/1.0 GET with Connection: close, 64 workers), T3
keep-alive echo at 2000 req/s on 4 connections, T3b closed loop on 64
connections, T4 UDP echo, T5 idle connections held open, T6 ` + "`pgbench -S`" + `
(select-only, 16 clients, 2 threads, simple protocol; TPS without the
connection set-up, as pgbench prints it) against PostgreSQL with fsync off
and the tables in shared_buffers, T7 ` + "`redis-benchmark`" + ` SET then GET (50
clients, no pipelining, random keys) against Redis without persistence,
T8 WebSockets held open (T8_CONNS, each sending a 32-byte text frame a
second for T8_HOLD seconds and checking the echo; the balancer's RSS is
the higher of a mid-hold and an end-of-hold sample, its CPU is over the
hold, per echoed message) to the WebSocket echo of the three backends
(direct: backend 1's).
The database servers, like every backend, share the client's core. Rounds
are interleaved (each round runs every path once) and the median is
reported.

Run it as root: ` + "`make bench`" + ` (3 rounds, about 30 minutes with both peers), or
` + "`QUICK=1 make bench`" + ` for a smoke run. Knobs: REPS, T1_SECS, DUR, T3B_DUR,
T5_CONNS, T5_HOLD, T6_DUR, PG_SCALE, T7_REQS, T8_CONNS, T8_HOLD, WORKLOADS, PATHS, SETTLE, OUT,
KEEP (see scripts/bench.sh). The balancer's CPU time comes from
/proc/PID/stat over each measured window (T6, T7: the whole run of the
tool, connection set-up included), summed over its process tree (nginx's
master and worker), so the "LB cost" rows do not depend on which side
saturated first.`

// table writes the medians.
func (d *document) table() {
	d.printf("\n## Medians\n\n| workload | unit | better |")
	for _, p := range d.paths {
		d.printf(" %s |", p)
	}
	if len(d.peers) > 0 {
		d.printf(" best peer |")
	}
	if d.both() {
		d.printf(" l4lb ÷ iocopy |")
	}
	d.printf("\n|---|---|:-:|")
	for range d.paths {
		d.printf("---:|")
	}
	if len(d.peers) > 0 {
		d.printf("---|")
	}
	if d.both() {
		d.printf("---:|")
	}
	d.printf("\n")
	for _, rw := range rows {
		if d.ran(rw.test) {
			d.tableRow(rw)
		}
	}
	d.errorsRow()
	ratios := "(N.NN×) = ratio to `direct`"
	if len(d.peers) > 0 {
		ratios = "(N.NN× / M.MM×) = ratio to `direct` / ratio to the best peer, the best of " +
			strings.Join(d.peers, " and ") + " in that row (named in the best peer column)"
	}
	d.printf("\nMedian of the rounds. %s: a ratio above 1 is more, which is better for ↑ rows (rates) "+
		"and worse for ↓ rows (latency, memory, CPU). ", ratios)
	if d.both() {
		d.printf("l4lb ÷ iocopy compares the two Go proxies the same way. ")
	}
	d.printf("– = not applicable, n/a = not supported by that path or build, " +
		"fail = ran and produced no figure, † = at least one round produced no figure.\n")
}

// cell is a median and how it was obtained.
type cell struct {
	v       float64
	ok      bool
	partial bool   // some rounds had no figure
	text    string // what to print when !ok
}

func (d *document) median(rw row, path string) cell {
	rs := d.pick(rw.test, path)
	if len(rs) == 0 {
		return cell{text: "–"}
	}
	var vals []float64
	skipped := ""
	for _, r := range rs {
		if s := r.str("skipped"); s != "" {
			skipped = s
		}
		if v, ok := r.num(rw.key); ok {
			vals = append(vals, v)
		}
	}
	switch {
	case len(vals) == 0 && skipped != "":
		return cell{text: "n/a"}
	case len(vals) == 0 && rw.lbOnly && path == "direct":
		return cell{text: "–"}
	case len(vals) == 0:
		return cell{text: "fail"}
	}
	return cell{v: median(vals), ok: true, partial: len(vals) < len(rs)}
}

// labelOf is the row's label with {key} replaced by that key's value in
// the workload's first record (T4's flows and inflight are knobs).
func (d *document) labelOf(rw row) string {
	label := rw.label
	for _, p := range d.paths {
		for _, r := range d.pick(rw.test, p) {
			for _, key := range []string{"flows", "inflight"} {
				if v, ok := r.num(key); ok {
					label = strings.ReplaceAll(label, "{"+key+"}", fmt.Sprintf("%.0f", v))
				}
			}
			return label
		}
	}
	return label
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (d *document) tableRow(rw row) {
	cells := map[string]cell{}
	for _, p := range d.paths {
		cells[p] = d.median(rw, p)
	}
	if rw.lbOnly {
		cells["direct"] = cell{text: "–"}
	}
	best := d.bestPeer(rw, cells)
	better := "↑"
	if rw.lower {
		better = "↓"
	}
	d.printf("| %s | %s | %s |", d.labelOf(rw), rw.unit, better)
	for _, p := range d.paths {
		c := cells[p]
		d.printf(" %s%s |", format(c, rw.prec), d.ratios(rw, c, cells["direct"], cells[best]))
	}
	if len(d.peers) > 0 {
		switch {
		case best == "" || rw.noRatio:
			d.printf(" – |")
		default:
			d.printf(" %s |", best)
		}
	}
	l, ioc := cells["l4lb"], cells["iocopy"]
	switch {
	case !d.both():
	case l.ok && ioc.ok && ioc.v != 0 && !rw.noRatio:
		d.printf(" %.2f× |", l.v/ioc.v)
	default:
		d.printf(" |")
	}
	d.printf("\n")
}

// bestPeer names the peer with the best median of the row: the highest
// rate, or the lowest latency, memory or CPU. "" when no peer has one.
func (d *document) bestPeer(rw row, cells map[string]cell) string {
	best := ""
	for _, p := range d.peers {
		c := cells[p]
		if !c.ok {
			continue
		}
		if b := cells[best]; best == "" || (rw.lower && c.v < b.v) || (!rw.lower && c.v > b.v) {
			best = p
		}
	}
	return best
}

// ratios writes " (to direct / to the best peer)" after a cell: "–" where
// one side has no figure, nothing at all where neither has; without peers
// in the run, " (to direct)" as before.
func (d *document) ratios(rw row, c, direct, best cell) string {
	if !c.ok || rw.noRatio {
		return ""
	}
	ratio := func(ref cell) (string, bool) {
		if !ref.ok || ref.v == 0 {
			return "–", false
		}
		return fmt.Sprintf("%.2f×", c.v/ref.v), true
	}
	toDirect, okD := ratio(direct)
	if len(d.peers) == 0 {
		if !okD {
			return ""
		}
		return " (" + toDirect + ")"
	}
	toPeer, okP := ratio(best)
	if !okD && !okP {
		return ""
	}
	return " (" + toDirect + " / " + toPeer + ")"
}

// both reports whether l4lb and iocopy are both columns.
func (d *document) both() bool {
	return slices.Contains(d.paths, "l4lb") && slices.Contains(d.paths, "iocopy")
}

func format(c cell, prec int) string {
	if !c.ok {
		return c.text
	}
	s := fmt.Sprintf("%.*f", prec, c.v)
	if c.partial {
		s += " †"
	}
	return s
}

// errorsRow sums the client-side errors of every run of each path.
func (d *document) errorsRow() {
	d.printf("| client-side errors, all workloads and rounds | count | |")
	for _, p := range d.paths {
		total, failed := 0.0, 0
		for _, r := range d.recs {
			if r.str("path") != p {
				continue
			}
			if v, ok := r.num("errors"); ok {
				total += v
			}
			if r["failed"] == true {
				failed++
			}
		}
		d.printf(" %.0f", total)
		if failed > 0 {
			d.printf(" (+%d runs failed)", failed)
		}
		d.printf(" |")
	}
	if len(d.peers) > 0 {
		d.printf(" |")
	}
	if d.both() {
		d.printf(" |")
	}
	d.printf("\n")
}

// rounds writes every round's figure of every row.
func (d *document) rounds() {
	d.printf("\n## Every round\n\n| workload | path | rounds | errors |\n|---|---|---|---:|\n")
	for _, rw := range rows {
		for _, p := range d.paths {
			rs := d.pick(rw.test, p)
			if len(rs) == 0 || (rw.lbOnly && p == "direct") {
				continue
			}
			var vals []string
			errs := 0.0
			for _, r := range rs {
				vals = append(vals, roundValue(r, rw))
				if v, ok := r.num("errors"); ok {
					errs += v
				}
			}
			d.printf("| %s (%s) | %s | %s | %.0f |\n", d.labelOf(rw), rw.unit, p, strings.Join(vals, ", "), errs)
		}
	}
	d.examples()
}

func roundValue(r rec, rw row) string {
	switch v, ok := r.num(rw.key); {
	case ok:
		return fmt.Sprintf("%.*f", rw.prec, v)
	case r.str("skipped") != "":
		return "n/a"
	default:
		return "fail"
	}
}

// examples lists the first error messages seen per workload and path.
func (d *document) examples() {
	var lines []string
	for _, r := range d.recs {
		ex := r.str("error_examples")
		if r["failed"] == true {
			ex = fmt.Sprintf("run failed (exit %v) %s", r["rc"], r.str("note"))
		}
		if ex == "" {
			continue
		}
		round, _ := r.num("round")
		lines = append(lines, fmt.Sprintf("- %s %s round %.0f: %v errors %v; %s",
			r.str("path"), r.str("test"), round, r["errors"], r["errors_by_kind"], ex))
	}
	if len(lines) == 0 {
		return
	}
	d.printf("\nClient-side errors seen:\n\n%s\n", strings.Join(lines, "\n"))
}

// connLog writes what the per-connection log costs: l4lb-log's CPU per new
// connection over l4lb's (T2), the ratio of the medians and, since the
// rounds interleave, the median of each round's ratio.
func (d *document) connLog() {
	if !slices.Contains(d.paths, "l4lb") || !slices.Contains(d.paths, "l4lb-log") {
		return
	}
	const key = "lb_cpu_us_per_conn"
	on, off := d.roundValues("T2", "l4lb-log", key), d.roundValues("T2", "l4lb", key)
	d.costRatio("log_connections on / off (T2)", on, off)
}

// sniCost writes what SNI routing costs: l4lb's CPU per new connection
// through a VIP with an SNI route over a plain VIP's, the same ClientHello
// sent to both (T9), as connLog does for the log.
func (d *document) sniCost() {
	const key = "lb_cpu_us_per_conn"
	sni, plain := d.roundValues("T9-sni", "l4lb", key), d.roundValues("T9-plain", "l4lb", key)
	d.costRatio("SNI route / plain VIP (T9)", sni, plain)
}

// costRatio writes the CPU per new connection of on over off, both by
// round: the ratio of the medians and, since the rounds interleave, the
// median of each round's ratio; nothing if either has no figures.
func (d *document) costRatio(what string, on, off map[float64]float64) {
	if len(on) == 0 || len(off) == 0 {
		return
	}
	var perRound []float64
	var shown []string
	for _, r := range slices.Sorted(maps.Keys(on)) {
		if v, w := on[r], off[r]; w > 0 {
			perRound = append(perRound, v/w)
			shown = append(shown, fmt.Sprintf("%.3f", v/w))
		}
	}
	mOn, mOff := median(slices.Collect(maps.Values(on))), median(slices.Collect(maps.Values(off)))
	d.printf("\n**CPU per new connection, %s: %.3f×** (medians %.1f / %.1f µs)", what, mOn/mOff, mOn, mOff)
	if len(perRound) > 0 {
		d.printf("; round by round: %s, median %.3f×", strings.Join(shown, ", "), median(perRound))
	}
	d.printf(".\n")
}

// roundValues returns key's figure of test on path by round.
func (d *document) roundValues(test, path, key string) map[float64]float64 {
	out := map[float64]float64{}
	for _, r := range d.pick(test, path) {
		round, _ := r.num("round")
		if v, ok := r.num(key); ok {
			out[round] = v
		}
	}
	return out
}

// balancers reports what each balancer process did: exit status, restarts,
// log lines and (l4lb) its own counters.
func (d *document) balancers(dir string) {
	if dir == "" {
		return
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.exit"))
	if len(files) == 0 {
		return
	}
	slices.Sort(files)
	d.printf("\n## The balancers during the run\n\n| path, round | exit status | events | log lines (warn and above) | l4lb counters |\n|---|---|---|---|---|\n")
	var samples []string
	for _, f := range files {
		base := strings.TrimSuffix(f, ".exit")
		name := filepath.Base(base)
		logLines, connLines := warnLines(readLines(base + ".log"))
		events := readLines(base + ".events")
		if connLines > 0 {
			events = append(events, fmt.Sprintf("%d info lines (log_connections)", connLines))
		}
		d.printf("| %s | %s | %s | %d | %s |\n", name, strings.TrimSpace(readString(f)),
			strings.Join(events, "; "), len(logLines), counters(base+".status.json"))
		for i, l := range logLines {
			if i == 5 {
				samples = append(samples, fmt.Sprintf("- %s: ... %d more", name, len(logLines)-5))
				break
			}
			samples = append(samples, fmt.Sprintf("- %s: `%s`", name, clip(l, 300)))
		}
	}
	if len(samples) > 0 {
		d.printf("\nFirst log lines of each balancer:\n\n%s\n", strings.Join(samples, "\n"))
	}
}

// counters summarises an `l4lb status --json` answer.
func counters(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	var st struct {
		VIPs []struct {
			Name         string `json:"name"`
			Accepted     uint64 `json:"accepted"`
			NoBackend    uint64 `json:"no_backend"`
			ConnectFails uint64 `json:"connect_fails"`
			Backends     []struct {
				Health string `json:"health"`
			} `json:"backends"`
		} `json:"vips"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return "unreadable status: " + clip(err.Error(), 80)
	}
	var parts []string
	for _, v := range st.VIPs {
		health := map[string]int{}
		for _, b := range v.Backends {
			health[b.Health]++
		}
		parts = append(parts, fmt.Sprintf("%s: accepted %d, connect_fails %d, no_backend %d, backends %s",
			v.Name, v.Accepted, v.ConnectFails, v.NoBackend, healthText(health)))
	}
	return strings.Join(parts, "; ")
}

// healthText prints backend health counts as "3 up" or "2 up, 1 down".
func healthText(h map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(h)) {
		parts = append(parts, fmt.Sprintf("%d %s", h[k], k))
	}
	return strings.Join(parts, ", ")
}

// warnLines keeps the lines at level warn and above (l4lb-log runs at
// info, the other balancers at warn) and counts the others.
func warnLines(lines []string) (warn []string, info int) {
	for _, l := range lines {
		// l4lb's console format: time, level, logger, message, fields.
		if f := strings.SplitN(l, "\t", 3); len(f) >= 2 && (f[1] == "INFO" || f[1] == "DEBUG") {
			info++
			continue
		}
		warn = append(warn, l)
	}
	return warn, info
}

func readString(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func readLines(path string) []string {
	var out []string
	for _, l := range strings.Split(readString(path), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "`", "'")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func kernel() string { return strings.TrimSpace(readString("/proc/sys/kernel/osrelease")) }

// machine names the CPU model and counts the CPUs.
func machine() string {
	model, n := "", 0
	for _, l := range readLines("/proc/cpuinfo") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			model, n = strings.TrimSpace(v), n+1
		}
	}
	return fmt.Sprintf("%d × %s", n, model)
}
