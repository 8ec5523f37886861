#!/usr/bin/env bash
# make soak: SOAK_TIME (10m) of mixed TCP and UDP load through the real
# daemon (bin/l4lb) in front of three real backends (bin/testserver), with
# one backend stopped and restarted every FLAP_EVERY seconds and a reload
# every RELOAD_EVERY seconds (alternating configs: backend weights change,
# a fourth VIP comes and goes). It samples the daemon's goroutines
# (go_goroutines on metrics_listen), open descriptors (/proc/PID/fd) and RSS
# (/proc/PID/status VmRSS) at rest after a warm-up and again at rest at the
# end, and fails when one grew beyond its bound:
#   goroutines: end <= start + MAX_GOROUTINE_GROWTH (5)
#   descriptors: end <= start + MAX_FD_GROWTH (5)
#   RSS:        end <= start + MAX_RSS_GROWTH_KB (32768 KiB)
# "At rest": the load is stopped, every backend is running and up, and
# SETTLE seconds (session_timeout of the UDP VIP + health interval + margin)
# have passed, so no connection or UDP session of the load is still open:
# what remains open is what the daemon keeps, and what grew is a leak.
#
#   make soak                                 # 10 minutes
#   SOAK_TIME=2m scripts/soak.sh              # a shorter run
#
# Knobs (environment): SOAK_TIME (10m; s/m/h suffix or seconds), WARMUP (30s),
# FLAP_EVERY (4), FLAP_DOWN (2: seconds a backend stays stopped),
# RELOAD_EVERY (10), SAMPLE_EVERY (30: progress samples in the log), the
# three MAX_* bounds above, KEEP=1 (keep the logs).
#
# Safety: everything runs in namespaces made here with per-run names, on
# addresses from 198.18.0.0/15; nothing in the root namespace is touched.
# Every load step is bounded by its own duration and by timeout(1); every
# loop ends at the soak's deadline. On exit, also on Ctrl-C, the processes
# started here are stopped by PID and the namespaces removed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/topo.sh
source scripts/lib/demo.sh # wait_running

secs() { # secs 10m|90s|1h|90 -> seconds
  case $1 in
  *h) echo $((${1%h} * 3600)) ;;
  *m) echo $((${1%m} * 60)) ;;
  *s) echo "${1%s}" ;;
  *) echo "$1" ;;
  esac
}
SOAK_TIME=${SOAK_TIME:-10m}
SOAK_SECS=$(secs "$SOAK_TIME")
WARMUP=$(secs "${WARMUP:-30s}")
FLAP_EVERY=${FLAP_EVERY:-4}
FLAP_DOWN=${FLAP_DOWN:-2}
RELOAD_EVERY=${RELOAD_EVERY:-10}
SAMPLE_EVERY=${SAMPLE_EVERY:-30}
MAX_GOROUTINE_GROWTH=${MAX_GOROUTINE_GROWTH:-5}
MAX_FD_GROWTH=${MAX_FD_GROWTH:-5}
MAX_RSS_GROWTH_KB=${MAX_RSS_GROWTH_KB:-32768}
SESSION_TIMEOUT=3 # the UDP VIP's session_timeout, seconds
SETTLE=$((SESSION_TIMEOUT + 5))
STEP=10 # seconds of one load step (each loadgen run)

S="l4sk$$" # namespace prefix, unique per run
CLI=$S-cli LB=$S-lb
BACKEND_NS=($S-b1 $S-b2 $S-b3)
BACKEND_IPS=(198.18.1.11 198.18.1.12 198.18.1.13)
BPID=(0 0 0) # testserver PID per backend, 0 while stopped
VIP=198.18.2.10
HTTP_PORT=8080 ECHO_PORT=7000 UDP_PORT=9000 EXTRA_PORT=7100
METRICS=127.0.0.1:9370
RUN=$(mktemp -d /tmp/l4lb-soak.XXXXXX)
PIDS=()    # long-running processes started here (l4lb, load loops, flapper, reloader)
LBPID=0
STATUS=1 # 0 once the run passed

say() { printf '== %s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
inns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
alive() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [ "${s%% *}" != Z ]
}

cleanup() {
  local rc=$? p ns i
  set +e
  trap - EXIT INT TERM
  for p in "${PIDS[@]}" "${BPID[@]}"; do [ "$p" != 0 ] && kill -TERM "$p" 2>/dev/null; done
  for ((i = 0; i < 50; i++)); do
    local any=0
    for p in "${PIDS[@]}" "${BPID[@]}"; do [ "$p" != 0 ] && alive "$p" && any=1; done
    [ $any = 0 ] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}" "${BPID[@]}"; do [ "$p" != 0 ] && alive "$p" && kill -KILL "$p" 2>/dev/null; done
  # Backstop: whatever still runs inside our own namespaces was started here.
  for ns in $CLI $LB "${BACKEND_NS[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  if [ "${KEEP:-0}" = 1 ] || [ "$rc" != 0 ] || [ "$STATUS" != 0 ]; then
    echo "logs kept in $RUN" >&2
  else
    rm -rf "$RUN"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" = 0 ] || { echo "make soak needs root (it creates network namespaces)" >&2; exit 1; }
for t in ip timeout curl go; do
  command -v $t >/dev/null || { echo "missing $t (Debian: iproute2, coreutils, curl, golang)" >&2; exit 1; }
done

# bin/l4lb and bin/testserver come from `make build` (make soak runs it);
# built here when missing.
say "building bin/loadgen"
[ -x bin/l4lb ] || go build -o bin/l4lb ./cmd/l4lb
[ -x bin/testserver ] || go build -o bin/testserver ./scripts/testserver
go build -o bin/loadgen ./scripts/bench/loadgen

say "network: namespaces $S-* (client, lb with VIP $VIP, three backends)"
for ns in $CLI $LB "${BACKEND_NS[@]}"; do
  ip netns add "$ns"
  inns "$ns" ip link set lo up
  inns "$ns" sysctl -qw net.ipv4.ip_local_port_range="1024 65000" net.ipv4.tcp_tw_reuse=1
done
topo_links # scripts/lib/topo.sh

# backend_start I: testserver in backend I's namespace (ip netns exec execs
# it, so $! is its own PID).
backend_start() {
  local i=$1 ip=${BACKEND_IPS[$1]}
  ip netns exec "${BACKEND_NS[$i]}" bin/testserver -name b$i -http $ip:$HTTP_PORT -echo $ip:$ECHO_PORT \
    -udp $ip:$UDP_PORT >>"$RUN/backend-$i.log" 2>&1 &
  BPID[$i]=$!
}
backend_stop() {
  local i=$1 p=${BPID[$1]} k
  [ "$p" = 0 ] && return 0
  kill -TERM "$p" 2>/dev/null || true
  for ((k = 0; k < 50; k++)); do alive "$p" || break; sleep 0.1; done
  alive "$p" && kill -KILL "$p" 2>/dev/null
  wait "$p" 2>/dev/null || true
  BPID[$i]=0
}

# write_config VARIANT: 0 and 1 differ in backend 3's weight and in the
# extra VIP (present in 1 only), so every reload changes something.
write_config() {
  local v=$1 w3=$((100 - 50 * $1)) port ip
  backends() {
    local j=0
    for ip in "${BACKEND_IPS[@]}"; do
      j=$((j + 1))
      printf '  [[vip.backend]]\n  name = "b%d"\n  address = "%s:%s"\n' $j "$ip" "$1"
      [ $j = 3 ] && printf '  weight = %d\n' "$w3"
    done
  }
  {
    cat <<TOML
# written by scripts/soak.sh (variant $v)
[global]
log_level = "warn"
admin_socket = "$RUN/admin.sock"
metrics_listen = "$METRICS"
drain_timeout = "2s"

[defaults]
  [defaults.health]
  interval = "500ms"
  timeout = "300ms"
  rise = 1
  fall = 1

[[vip]]
name = "http"
listen = "$VIP:$HTTP_PORT"
protocol = "tcp"
algorithm = "least_conn"
$(backends $HTTP_PORT)

[[vip]]
name = "echo"
listen = "$VIP:$ECHO_PORT"
protocol = "tcp"
algorithm = "round_robin"
$(backends $ECHO_PORT)

[[vip]]
name = "udp"
listen = "$VIP:$UDP_PORT"
protocol = "udp"
algorithm = "maglev"
session_timeout = "${SESSION_TIMEOUT}s"
  [vip.health]
  type = "none"
$(backends $UDP_PORT)
TOML
    if [ "$v" = 1 ]; then
      cat <<TOML

[[vip]]
name = "extra"
listen = "$VIP:$EXTRA_PORT"
protocol = "tcp"
algorithm = "p2c"
$(backends $ECHO_PORT)
TOML
    fi
  } >"$RUN/l4lb.toml.new"
  mv "$RUN/l4lb.toml.new" "$RUN/l4lb.toml"
}

# sample: "goroutines fds rss_kib heap_inuse_kib rss_anon_kib rss_file_kib"
# of the daemon (the Go heap in use is reported, not bounded: it tells heap
# growth from other memory; RSS is split into anonymous memory and the
# pages of the binary and other files the process has touched).
sample() {
  local g h fd rss anon file
  inns $LB curl -sf --max-time 5 "http://$METRICS/metrics" >"$RUN/metrics.txt" || : >"$RUN/metrics.txt"
  g=$(awk '$1 == "go_goroutines" { print $2 }' "$RUN/metrics.txt")
  h=$(awk '$1 == "go_memstats_heap_inuse_bytes" { printf "%d", $2 / 1024 }' "$RUN/metrics.txt")
  fd=$(find "/proc/$LBPID/fd" -mindepth 1 -maxdepth 1 | wc -l)
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$LBPID/status")
  anon=$(awk '/^RssAnon:/ { print $2 }' "/proc/$LBPID/status")
  file=$(awk '/^RssFile:/ { print $2 }' "/proc/$LBPID/status")
  echo "${g:-?} $fd $rss ${h:-?} ${anon:-?} ${file:-?}"
}

# heap_profile FILE: the daemon's Go heap profile after a forced GC
# (/debug/pprof/heap?gc=1 on the admin socket); kept with the logs, and
# compared at the end with `go tool pprof -top -diff_base`. Taken before the
# at-rest sample, so that sample's heap in use is the live heap, not the
# garbage of the last GC cycle.
heap_profile() {
  curl -sf --max-time 10 --unix-socket "$RUN/admin.sock" -o "$1" \
    "http://l4lb/debug/pprof/heap?gc=1" || : >"$1"
}

# wait_up: until every backend of every VIP is up (or 15 s).
wait_up() {
  local k
  for ((k = 0; k < 150; k++)); do
    bin/l4lb status --socket "$RUN/admin.sock" --json >"$RUN/status.json" 2>/dev/null &&
      ! grep -q '"health": *"down"' "$RUN/status.json" && return 0
    sleep 0.1
  done
  echo "not every backend came up within 15 s" >&2
  return 1
}

# at_rest: stop the load, go back to config variant 0 (the extra VIP of
# variant 1 has its own listener and goroutines), restart any stopped
# backend, let sessions expire.
at_rest() {
  stop_loops
  local i
  if [ "$VARIANT" != 0 ]; then reload 0 || { echo "reload to variant 0 failed" >&2; exit 1; }; fi
  for i in 0 1 2; do [ "${BPID[$i]}" = 0 ] && backend_start "$i"; done
  wait_up || true
  sleep "$SETTLE"
}

VARIANT=0
# reload VARIANT: write that config and reload it.
reload() {
  VARIANT=$1
  write_config "$1"
  bin/l4lb reload --socket "$RUN/admin.sock" >>"$RUN/reload.log" 2>&1
}

LOOPS=()
# start_loops DEADLINE: the load, flap and reload loops, each ending by
# itself at DEADLINE (epoch seconds).
start_loops() {
  local end=$1
  load_loop "$end" connrate -c 8 >"$RUN/load-http.log" 2>&1 &
  LOOPS+=($!)
  load_loop "$end" rr -c 16 -rate 2000 >"$RUN/load-echo.log" 2>&1 &
  LOOPS+=($!)
  load_loop "$end" udp -flows 8 -inflight 4 -size 512 >"$RUN/load-udp.log" 2>&1 &
  LOOPS+=($!)
  PIDS+=("${LOOPS[@]}")
}
stop_loops() {
  local p
  for p in "${LOOPS[@]}"; do wait "$p" 2>/dev/null || true; done
  LOOPS=()
}

# load_loop DEADLINE KIND FLAGS...: loadgen KIND runs of STEP seconds until
# DEADLINE; each run is bounded by timeout(1). A run's errors (a flapping
# backend resets connections) are counted in its JSON line, not fatal.
load_loop() {
  local end=$1 kind=$2 addr
  shift 2
  case $kind in
  connrate) addr=$VIP:$HTTP_PORT ;;
  rr) addr=$VIP:$ECHO_PORT ;;
  udp) addr=$VIP:$UDP_PORT ;;
  esac
  while [ "$(date +%s)" -lt "$end" ]; do
    local d=$((end - $(date +%s)))
    [ $d -gt $STEP ] && d=$STEP
    [ $d -lt 1 ] && break
    inns $CLI timeout $((d + 30)) bin/loadgen "$kind" -addr "$addr" -warmup 0s -d "${d}s" "$@" || true
  done
}

# flap_and_reload DEADLINE: every FLAP_EVERY s stop the next backend for
# FLAP_DOWN s and start it again; every RELOAD_EVERY s switch the config
# variant and reload. Prints one line per action.
flap_and_reload() {
  local end=$1 next=0 last_reload reloads=0 bad=0 flaps=0
  last_reload=$(date +%s)
  while [ "$(date +%s)" -lt "$end" ]; do
    backend_stop $next
    sleep "$FLAP_DOWN"
    backend_start $next
    flaps=$((flaps + 1))
    next=$(((next + 1) % 3))
    if [ $(($(date +%s) - last_reload)) -ge "$RELOAD_EVERY" ]; then
      if reload $((1 - VARIANT)); then
        reloads=$((reloads + 1))
      else
        bad=$((bad + 1))
      fi
      last_reload=$(date +%s)
    fi
    sleep $((FLAP_EVERY - FLAP_DOWN))
  done
  for next in 0 1 2; do [ "${BPID[$next]}" = 0 ] && backend_start $next; done
  echo "$flaps $reloads $bad ${BPID[*]}"
}

for i in 0 1 2; do backend_start $i; done
for ip in "${BACKEND_IPS[@]}"; do
  inns $LB bin/loadgen probe -kind http -addr $ip:$HTTP_PORT -timeout 10s
  inns $LB bin/loadgen probe -kind udp -addr $ip:$UDP_PORT -timeout 5s
done
write_config 0
inns $LB bin/l4lb check --config "$RUN/l4lb.toml" >&2
ip netns exec $LB bin/l4lb run --config "$RUN/l4lb.toml" >"$RUN/l4lb.log" 2>&1 &
LBPID=$!
PIDS+=($LBPID)
wait_running "$RUN/l4lb.log" $LBPID
wait_up

say "warm-up: ${WARMUP}s of load, then at rest"
start_loops $(($(date +%s) + WARMUP))
stop_loops
at_rest
heap_profile "$RUN/heap-start.pb.gz"
read -r G0 F0 R0 H0 A0 B0 < <(sample)
say "start (at rest): goroutines $G0, descriptors $F0, RSS $R0 KiB (anonymous $A0, files $B0), Go heap in use after a GC $H0 KiB"

say "soak: ${SOAK_SECS}s of TCP (new connections, keep-alive echo) and UDP load, a backend stopped every ${FLAP_EVERY}s for ${FLAP_DOWN}s, a reload every ${RELOAD_EVERY}s"
T0=$(date +%s)
END=$((T0 + SOAK_SECS))
start_loops $END
# flap_and_reload runs in this shell, not in a subshell: it owns BPID.
# Progress samples come from a bounded background loop.
(
  while [ "$(date +%s)" -lt "$END" ]; do
    sleep "$SAMPLE_EVERY"
    alive $LBPID || exit 0
    echo "$(($(date +%s) - T0))s: $(sample)"
  done
) >"$RUN/samples.log" 2>&1 &
SAMPLER=$!
PIDS+=($SAMPLER)
flap_and_reload $END >"$RUN/flap.out"
read -r FLAPS RELOADS BADRELOADS _ <"$RUN/flap.out"
wait $SAMPLER 2>/dev/null || true
alive $LBPID || { tail -n 30 "$RUN/l4lb.log" >&2; echo "l4lb died during the soak" >&2; exit 1; }
at_rest
heap_profile "$RUN/heap-end.pb.gz"
read -r G1 F1 R1 H1 A1 B1 < <(sample)
say "end (at rest): goroutines $G1, descriptors $F1, RSS $R1 KiB (anonymous $A1, files $B1), Go heap in use after a GC $H1 KiB"

echo "progress samples under load (elapsed: goroutines descriptors RSS_KiB heap_inuse_KiB anon_KiB file_KiB):" >&2
sed 's/^/  /' "$RUN/samples.log" >&2
echo "load runs (errors are expected: backends flap):" >&2
for f in http echo udp; do
  printf '  %s: %s runs, %s errors in all; the last: %s\n' $f "$(grep -c '^{' "$RUN/load-$f.log" || true)" \
    "$(grep -oE '[0-9]+ errors$' "$RUN/load-$f.log" | awk '{ n += $1 } END { print n + 0 }')" \
    "$(grep -E '^(connrate|rr|udp) ' "$RUN/load-$f.log" | tail -n 1)" >&2
done
echo "flaps $FLAPS, reloads $RELOADS ok, $BADRELOADS refused or failed" >&2
if [ -s "$RUN/heap-start.pb.gz" ] && [ -s "$RUN/heap-end.pb.gz" ] && command -v go >/dev/null; then
  echo "Go heap in use at rest, end minus start (go tool pprof -top -diff_base; KEEP=1 keeps both profiles):" >&2
  go tool pprof -top -inuse_space -nodecount 12 -diff_base "$RUN/heap-start.pb.gz" bin/l4lb "$RUN/heap-end.pb.gz" 2>/dev/null |
    sed -n '/^Showing\|flat%/,$p' | sed 's/^/  /' >&2 || true
fi

fail=0
check() { # check NAME START END BOUND
  local d=$(($3 - $2))
  if [ $d -gt "$4" ]; then
    printf 'FAIL %-11s start %-8s end %-8s growth %d > bound %d\n' "$1" "$2" "$3" $d "$4" >&2
    fail=1
  else
    printf 'ok   %-11s start %-8s end %-8s growth %d <= bound %d\n' "$1" "$2" "$3" $d "$4" >&2
  fi
}
[ "$G0" != "?" ] && [ "$G1" != "?" ] || { echo "FAIL: go_goroutines not read from metrics" >&2; exit 1; }
check goroutines "$G0" "$G1" "$MAX_GOROUTINE_GROWTH"
check descriptors "$F0" "$F1" "$MAX_FD_GROWTH"
check rss_kib "$R0" "$R1" "$MAX_RSS_GROWTH_KB"
[ "$BADRELOADS" = 0 ] || { echo "FAIL: $BADRELOADS reloads failed (see $RUN/reload.log)" >&2; fail=1; }
# The stall guard (l4/proxy/evstall.go) must find no lost wake-up.
LOST=$(awk '$1 ~ /^l4lb_vip_lost_wakeups_total/ { n += $2 } END { print n + 0 }' "$RUN/metrics.txt")
if [ "$LOST" != 0 ]; then
  echo "FAIL: the stall guard counted $LOST lost wake-ups" >&2
  fail=1
else
  echo "ok   lost_wakeups 0" >&2
fi
[ $fail = 0 ] || exit 1
STATUS=0
say "soak passed"
