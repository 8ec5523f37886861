// End-to-end test with Redis's own load client, redis-benchmark, through a
// source_hash VIP in front of two real servers.

package main

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
)

// redisConf is VIP redis over the servers at a and b.
func redisConf(algorithm string, a, b netip.AddrPort) string {
	return newConf().vip("redis", ":6379", fmt.Sprintf("algorithm = %q", algorithm), `connect_timeout = "500ms"`).
		health(`type = "redis"`, `interval = "500ms"`, `timeout = "500ms"`).
		at("r0", a).at("r1", b).String()
}

// cmdstat matches a command's line of INFO commandstats (Redis 7).
var cmdstat = regexp.MustCompile(`cmdstat_(\w+):calls=(\d+),.*rejected_calls=(\d+),failed_calls=(\d+)`)

// redisCalls returns, per command, calls and rejected + failed calls on r.
func redisCalls(t *testing.T, ns *testutil.Netns, r *testutil.Redis) map[string][2]int {
	t.Helper()
	out := ns.MustExec(t, "redis-cli", "-h", r.Addr.Addr().String(), "-p", strconv.Itoa(int(r.Addr.Port())), "INFO", "commandstats")
	calls := map[string][2]int{}
	for _, m := range cmdstat.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		rej, _ := strconv.Atoi(m[3])
		fail, _ := strconv.Atoi(m[4])
		calls[m[1]] = [2]int{n, rej + fail}
	}
	return calls
}

// TestRedisBenchmarkSourceHash: redis-benchmark (20 clients, 20000 SETs
// then 20000 GETs) through a source_hash VIP over two servers. One client
// address hashes to one server: it receives every connection and exactly
// 20000 SETs and 20000 GETs, none rejected or failed, and the other
// server none (its only traffic is the health probes' PING).
// redis-benchmark 7 stops at the first error reply or lost connection,
// exiting 1 with an "Error" line; it exits 0 here.
func TestRedisBenchmarkSourceHash(t *testing.T) {
	testutil.RequireTool(t, "redis-benchmark", "redis-cli")
	tp := testutil.NewTopology(t, 2)
	var rs [2]*testutil.Redis
	for i := range rs {
		rs[i] = testutil.StartRedisIn(t, tp.Backends[i], tp.BackendIP(i).String()+":6379", "")
	}
	lb := startLB(t, tp, redisConf("source_hash", rs[0].Addr, rs[1].Addr))
	lb.waitHealth(t, "redis", "r0", "up")
	lb.waitHealth(t, "redis", "r1", "up")

	const requests = 20000
	out, err := tp.Client.Command("redis-benchmark", "-h", tp.VIP.String(), "-p", "6379",
		"-n", strconv.Itoa(requests), "-c", "20", "-t", "set,get", "-q").CombinedOutput()
	if err != nil || regexp.MustCompile(`(?i)\berror`).Match(out) {
		t.Fatalf("redis-benchmark: %v:\n%s", err, out)
	}
	st := lb.status(t)
	flows := [2]uint64{backendOf(st, "redis", "r0").Flows, backendOf(st, "redis", "r1").Flows}
	hit := 0
	if flows[1] > flows[0] {
		hit = 1
	}
	if flows[1-hit] != 0 || flows[hit] < 20 {
		t.Fatalf("connections per server %v: source_hash should put one client on one server", flows)
	}
	got, other := redisCalls(t, tp.Backends[hit], rs[hit]), redisCalls(t, tp.Backends[1-hit], rs[1-hit])
	for _, c := range []string{"set", "get"} {
		if got[c] != [2]int{requests, 0} || other[c] != [2]int{} {
			t.Fatalf("%s: r%d has %v (calls, rejected+failed), r%d %v; want %d, 0 and none\n%s",
				c, hit, got[c], 1-hit, other[c], requests, out)
		}
	}
	t.Logf("redis-benchmark: %d SET + %d GET, 0 errors, all on r%d over %d connections; r%d none; %q",
		requests, requests, hit, flows[hit], 1-hit, regexp.MustCompile(`[A-Z]+: [\d.]+ requests per second`).FindAll(out, -1))
}
