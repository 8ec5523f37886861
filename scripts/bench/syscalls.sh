#!/usr/bin/env bash
# Syscalls per unit of work: strace -c -f on a running l4lb while loadgen
# drives one workload at a time, counts divided by the units loadgen
# reports. Runs in a private network namespace (loopback only), the
# balancer pinned to CPU 1, the rest on CPU 0.
#
#   scripts/bench/syscalls.sh [L4LB_BINARY]      (as root; default bin/l4lb)
#
# Workloads: new connections (HTTP/1.0, c=4), keep-alive requests (64-byte
# echo, c=4, closed loop), UDP request and reply (64 B, 4 flows x 8 in
# flight), 3 s each. strace slows the balancer down a lot: the counts per
# unit are what this measures, not rates. To count an older version, build
# it from its commit, e.g.
#   git worktree add /tmp/before 5db9ded && (cd /tmp/before && go build -o /tmp/l4lb-before ./cmd/l4lb)
#   scripts/bench/syscalls.sh /tmp/l4lb-before
set -euo pipefail
cd "$(dirname "$0")/../.."
LB_BIN=$(realpath "${1:-bin/l4lb}")
command -v strace >/dev/null || { echo "strace is not installed (Debian package strace)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root (network namespace)" >&2; exit 1; }
[ -x bin/loadgen ] || go build -o bin/loadgen ./scripts/bench/loadgen
[ -x bin/testserver ] || go build -o bin/testserver ./scripts/testserver

NS=l4sc$$
RUN=$(mktemp -d /tmp/l4lb-syscalls.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
  rm -rf "$RUN"
}
trap cleanup EXIT
ip netns add "$NS"
ip -n "$NS" link set lo up
inns() { ip netns exec "$NS" "$@"; }

cat >"$RUN/l4lb.toml" <<CFG
[global]
admin_socket = "off"
workers = 1
[defaults.health]
type = "none"
[[vip]]
name = "http"
listen = "127.0.0.1:17000"
[[vip.backend]]
address = "127.0.0.1:18080"
[[vip]]
name = "echo"
listen = "127.0.0.1:17001"
[[vip.backend]]
address = "127.0.0.1:17100"
[[vip]]
name = "udp"
listen = "127.0.0.1:17002"
protocol = "udp"
[[vip.backend]]
address = "127.0.0.1:17200"
CFG

# Versions before the event loops have no `workers` (one CPU either way).
"$LB_BIN" check "$RUN/l4lb.toml" >/dev/null 2>&1 || sed -i '/^workers = /d' "$RUN/l4lb.toml"
inns taskset -c 0 bin/testserver -http 127.0.0.1:18080 -echo 127.0.0.1:17100 -udp 127.0.0.1:17200 >"$RUN/testserver.log" 2>&1 &
PIDS+=($!)
inns bin/loadgen probe -addr 127.0.0.1:18080 -kind http >/dev/null # the backends first: l4lb resets what it cannot forward
inns taskset -c 1 "$LB_BIN" run --config "$RUN/l4lb.toml" >"$RUN/l4lb.log" 2>&1 &
PIDS+=($!)
inns bin/loadgen probe -addr 127.0.0.1:17000 -kind http >/dev/null
inns bin/loadgen probe -addr 127.0.0.1:17002 -kind udp >/dev/null
# $! is the shell that runs `ip netns exec`, not l4lb: strace needs
# l4lb's own PID, which it logs.
LB=$(sed -n 's/.*l4lb running.*"pid": \([0-9]*\).*/\1/p' "$RUN/l4lb.log" | head -1)
[ -n "$LB" ] || { echo "l4lb did not start:" >&2; cat "$RUN/l4lb.log" >&2; exit 1; }
PIDS+=("$LB")

for w in conn rr udp; do
  strace -c -f -p "$LB" -o "$RUN/$w.strace" 2>/dev/null &
  ST=$!
  sleep 1 # strace attaches to every thread
  case $w in
  conn) inns taskset -c 0 bin/loadgen connrate -addr 127.0.0.1:17000 -c 4 -d 3s -warmup 0s >"$RUN/$w.json" 2>/dev/null ;;
  rr) inns taskset -c 0 bin/loadgen rr -addr 127.0.0.1:17001 -c 4 -rate 0 -d 3s -warmup 0s >"$RUN/$w.json" 2>/dev/null ;;
  udp) inns taskset -c 0 bin/loadgen udp -addr 127.0.0.1:17002 -flows 4 -inflight 8 -size 64 -d 3s >"$RUN/$w.json" 2>/dev/null ;;
  esac
  sleep 0.5
  kill -INT "$ST"
  wait "$ST" 2>/dev/null || true
done

echo "syscalls per unit of work, $("$LB_BIN" version 2>/dev/null | head -1)"
python3 - "$RUN" <<'PY'
import json, re, sys
run = sys.argv[1]
for w, key, unit in (("conn", "conns", "new connection"), ("rr", "reqs", "keep-alive request"), ("udp", "received", "UDP request and reply")):
    n = json.load(open(f"{run}/{w}.json"))[key]
    calls = {}
    for line in open(f"{run}/{w}.strace"):
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
        if m and m.group(2) != "total":
            calls[m.group(2)] = int(m.group(1))
    total = sum(calls.values()) / n
    top = ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v / n >= 0.05)
    print(f"{unit} ({n} measured): {total:.1f} syscalls: {top}")
PY
