#!/usr/bin/env bash
# make bench: l4lb's own benchmark of its proxy. A throwaway network (client,
# balancer host with the VIP, three backends, each in its own namespace) and
# up to six paths measured in interleaved rounds: direct (kernel forwarding,
# no balancer), l4lb, l4lb-log (the same l4lb with log_connections = true on
# every VIP and log_level = "info", its stderr to a file; it runs T2 only: the
# cost of the per-connection log), l4lb-kern (opt-in: the same l4lb with
# [global] kernel_forwarding = "auto"), l4lb-poll (opt-in: the same l4lb with
# busy_poll = BUSY_POLL), l4lb-alt (opt-in: another build of l4lb, ALT_BIN,
# with l4lb's config: two builds side by side in one run), iocopy (a plain
# io.Copy Go proxy, the naive
# baseline), and the peers haproxy (forced splice) and nginx (stream module),
# each only when installed (Debian: haproxy; nginx-light + libnginx-mod-stream,
# or nginx-full). Every balancer runs alone on one core. Prints a table of
# medians, each with its ratio to direct and to the best peer, and writes it
# to docs/bench-proxy.md.
#
# Workloads: T1 iperf3, T2 new connections, T3/T3b keep-alive echo, T4 UDP
# echo, T5 idle connections (loadgen's own clients), and two real databases
# behind a one-backend VIP: T6 `pgbench -S` against PostgreSQL, T7
# `redis-benchmark` SET and GET against Redis (each only when its client
# and server are installed), and T8 WebSocket hold: T8_CONNS WebSockets
# (testserver -ws in the three backends) each sending a message a second
# for T8_HOLD seconds, reporting the balancer's RSS, its CPU per message
# and the echo p99. T9 (l4lb only): new connections that send a TLS
# ClientHello to an echo server, through a plain VIP and through one with an
# SNI route: the report gives the CPU per new connection of each and their
# ratio, the cost of peeking and routing.
#
#   make bench                      # 3 rounds, about 30 minutes with both peers
#   QUICK=1 scripts/bench.sh        # smoke run: 1 round, short steps (2-3 minutes)
#   REPS=5 WORKLOADS="T2 T3" PATHS="direct l4lb" scripts/bench.sh
#   REPS=3 WORKLOADS=T2 PATHS="l4lb l4lb-log" scripts/bench.sh   # the log's cost
#
# Knobs (environment): REPS (3), T1_SECS (10), DUR (8: T2, T3, T4), T3B_DUR (DUR),
# T5_CONNS (5000), T5_HOLD (10), T6_DUR (DUR: seconds of pgbench -S), PG_SCALE
# (10: pgbench -i scale, about 150 MB), T7_REQS (200000 requests per redis-benchmark
# command: it has no duration flag), T8_CONNS (5000), T8_HOLD (10),
# BUSY_POLL (50us: l4lb-poll's [global] busy_poll), ALT_BIN (l4lb-alt's binary),
# T4_FLOWS (4) and T4_INFLIGHT (8: datagrams in flight per flow),
# WORKLOADS ("T1 T2 T3 T4 T5 T6 T7 T8 T9"), PATHS
# ("direct l4lb l4lb-log iocopy haproxy nginx"; a peer that is not installed is
# left out with one line saying so), CONNLOG_RATE (l4lb-log's log_connections_rate;
# unset: the built-in 1000 a second per VIP; 0 = no cap), SETTLE (1 s between steps),
# LB_CPU (1), CLIENT_CPU (0), BACKEND_CPU (CLIENT_CPU: the backends' and
# databases' CPUs; on a host with 3 or more cores, LB_CPU=1 CLIENT_CPU=2
# BACKEND_CPU=3 makes the direct path cross cores as the proxied ones do),
# PEER_CHECKS (1: HAProxy checks its servers every
# 2 s as l4lb does; 0: no checks),
# OUT (docs/bench-proxy.md; QUICK=1 writes it only when OUT is set), KEEP=1 (keep
# the raw records and logs).
#
# Safety: everything runs in namespaces made here with per-run names, on
# addresses from 198.18.0.0/15; nothing in the root namespace is touched.
# Besides bin/ and OUT, every file (the peers' configs, logs and PID files
# too) goes into the run's temp dir. Every load step is bounded by its own flags and by timeout(1).
# On exit, also on Ctrl-C, only the processes started here are stopped (by
# PID) and the namespaces removed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench/peers.sh
source scripts/lib/topo.sh

# ---------------------------------------------------------------------------
# Settings. QUICK only changes defaults, so QUICK=1 DUR=5 still works.
# INVOKED: the command as the user typed it, for the report.
INVOKED="scripts/bench.sh"
[ -n "${MAKELEVEL:-}" ] && INVOKED="make bench"
for v in BUSY_POLL T4_INFLIGHT T4_FLOWS OUT KEEP SETTLE CONNLOG_RATE PATHS WORKLOADS T8_HOLD T8_CONNS T7_REQS PG_SCALE T6_DUR T5_HOLD T5_CONNS T3B_DUR DUR T1_SECS REPS QUICK; do
  if [ -n "${!v+x}" ]; then
    case ${!v} in *" "* | "") INVOKED="$v=\"${!v}\" $INVOKED" ;; *) INVOKED="$v=${!v} $INVOKED" ;; esac
  fi
done
if [ "${QUICK:-0}" = 1 ]; then
  : "${REPS:=1}" "${T1_SECS:=3}" "${DUR:=3}" "${T5_CONNS:=1000}" "${T5_HOLD:=3}" "${SETTLE:=0.5}" "${OUT:=}"
  : "${T6_DUR:=2}" "${PG_SCALE:=1}" "${T7_REQS:=10000}" "${T8_CONNS:=1000}" "${T8_HOLD:=3}"
fi
REPS=${REPS:-3}
T1_SECS=${T1_SECS:-10}
DUR=${DUR:-8}
T3B_DUR=${T3B_DUR:-$DUR}
T5_CONNS=${T5_CONNS:-5000}
T5_HOLD=${T5_HOLD:-10}
T6_DUR=${T6_DUR:-$DUR}
PG_SCALE=${PG_SCALE:-10}
T7_REQS=${T7_REQS:-200000}
T8_CONNS=${T8_CONNS:-5000}
T8_HOLD=${T8_HOLD:-10}
WORKLOADS=${WORKLOADS:-T1 T2 T3 T4 T5 T6 T7 T8 T9}
PATHS=${PATHS:-direct l4lb l4lb-log iocopy haproxy nginx}
CONNLOG_RATE=${CONNLOG_RATE:-}
SETTLE=${SETTLE:-1}
BUSY_POLL=${BUSY_POLL:-50us}
T4_FLOWS=${T4_FLOWS:-4} T4_INFLIGHT=${T4_INFLIGHT:-8}
OUT=${OUT-docs/bench-proxy.md}
# One core for the balancer, the other for everything else: the comparison
# is "what one balancer core does". On a 1-CPU machine everything shares CPU 0.
LB_CPU=${LB_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
BACKEND_CPU=${BACKEND_CPU:-$CLIENT_CPU}
if [ "$(nproc)" -lt 2 ]; then LB_CPU=0; fi

S="l4bn$$"                       # namespace prefix, unique per run
CLI=$S-cli LB=$S-lb
BACKEND_NS=($S-b1 $S-b2 $S-b3)
BACKEND_IPS=(198.18.1.11 198.18.1.12 198.18.1.13)
VIP=198.18.2.10
BULK_PORT=5201 HTTP_PORT=8080 ECHO_PORT=7000 UDP_PORT=9000 WS_PORT=8090
TLS_PLAIN_PORT=8443 TLS_SNI_PORT=8444 # T9: l4lb's VIPs without and with an SNI route, both to the echo servers
PG_PORT=5432 REDIS_PORT=6379
# DB_SERVICES: "name:port" of the one-backend database services of this
# run (T6: pg, T7: redis), on backend 1; every path gets a VIP for each.
# The name is also loadgen probe's -kind for it.
DB_SERVICES=()

RUN=$(mktemp -d /tmp/l4lb-bench.XXXXXX)
RAW=$RUN/raw.jsonl               # one JSON record per workload run
LBDIR=$RUN/lb                    # per balancer run: <path>-r<N>.{log,exit,events,status.json}
mkdir -p "$LBDIR"
: >"$RAW"
PIDS=()                          # every long-running process started here
LBPID=0                          # the balancer of the current path, 0 for direct
PG_PID=0                         # the PostgreSQL postmaster (T6), 0 when none
PG_BIN=""                        # PostgreSQL's server programs (initdb, postgres, psql)
PG_DIR=$RUN/pg                   # its cluster: data/, run/ (socket), owned by postgres
UDP=0                            # 1 when this build serves UDP VIPs
STATUS=1                         # exit status cleanup reports; 0 once the run completed

# ---------------------------------------------------------------------------
# Helpers.
say() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

# inns NS CMD...: run CMD in a namespace. Only for foreground commands: a
# function sent to the background runs in a subshell, so $! would be the
# subshell's PID, not the program's; background starts call `ip netns exec`.
inns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# track PID PROGRAM: remember a background process, after checking that $!
# really is PROGRAM (ip netns exec and taskset exec their command), so that
# stopping it by PID stops the program itself.
track() {
  PIDS+=("$1")
  local comm="" i
  for ((i = 0; i < 20; i++)); do
    comm=$(cat "/proc/$1/comm" 2>/dev/null) || return 0 # gone already: the readiness check reports it
    [ "$comm" = "$2" ] && return 0
    sleep 0.05 # still ip or taskset, about to exec
  done
  echo "PID $1 is $comm, not $2: it could not be stopped by PID" >&2
  exit 1
}

# alive PID: the process exists and is not a zombie waiting to be reaped.
alive() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [ "${s%% *}" != Z ]
}

# forget PID: drop it from PIDS once it has been stopped.
forget() {
  local keep=() p
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

# stop_pid PID SECS [SIGNAL]: SIGNAL (TERM), wait up to SECS, then SIGKILL;
# prints the exit status (or "killed after Ns") on stdout.
stop_pid() {
  local pid=$1 secs=$2 sig=${3:-TERM} i rc=0 note=""
  kill -"$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < secs * 10; i++)); do alive "$pid" || break; sleep 0.1; done
  if alive "$pid"; then
    kill -KILL "$pid" 2>/dev/null || true
    note=" (did not exit within ${secs}s of SIG$sig: killed)"
  fi
  wait "$pid" 2>/dev/null || rc=$?
  forget "$pid"
  echo "$rc$note"
}

cleanup() {
  local rc=$? p ns
  set +e
  trap - EXIT INT TERM
  # PostgreSQL: SIGINT is the fast shutdown (SIGTERM waits for its clients).
  [ "$PG_PID" = 0 ] || kill -INT "$PG_PID" 2>/dev/null
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 30); do
    local any=0
    for p in "${PIDS[@]}"; do alive "$p" && any=1; done
    [ $any = 0 ] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
  # Backstop: whatever still runs inside our own namespaces was started here.
  for ns in $CLI $LB "${BACKEND_NS[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  if [ "${KEEP:-0}" = 1 ] || [ "$rc" != 0 ] || [ "$STATUS" != 0 ]; then
    echo "raw records and logs kept in $RUN" >&2
  else
    rm -rf "$RUN"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------------------
# Preparation.
need_tools() {
  [ "$(id -u)" = 0 ] || { echo "make bench needs root (it creates network namespaces)" >&2; exit 1; }
  local t
  for t in ip sysctl taskset timeout go; do
    command -v $t >/dev/null || { echo "missing $t (Debian: iproute2, procps, util-linux, coreutils, golang)" >&2; exit 1; }
  done
  if ! command -v iperf3 >/dev/null; then
    say "installing iperf3 (T1 bulk TCP)"
    # A fresh image may have no package lists yet: update once if needed.
    DEBIAN_FRONTEND=noninteractive apt-get install -y iperf3 >&2 ||
      { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y iperf3 >&2; }
  fi
}

# build: the Go helpers into bin/ (bin/l4lb and bin/testserver come from
# `make build`; built here too when the script runs on its own).
build() {
  say "building bin/loadgen, bin/iocopy, bin/bench-report"
  [ -x bin/l4lb ] || go build -o bin/l4lb ./cmd/l4lb
  [ -x bin/testserver ] || go build -o bin/testserver ./scripts/testserver
  go build -o bin/loadgen ./scripts/bench/loadgen
  go build -o bin/iocopy ./scripts/bench/iocopy
  go build -o bin/bench-report ./scripts/bench/report
}

# tune NS: sysctls of one namespace (they are per namespace): a deep accept
# queue and a wide port range with TIME_WAIT reuse for T2's ~70k connections.
tune() {
  inns "$1" sysctl -qw net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535 \
    net.ipv4.ip_local_port_range="1024 65000" net.ipv4.tcp_tw_reuse=1
}

# topo_up: client <-> balancer host <-> bridge <-> three backends. The veths
# are created directly inside the namespaces, never in the root namespace.
topo_up() {
  say "network: namespaces $S-* (client, lb with VIP $VIP, three backends)"
  local ns i
  for ns in $CLI $LB "${BACKEND_NS[@]}"; do
    ip netns add "$ns"
    inns "$ns" ip link set lo up
    tune "$ns"
  done
  topo_links                                  # scripts/lib/topo.sh
  inns $LB sysctl -qw net.ipv4.ip_forward=1   # the direct path is routed through here
}

# backends_start: bin/testserver (HTTP, TCP echo, UDP echo, WebSocket echo) and iperf3 in
# every backend namespace, pinned with the client. Not daemonized: `ip netns
# exec` and taskset exec their command, so $! is the server's own PID.
backends_start() {
  say "backends: testserver (HTTP :$HTTP_PORT, echo :$ECHO_PORT, UDP :$UDP_PORT, WebSocket :$WS_PORT) and iperf3 -s :$BULK_PORT"
  local i ns ip
  for i in 1 2 3; do
    ns=${BACKEND_NS[$((i - 1))]} ip=${BACKEND_IPS[$((i - 1))]}
    ip netns exec "$ns" taskset -c "$BACKEND_CPU" bin/testserver -name b$i -http $ip:$HTTP_PORT \
      -echo $ip:$ECHO_PORT -udp $ip:$UDP_PORT -ws $ip:$WS_PORT >"$RUN/backend-$i.log" 2>&1 &
    track $! testserver
    ip netns exec "$ns" taskset -c "$BACKEND_CPU" iperf3 -s -B $ip -p $BULK_PORT >"$RUN/iperf3-$i.log" 2>&1 &
    track $! iperf3
  done
  for ip in "${BACKEND_IPS[@]}"; do
    client bin/loadgen probe -kind http -addr $ip:$HTTP_PORT -timeout 10s
    client bin/loadgen probe -kind echo -addr $ip:$ECHO_PORT -timeout 5s
    client bin/loadgen probe -kind udp -addr $ip:$UDP_PORT -timeout 5s
    client bin/loadgen probe -kind ws -addr $ip:$WS_PORT -timeout 5s
  done
}

# client CMD...: run a client tool in the client namespace on the client CPU.
client() { inns $CLI taskset -c "$CLIENT_CPU" "$@"; }

# ---------------------------------------------------------------------------
# T6 and T7: a real database in backend 1, behind a one-backend VIP on every
# path (a single-primary database is served by one server).

# db_gate: T6 and T7 stay in WORKLOADS only when their client and server
# are installed; otherwise one line names the Debian package, like a peer.
db_gate() {
  local keep=() w
  for w in $WORKLOADS; do
    case $w in
    T6) pg_gate || continue ;;
    T7) redis_gate || continue ;;
    esac
    keep+=("$w")
  done
  WORKLOADS=${keep[*]}
  [ -n "$WORKLOADS" ] || { echo "WORKLOADS: nothing left to run" >&2; exit 1; }
}

pg_gate() {
  PG_BIN=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  if ! command -v pgbench >/dev/null || ! command -v psql >/dev/null; then
    echo "T6: pgbench is not installed (Debian package postgresql-client); skipped" >&2
  elif [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ] || [ ! -x "$PG_BIN/postgres" ]; then
    echo "T6: the PostgreSQL server is not installed (Debian package postgresql); skipped" >&2
  elif ! id postgres >/dev/null 2>&1 || ! command -v setpriv >/dev/null; then
    echo "T6: no postgres user or no setpriv (Debian packages postgresql, util-linux); skipped" >&2
  else
    DB_SERVICES+=("pg:$PG_PORT")
    return 0
  fi
  return 1
}

redis_gate() {
  if ! command -v redis-benchmark >/dev/null; then
    echo "T7: redis-benchmark is not installed (Debian package redis-tools); skipped" >&2
  elif ! command -v redis-server >/dev/null; then
    echo "T7: redis-server is not installed (Debian package redis-server); skipped" >&2
  else
    DB_SERVICES+=("redis:$REDIS_PORT")
    return 0
  fi
  return 1
}

# pg_start: a private cluster in the run's temp dir, run by the postgres
# user (initdb and the server refuse root), listening on backend 1's
# address; trust logins from the client's subnet (direct path) and from
# the balancer's address on the backend bridge (every proxy path). Tuned
# for a benchmark of the proxy, not of the database: fsync, synchronous
# commit and full-page writes off (nothing here must survive a crash), and
# shared_buffers large enough to hold the pgbench tables (scale 10: about
# 150 MB), so a select reads no file. The tables are made once per run.
pg_start() {
  local be1=${BACKEND_IPS[0]} ns=${BACKEND_NS[0]}
  say "PostgreSQL ($("$PG_BIN/postgres" --version | awk '{print $3}')) on $be1:$PG_PORT, pgbench -i -s $PG_SCALE"
  chmod 0711 "$RUN" # the postgres user reaches its own directory, nothing else
  mkdir -p "$PG_DIR/run"
  chown -R postgres: "$PG_DIR"
  as_postgres "$PG_BIN/initdb" -D "$PG_DIR/data" --auth=trust --username=postgres --no-sync \
    --no-instructions --encoding=UTF8 --locale=C >"$RUN/initdb.log" 2>&1 ||
    { cat "$RUN/initdb.log" >&2; exit 1; }
  printf 'local all all trust\nhost all all 198.18.0.0/24 trust\nhost all all 198.18.1.1/32 trust\n' >"$PG_DIR/data/pg_hba.conf"
  (cd "$PG_DIR" && exec ip netns exec "$ns" taskset -c "$BACKEND_CPU" setpriv --reuid=postgres --regid=postgres \
    --init-groups "$PG_BIN/postgres" -D "$PG_DIR/data" -c listen_addresses="$be1" -c port=$PG_PORT \
    -c unix_socket_directories="$PG_DIR/run" -c fsync=off -c synchronous_commit=off \
    -c full_page_writes=off -c shared_buffers=256MB -c max_connections=100 -c ssl=off) \
    </dev/null >"$RUN/postgres.log" 2>&1 &
  PG_PID=$!
  track $PG_PID postgres
  pg_wait
  pg_init
}

# as_postgres CMD...: run CMD as the postgres user from a directory it can read.
as_postgres() { (cd "$PG_DIR" && runuser -u postgres -- "$@"); }

# pg_wait: until the server accepts logins (pg_isready: 0), at most 30 s.
pg_wait() {
  local i
  for ((i = 0; i < 300; i++)); do
    as_postgres "$PG_BIN/pg_isready" -q -h "$PG_DIR/run" -p $PG_PORT && return 0
    alive $PG_PID || break
    sleep 0.1
  done
  echo "PostgreSQL did not start; its log:" >&2
  cat "$RUN/postgres.log" >&2
  exit 1
}

# pg_init: the pgbench tables, once per run (over the Unix socket), then
# read into shared_buffers (pg_prewarm, shipped with the server), so the
# first path measured does not pay for a cold cache.
pg_init() {
  local sock=(-h "$PG_DIR/run" -p "$PG_PORT" -U postgres)
  as_postgres pgbench -i -q -s "$PG_SCALE" "${sock[@]}" postgres >"$RUN/pgbench-init.log" 2>&1 ||
    { cat "$RUN/pgbench-init.log" >&2; exit 1; }
  as_postgres psql -q "${sock[@]}" -d postgres -c 'CREATE EXTENSION IF NOT EXISTS pg_prewarm' \
    -c "SELECT pg_prewarm('pgbench_accounts'), pg_prewarm('pgbench_accounts_pkey')" >/dev/null ||
    echo "pg_prewarm failed: the first path of round 1 starts with a cold cache" >&2
}

# redis_start: redis-server on backend 1's address, no persistence.
redis_start() {
  local be1=${BACKEND_IPS[0]} ns=${BACKEND_NS[0]}
  say "Redis ($(redis-server --version | grep -o 'v=[^ ]*')) on $be1:$REDIS_PORT, no persistence"
  mkdir -p "$RUN/redis"
  ip netns exec "$ns" taskset -c "$BACKEND_CPU" redis-server --bind "$be1" --port $REDIS_PORT \
    --save '' --appendonly no --protected-mode no --dir "$RUN/redis" --daemonize no \
    </dev/null >"$RUN/redis.log" 2>&1 &
  track $! redis-server
  client bin/loadgen probe -kind redis -addr "$be1:$REDIS_PORT" -timeout 10s
}

# dbs_start: the servers of DB_SERVICES.
dbs_start() {
  local svc
  for svc in "${DB_SERVICES[@]}"; do
    case ${svc%%:*} in
    pg) pg_start ;;
    redis) redis_start ;;
    esac
  done
}

# ---------------------------------------------------------------------------
# l4lb configuration.
backend_list() {
  local port=$1 ip
  for ip in "${BACKEND_IPS[@]}"; do printf '  [[vip.backend]]\n  address = "%s:%s"\n' "$ip" "$port"; done
}

udp_vip() {
  cat <<TOML

[[vip]]
name = "udp"
listen = "$VIP:$UDP_PORT"
protocol = "udp"
algorithm = "round_robin"
$(backend_list $UDP_PORT)
TOML
}

# sni_vips: T9: two VIPs to the echo servers, one plain, one whose
# ClientHellos are peeked and routed by server name (an SNI route to the
# same servers): the two differ only by the peek. The SNI VIP sets
# defer_accept, as docs/guide.md advises for SNI VIPs (TLS clients speak
# first): the ClientHello is then queued when the connection is accepted.
sni_vips() {
  cat <<TOML

# T9: new connections sending a TLS ClientHello, without and with SNI routing
[[vip]]
name = "tls-plain"
listen = "$VIP:$TLS_PLAIN_PORT"
protocol = "tcp"
algorithm = "round_robin"
$(backend_list $ECHO_PORT)

[[vip]]
name = "tls-sni"
listen = "$VIP:$TLS_SNI_PORT"
protocol = "tcp"
algorithm = "round_robin"
sni_no_match = "close"
defer_accept = true
$(backend_list $ECHO_PORT)
  [[vip.route]]
  name = "bench"
  names = ["bench.example", "*.bench.example"]
$(backend_list $ECHO_PORT | sed 's/vip.backend/vip.route.backend/')
TOML
}

# db_vip NAME PORT: T6, T7: a VIP with backend 1 only.
db_vip() {
  cat <<TOML

# T6/T7: a database with one server
[[vip]]
name = "$1"
listen = "$VIP:$2"
protocol = "tcp"
algorithm = "round_robin"
  [[vip.backend]]
  address = "${BACKEND_IPS[0]}:$2"
TOML
}

write_l4lb_config() {
  cat >"$RUN/l4lb.toml" <<TOML
# written by scripts/bench.sh
[global]
log_level = "warn"
admin_socket = "$RUN/admin.sock"
drain_timeout = "2s"

# T1: iperf3 needs every connection of a test on one server. No health
# check: a probe connection would disturb iperf3's control channel.
[[vip]]
name = "bulk"
listen = "$VIP:$BULK_PORT"
protocol = "tcp"
algorithm = "round_robin"
  [vip.health]
  type = "none"
  [[vip.backend]]
  address = "${BACKEND_IPS[0]}:$BULK_PORT"

# T2
[[vip]]
name = "http"
listen = "$VIP:$HTTP_PORT"
protocol = "tcp"
algorithm = "round_robin"
$(backend_list $HTTP_PORT)

# T3, T5
[[vip]]
name = "echo"
listen = "$VIP:$ECHO_PORT"
protocol = "tcp"
algorithm = "round_robin"
$(backend_list $ECHO_PORT)

# T8: WebSockets, checked by an upgrade
[[vip]]
name = "ws"
listen = "$VIP:$WS_PORT"
protocol = "tcp"
algorithm = "round_robin"
  [vip.health]
  type = "http"
  websocket = true
$(backend_list $WS_PORT)
TOML
  if [ $UDP = 1 ]; then udp_vip >>"$RUN/l4lb.toml"; fi
  sni_vips >>"$RUN/l4lb.toml"
  local svc
  for svc in "${DB_SERVICES[@]}"; do db_vip "${svc%%:*}" "${svc##*:}" >>"$RUN/l4lb.toml"; done
  inns $LB bin/l4lb check --config "$RUN/l4lb.toml" >&2 # there, it sees the VIP
  write_log_config
  sed "s/^drain_timeout = .*/&\nbusy_poll = \"$BUSY_POLL\"/" "$RUN/l4lb.toml" >"$RUN/l4lb-poll.toml"
  inns $LB bin/l4lb check --config "$RUN/l4lb-poll.toml" >&2
  sed "s/^drain_timeout = .*/&\nkernel_forwarding = \"auto\"/" "$RUN/l4lb.toml" >"$RUN/l4lb-kern.toml"
  inns $LB bin/l4lb check --config "$RUN/l4lb-kern.toml" >&2
  cp "$RUN/l4lb.toml" "$RUN/l4lb-alt.toml"
}

# write_log_config: l4lb-log's config, l4lb's with one line per connection
# on every VIP ([defaults] log_connections = true) at log_level info.
write_log_config() {
  local defaults
  defaults=$(printf '[defaults]\nlog_connections = true\n%s' "${CONNLOG_RATE:+log_connections_rate = $CONNLOG_RATE}")
  awk -v d="$defaults" '/^log_level = / { print "log_level = \"info\""; next }
    /^# T1:/ && !done { print d; print ""; done = 1 } { print }' "$RUN/l4lb.toml" >"$RUN/l4lb-log.toml"
  inns $LB bin/l4lb check --config "$RUN/l4lb-log.toml" >&2
}

# udp_gate: T4 runs only when this build serves UDP VIPs. `l4lb check` must
# accept one, and, because a VIP that check accepts but run refuses would
# stop the whole l4lb path, a trial `l4lb run` must answer a UDP echo.
udp_gate() {
  [[ " $PATHS " == *" l4lb "* ]] || return 0
  { printf '[global]\nlog_level = "warn"\nadmin_socket = "off"\n'; udp_vip; } >"$RUN/udp-check.toml"
  if ! inns $LB bin/l4lb check --config "$RUN/udp-check.toml" >"$RUN/udp-check.out" 2>&1; then
    echo "UDP: not supported by this build (l4lb check: $(tail -n 1 "$RUN/udp-check.out"))" >&2
    return
  fi
  ip netns exec $LB taskset -c "$LB_CPU" bin/l4lb run --config "$RUN/udp-check.toml" >"$RUN/udp-trial.log" 2>&1 &
  local pid=$! ok=0
  track $pid l4lb
  if client bin/loadgen probe -kind udp -addr $VIP:$UDP_PORT -timeout 5s 2>/dev/null; then ok=1; fi
  stop_pid $pid 5 >/dev/null
  if [ $ok = 1 ]; then
    UDP=1
    echo "UDP: supported, T4 runs on l4lb" >&2
  else
    echo "UDP: not supported by this build (l4lb check accepts a protocol = \"udp\" VIP, but l4lb run does not serve it: $(grep -v '^\s*$' "$RUN/udp-trial.log" | tail -n 1 | cut -c1-200))" >&2
  fi
}

# ---------------------------------------------------------------------------
# Balancers. lb_start PATH ROUND starts it in the lb namespace on LB_CPU and
# waits until the VIP answers; lb_stop saves its counters and exit status.
lb_start() {
  local path=$1 round=$2 log=$LBDIR/$1-r$2.log svc dbmaps=()
  case $path in
  direct)
    LBPID=0
    return
    ;;
  l4lb | l4lb-log | l4lb-poll | l4lb-kern | l4lb-alt)
    rm -f "$RUN/admin.sock"
    local bin=bin/l4lb
    [ "$path" != l4lb-alt ] || bin=$RUN/alt/l4lb
    ip netns exec $LB taskset -c "$LB_CPU" "$bin" run --config "$RUN/$path.toml" >>"$log" 2>&1 &
    ;;
  iocopy)
    for svc in "${DB_SERVICES[@]}"; do dbmaps+=(-map "$VIP:${svc##*:}=${BACKEND_IPS[0]}:${svc##*:}"); done
    ip netns exec $LB taskset -c "$LB_CPU" bin/iocopy -map $VIP:$BULK_PORT=${BACKEND_IPS[0]}:$BULK_PORT \
      -map "$VIP:$HTTP_PORT=$(addrs $HTTP_PORT)" -map "$VIP:$ECHO_PORT=$(addrs $ECHO_PORT)" \
      -map "$VIP:$WS_PORT=$(addrs $WS_PORT)" "${dbmaps[@]}" >>"$log" 2>&1 &
    ;;
  haproxy | nginx)
    peer_start "$path" "$log"
    ;;
  esac
  LBPID=$!
  local prog=${path%-log}
  prog=${prog%-poll}
  prog=${prog%-kern}
  track $LBPID "${prog%-alt}"
  echo $LBPID >"$RUN/lb.pid"
  if ! client bin/loadgen probe -kind http -addr $VIP:$HTTP_PORT -timeout 10s ||
    ! client bin/loadgen probe -kind echo -addr $VIP:$ECHO_PORT -timeout 5s ||
    ! client bin/loadgen probe -kind ws -addr $VIP:$WS_PORT -timeout 5s; then
    echo "$path did not start; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
  for svc in "${DB_SERVICES[@]}"; do
    client bin/loadgen probe -kind "${svc%%:*}" -addr "$VIP:${svc##*:}" -timeout 10s ||
      echo "!! $path: the ${svc%%:*} VIP does not answer yet" >&2
  done
  if [ "$path" != direct ] && serves_udp "$path"; then
    client bin/loadgen probe -kind udp -addr $VIP:$UDP_PORT -timeout 5s || true
  fi
}

# serves_udp PATH: whether T4 runs on PATH. HAProxy (community) has no UDP
# proxying and iocopy is TCP only; l4lb when this build serves UDP VIPs.
serves_udp() {
  case $1 in
  direct | nginx) return 0 ;;
  l4lb | l4lb-poll | l4lb-kern | l4lb-alt) [ $UDP = 1 ] ;;
  *) return 1 ;;
  esac
}

addrs() {
  local port=$1 ip out=""
  for ip in "${BACKEND_IPS[@]}"; do out+="${out:+,}$ip:$port"; done
  echo "$out"
}

lb_stop() {
  local path=$1 round=$2
  [ "$LBPID" != 0 ] || return 0
  if [[ $path == l4lb* ]] && alive "$LBPID"; then
    bin/l4lb status --socket "$RUN/admin.sock" --json >"$LBDIR/$path-r$round.status.json" 2>>"$LBDIR/$path-r$round.events" || true
  fi
  # HAProxy dies by SIGTERM (status 143); SIGUSR1 is its clean stop, and
  # the load has ended, so it exits 0 at once.
  local sig=TERM
  [ "$path" = haproxy ] && sig=USR1
  stop_pid "$LBPID" 10 $sig >"$LBDIR/$path-r$round.exit"
  LBPID=0
}

# lb_ensure PATH ROUND STEP: if the balancer died during the last step, note
# it (a crash is the most important finding) and start it again, so the
# remaining steps still measure something.
lb_ensure() {
  local path=$1 round=$2 step=$3
  [ "$LBPID" != 0 ] && ! alive "$LBPID" || return 0
  local rc=0
  wait "$LBPID" 2>/dev/null || rc=$?
  forget "$LBPID"
  echo "exited with status $rc before $step; restarted" >>"$LBDIR/$path-r$round.events"
  echo "!! $path exited with status $rc before $step (round $round); restarting it" >&2
  lb_start "$path" "$round"
}

# ---------------------------------------------------------------------------
# Workloads. measure TEST PATH ROUND LIMIT SUBCOMMAND ARGS... runs loadgen in
# the client namespace, bounded by LIMIT seconds, and appends its record.
measure() {
  local test=$1 path=$2 round=$3 limit=$4 sub=$5 rc=0 out
  shift 5
  lb_ensure "$path" "$round" "$test"
  out=$(inns $CLI timeout --foreground -k 5 "$limit" taskset -c "$CLIENT_CPU" bin/loadgen "$sub" \
    -test "$test" -path "$path" -round "$round" -lbpid "$LBPID" "$@") || rc=$?
  if [ $rc = 0 ] && [ -n "$out" ]; then
    echo "$out" >>"$RAW"
  else
    printf '{"test":"%s","path":"%s","round":%d,"failed":true,"rc":%d}\n' "$test" "$path" "$round" "$rc" >>"$RAW"
    echo "!! $test on $path failed (exit $rc)" >&2
  fi
  sleep "$SETTLE"
}

skip() { printf '{"test":"%s","path":"%s","round":%d,"skipped":"%s"}\n' "$1" "$2" "$3" "$4" >>"$RAW"; }

wants() { [[ " $WORKLOADS " == *" $1 "* ]]; }

# runs TEST: whether run_path runs TEST on its path: every selected
# workload, except on l4lb-log, which measures T2 only.
runs() { wants "$1" && { [ "$path" != l4lb-log ] || [ "$1" = T2 ]; }; }

# run_path PATH ROUND: every selected workload against one path.
run_path() {
  local path=$1 round=$2 host=$VIP be1=${BACKEND_IPS[0]}
  [ "$path" = direct ] && host=$be1
  say "round $round/$REPS: $path"
  lb_start "$path" "$round"
  if runs T1; then
    measure T1-1 "$path" "$round" $((T1_SECS + 40)) bulk -addr $host:$BULK_PORT -P 1 -t "$T1_SECS" -O 1
    measure T1-8 "$path" "$round" $((T1_SECS + 40)) bulk -addr $host:$BULK_PORT -P 8 -t "$T1_SECS" -O 1
  fi
  if runs T2; then
    measure T2 "$path" "$round" $((DUR + 40)) connrate -addr $host:$HTTP_PORT -c 64 -d "${DUR}s" -warmup 1s
  fi
  if runs T9 && [ "$path" = l4lb ]; then
    # The same ClientHello to both VIPs; which goes first alternates by round.
    local v vips=(plain:$TLS_PLAIN_PORT sni:$TLS_SNI_PORT)
    [ $((round % 2)) = 0 ] && vips=(sni:$TLS_SNI_PORT plain:$TLS_PLAIN_PORT)
    for v in "${vips[@]}"; do
      measure "T9-${v%%:*}" "$path" "$round" $((DUR + 40)) connrate -addr "$VIP:${v##*:}" -hello bench.example \
        -c 64 -d "${DUR}s" -warmup 1s
    done
  fi
  if runs T3; then
    measure T3 "$path" "$round" $((DUR + 40)) rr -addr $host:$ECHO_PORT -c 4 -rate 2000 -d "${DUR}s"
    measure T3b "$path" "$round" $((T3B_DUR + 40)) rr -addr $host:$ECHO_PORT -c 64 -rate 0 -d "${T3B_DUR}s"
  fi
  if runs T4; then
    if serves_udp "$path"; then
      measure T4 "$path" "$round" $((DUR + 40)) udp -addr $host:$UDP_PORT -flows "$T4_FLOWS" -inflight "$T4_INFLIGHT" -size 64 -d "${DUR}s"
    else
      skip T4 "$path" "$round" "no UDP"
    fi
  fi
  if runs T5 && [ "$path" != direct ]; then
    measure T5 "$path" "$round" $((T5_HOLD + T5_CONNS / 50 + 60)) hold -addr $VIP:$ECHO_PORT \
      -n "$T5_CONNS" -hold "${T5_HOLD}s" -pidfile "$RUN/lb.pid"
  fi
  if runs T8; then
    local pidfile=()
    [ "$path" = direct ] || pidfile=(-pidfile "$RUN/lb.pid")
    measure T8 "$path" "$round" $((T8_HOLD + T8_CONNS / 50 + 60)) wshold -addr $host:$WS_PORT \
      -n "$T8_CONNS" -hold "${T8_HOLD}s" "${pidfile[@]}"
  fi
  if runs T6; then
    measure T6 "$path" "$round" $((T6_DUR + 70)) pgbench -addr "$host:$PG_PORT" -c 16 -j 2 -T "$T6_DUR"
  fi
  if runs T7; then
    # SET first, so that GET finds most of its keys (-r 100000).
    local t lim=$((T7_REQS / 2000 + 30))
    for t in set get; do
      measure "T7-$t" "$path" "$round" $((lim + 15)) redis -addr "$host:$REDIS_PORT" -t $t -n "$T7_REQS" \
        -c 50 -P 1 -r 100000 -timeout "${lim}s"
    done
  fi
  lb_ensure "$path" "$round" "the end of the round"
  lb_stop "$path" "$round"
}

# paths_gate: keep the PATHS this machine can run. A peer that is not
# installed, or whose config its own check refuses, is left out with one
# line saying why: the peers are optional, the run goes on without them.
paths_gate() {
  local path kept=""
  for path in $PATHS; do
    case $path in
    direct | l4lb | l4lb-poll | l4lb-kern | iocopy) ;;
    l4lb-log)
      if ! wants T2; then
        echo "PATHS: l4lb-log measures T2 only, which WORKLOADS leaves out; left out" >&2
        continue
      fi
      ;;
    l4lb-alt)
      if [ -z "${ALT_BIN:-}" ] || [ ! -x "$ALT_BIN" ]; then
        echo "PATHS: l4lb-alt needs ALT_BIN, the l4lb binary to run (got '${ALT_BIN:-}')" >&2
        exit 1
      fi
      # Named l4lb like the first, so that it is tracked and stopped alike.
      mkdir -p "$RUN/alt" && cp "$ALT_BIN" "$RUN/alt/l4lb"
      ;;
    haproxy | nginx) peer_check "$path" >&2 || continue ;;
    *)
      echo "PATHS: unknown path $path (known: direct l4lb l4lb-log l4lb-poll l4lb-kern l4lb-alt iocopy $PEERS)" >&2
      exit 1
      ;;
    esac
    [[ " $kept " == *" $path "* ]] || kept+="${kept:+ }$path"
  done
  PATHS=$kept
  [ -n "$PATHS" ] || { echo "PATHS: nothing left to run" >&2; exit 1; }
  echo "paths: $PATHS" >&2
}

# backends_ensure: a dead backend would turn every later figure into errors:
# stop with a clear message instead.
backends_ensure() {
  local p
  for p in "${PIDS[@]}"; do
    alive "$p" || { echo "a backend process ($p) died; logs in $RUN" >&2; exit 1; }
  done
}

# dbs_stop: the database servers, at the end of a run that completed
# (PostgreSQL by its fast shutdown).
dbs_stop() {
  [ "$PG_PID" = 0 ] || stop_pid $PG_PID 10 INT >/dev/null
  PG_PID=0
}

report() {
  local out=$RUN/bench-proxy.md
  [ -n "$OUT" ] && out=$OUT
  say "results (written to $out)"
  bin/bench-report -in "$RAW" -lbdir "$LBDIR" -out "$out" -paths "$PATHS" -peers "$PEERS" -peerinfo "$PEER_INFO" -cmd "$INVOKED" \
    -knobs "REPS=$REPS${CONNLOG_RATE:+ CONNLOG_RATE=$CONNLOG_RATE} T1_SECS=$T1_SECS DUR=$DUR T3B_DUR=$T3B_DUR T5_CONNS=$T5_CONNS T5_HOLD=$T5_HOLD T6_DUR=$T6_DUR PG_SCALE=$PG_SCALE T7_REQS=$T7_REQS T8_CONNS=$T8_CONNS T8_HOLD=$T8_HOLD PEER_CHECKS=${PEER_CHECKS:-1}${ALT_BIN:+ ALT_BIN=$ALT_BIN} WORKLOADS=\"$WORKLOADS\"$([ "${QUICK:-0}" = 1 ] && echo ' (QUICK=1 smoke run: figures are not a measurement)')" \
    -pinning "balancer on CPU $LB_CPU (GOMAXPROCS follows the mask; HAProxy nbthread 1, nginx 1 worker); client tools on CPU $CLIENT_CPU, backends on CPU $BACKEND_CPU"
}

main() {
  need_tools
  build
  topo_up
  db_gate
  paths_gate
  backends_start
  dbs_start
  udp_gate
  write_l4lb_config
  local round path
  for round in $(seq "$REPS"); do
    for path in $PATHS; do
      backends_ensure
      run_path "$path" "$round"
    done
  done
  dbs_stop
  report
  STATUS=0
}

main "$@"
