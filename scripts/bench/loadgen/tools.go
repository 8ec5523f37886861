// tools.go: the database workloads, driven by each database's own
// benchmark client: pgbench (T6) and redis-benchmark (T7).

package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// runPgbench runs `pgbench -S` (select-only, no vacuum) for -T seconds and
// records its TPS (without connection set-up, as pgbench prints it), its
// average latency and the balancer's CPU per transaction.
func runPgbench(args []string) (record, error) {
	var c common
	fs := newFlags("pgbench", &c)
	clients := fs.Int("c", 16, "clients (connections)")
	jobs := fs.Int("j", 2, "pgbench threads")
	secs := fs.Int("T", 8, "duration in seconds")
	mode := fs.String("M", "simple", "query protocol: simple, extended or prepared")
	user := fs.String("U", "postgres", "database user")
	db := fs.String("db", "postgres", "database holding the pgbench tables")
	if err := parse(fs, &c, args); err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(c.addr)
	if err != nil {
		return nil, err
	}
	out, cpu, runErr := runTool(&c, time.Duration(*secs+60)*time.Second, "pgbench", "-n", "-S",
		"-M", *mode, "-c", strconv.Itoa(*clients), "-j", strconv.Itoa(*jobs), "-T", strconv.Itoa(*secs),
		"-h", host, "-p", port, "-U", *user, *db)
	rec := c.labels("pgbench")
	rec["clients"], rec["jobs"], rec["secs"], rec["mode"] = *clients, *jobs, *secs, *mode
	fig, perr := parsePgbench(out)
	ok := putToolResult(rec, fig, firstErr(runErr, perr))
	putCPU(rec, cpu, "lb_cpu_us_per_tx", count(ok, int(fig["transactions"])))
	fmt.Fprintf(os.Stderr, "pgbench -S %s c=%d: %v tps, latency %v ms, %v errors\n",
		c.addr, *clients, rec["tps"], rec["lat_avg_ms"], rec["errors"])
	return rec, nil
}

// pgbenchKeys maps the start of a pgbench summary line to a record key.
var pgbenchKeys = []struct{ prefix, key string }{
	{"number of transactions actually processed:", "transactions"},
	{"number of failed transactions:", "failed"},
	{"latency average =", "lat_avg_ms"},
	{"initial connection time =", "conn_ms"},
	{"tps =", "tps"},
}

// parsePgbench reads the figures of pgbench's summary (PostgreSQL 15: every
// one is a number after the prefix, "processed: 123" or "= 1.234 ms").
func parsePgbench(out []byte) (map[string]float64, error) {
	fig := map[string]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		for _, k := range pgbenchKeys {
			rest, ok := strings.CutPrefix(line, k.prefix)
			if !ok {
				continue
			}
			if f := strings.Fields(rest); len(f) > 0 {
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					fig[k.key] = v
				}
			}
		}
	}
	if _, ok := fig["tps"]; !ok {
		return fig, fmt.Errorf("no \"tps =\" line in pgbench's output")
	}
	return fig, nil
}

// runRedisBench runs redis-benchmark for one command (-t get or set) and
// records its requests/s, latency percentiles and the balancer's CPU per
// request. redis-benchmark 7.0 has no duration flag: -n sets the work.
func runRedisBench(args []string) (record, error) {
	var c common
	fs := newFlags("redis", &c)
	test := fs.String("t", "get", "one redis-benchmark test: get, set, ...")
	n := fs.Int("n", 100000, "requests")
	clients := fs.Int("c", 50, "clients (connections)")
	pipeline := fs.Int("P", 1, "requests pipelined per client")
	keys := fs.Int("r", 100000, "keyspace (random keys)")
	limit := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	if err := parse(fs, &c, args); err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(c.addr)
	if err != nil {
		return nil, err
	}
	out, cpu, runErr := runTool(&c, *limit, "redis-benchmark", "-h", host, "-p", port, "-t", *test,
		"-n", strconv.Itoa(*n), "-c", strconv.Itoa(*clients), "-P", strconv.Itoa(*pipeline),
		"-r", strconv.Itoa(*keys), "--csv")
	rec := c.labels("redis")
	rec["command"], rec["requests"], rec["clients"], rec["pipeline"] = *test, *n, *clients, *pipeline
	fig, perr := parseRedisCSV(out, *test)
	ok := putToolResult(rec, fig, firstErr(runErr, perr))
	putCPU(rec, cpu, "lb_cpu_us_per_req", count(ok, *n))
	fmt.Fprintf(os.Stderr, "redis-benchmark %s %s c=%d: %v req/s, p50 %v ms, %v errors\n",
		*test, c.addr, *clients, rec["req_per_s"], rec["p50_ms"], rec["errors"])
	return rec, nil
}

// redisColumns maps redis-benchmark's CSV columns to record keys.
var redisColumns = map[string]string{
	"rps": "req_per_s", "avg_latency_ms": "avg_ms", "p50_latency_ms": "p50_ms",
	"p99_latency_ms": "p99_ms", "max_latency_ms": "max_ms",
}

// parseRedisCSV reads the row of test from `redis-benchmark --csv` (a
// header line, then one line per test, named in capitals).
func parseRedisCSV(out []byte, test string) (map[string]float64, error) {
	rows, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("redis-benchmark's CSV: %w", err)
	}
	if len(rows) < 2 {
		return nil, fmt.Errorf("redis-benchmark printed no result")
	}
	for _, r := range rows[1:] {
		if !strings.EqualFold(r[0], test) {
			continue
		}
		fig := map[string]float64{}
		for i, col := range rows[0] {
			if key, ok := redisColumns[col]; ok && i < len(r) {
				if v, err := strconv.ParseFloat(r[i], 64); err == nil {
					fig[key] = v
				}
			}
		}
		return fig, nil
	}
	return nil, fmt.Errorf("no %s row in redis-benchmark's output", strings.ToUpper(test))
}

// runTool runs argv, bounded by limit, and measures the balancer's CPU
// time over the whole run (connection set-up included). Its stderr goes
// to ours; the last line of it explains a failure.
func runTool(c *common, limit time.Duration, argv ...string) ([]byte, record, error) {
	watchdog(limit + 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
	m := startCPU(c.lbPid)
	out, err := cmd.Output()
	cpu := record{}
	m.put(cpu)
	if err != nil {
		err = fmt.Errorf("%s: %v: %s", argv[0], err, lastLine(stderr.String()))
	}
	return out, cpu, err
}

// putToolResult adds a tool's figures to rec only when the run succeeded
// (a run that failed part-way prints the figures of an incomplete run),
// and reports whether it did. The errors are the failed transactions the
// tool counted, plus one for a failed run.
func putToolResult(rec record, fig map[string]float64, err error) bool {
	errs := int(fig["failed"])
	rec["errors"] = errs
	if err != nil {
		rec["errors"] = errs + 1
		rec["error_examples"] = err.Error()
		rec["errors_by_kind"] = map[string]int{"run": 1}
		return false
	}
	for k, v := range fig {
		rec[k] = round3(v)
	}
	return true
}

// count is n for a run that succeeded, else 0 (no per-unit CPU figure).
func count(ok bool, n int) int {
	if ok {
		return n
	}
	return 0
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
