# shellcheck shell=bash
# Sourced by scripts/bench.sh: the peers l4lb is compared with, HAProxy
# (TCP only, splice forced) and nginx's stream module (TCP and UDP). Each
# runs only when its Debian package is installed: haproxy; nginx-light (or
# nginx) with libnginx-mod-stream, or nginx-full. Their configs go into the
# run's temp dir; both stay in the foreground so that the PID bench.sh
# tracks is the balancer's own (nginx's worker is its child, and loadgen
# sums the CPU, memory and descriptors of the whole process tree).
#
# Uses from bench.sh: RUN, VIP, BACKEND_IPS, the *_PORT variables,
# DB_SERVICES, LB and LB_CPU. Every peer balances round-robin, like l4lb's
# VIPs here. HAProxy checks every server as l4lb does, a TCP connect every
# 2 s (its `check` default and l4lb's), so that both pay for probing
# (PEER_CHECKS=0 turns HAProxy's checks off); nginx's stream module has no
# active health checks.

PEERS="haproxy nginx" # the paths that are peers; the report's "best peer" is the best of these
PEER_INFO=""          # "name version (settings); ..." for the report's header

# is_peer PATH
is_peer() { [[ " $PEERS " == *" $1 "* ]]; }

# nofile_budget: the descriptors one balancer process may hold, from the
# hard RLIMIT_NOFILE (an unprivileged container cannot raise it). T5 needs
# two per held connection, and HAProxy's splice pipes two per four.
nofile_budget() {
  local hard
  hard=$(ulimit -Hn)
  [ "$hard" = unlimited ] && hard=65536
  echo $((hard < 65536 ? hard : 65536))
}

# peer_check NAME: writes NAME's config and checks it with the binary's own
# check, in the balancer namespace (it must exist). On failure prints why,
# in one line, and returns 1.
peer_check() {
  case $1 in
  haproxy) haproxy_check ;;
  nginx) nginx_check ;;
  esac
}

# peer_start NAME LOG: starts NAME in the balancer namespace on the
# balancer's core, in the background: the caller takes the PID from $!.
# `ip netns exec` and taskset exec their command, so $! is the balancer.
peer_start() {
  case $1 in
  haproxy)
    ip netns exec "$LB" taskset -c "$LB_CPU" haproxy -db -f "$RUN/haproxy.cfg" </dev/null >>"$2" 2>&1 &
    ;;
  nginx)
    ip netns exec "$LB" taskset -c "$LB_CPU" nginx -e stderr -p "$RUN/nginx/" -c "$RUN/nginx/nginx.conf" \
      </dev/null >>"$2" 2>&1 &
    ;;
  esac
}

# first_error TEXT: the line of a failed check that says why.
first_error() { { grep -m1 -E 'emerg|ALERT|rror' <<<"$1" || tail -n 1 <<<"$1"; } | cut -c1-200; }

# server_lines PREFIX PORT: one HAProxy "server" line per backend.
server_lines() {
  local i
  for i in "${!BACKEND_IPS[@]}"; do
    printf '    server %s%d %s:%s\n' "$1" $((i + 1)) "${BACKEND_IPS[$i]}" "$2"
  done
}

# haproxy_db_listens: T6, T7: one listen section per database service, to
# backend 1 only.
haproxy_db_listens() {
  local svc
  for svc in "${DB_SERVICES[@]}"; do
    printf '\n# T6/T7: a database with one server\nlisten %s\n    bind %s:%s\n    server b1 %s:%s\n' \
      "${svc%%:*}" "$VIP" "${svc##*:}" "${BACKEND_IPS[0]}" "${svc##*:}"
  done
}

haproxy_check() {
  command -v haproxy >/dev/null || {
    echo "haproxy: not installed (Debian package haproxy); skipped"
    return 1
  }
  # HAProxy sizes its descriptor table from maxconn: 2 sockets per
  # connection plus, with splice, a pipe (2 fds) per 4 connections
  # (maxpipes defaults to maxconn/4), and some to spare.
  local maxconn=$((($(nofile_budget) - 500) * 2 / 5))
  cat >"$RUN/haproxy.cfg" <<CFG
# written by scripts/bench.sh: HAProxy as a peer of l4lb
global
    nbthread 1
    maxconn $maxconn

defaults
    mode tcp
    timeout connect 5s
    timeout client 10m
    timeout server 10m
    # Forced splice in both directions: with splice-auto, HAProxy 2.6 on
    # veths hardly ever splices and copies through user space instead.
    option splice-request
    option splice-response
$([ "${PEER_CHECKS:-1}" = 0 ] || printf '    # Health checks as l4lb runs them (PEER_CHECKS=0: none).\n    default-server check inter 2s\n')

# T1: one backend, as iperf3 needs all of a test's connections on one server;
# not checked, as l4lb does not check it (a probe would disturb iperf3).
listen bulk
    bind $VIP:$BULK_PORT
    server b1 ${BACKEND_IPS[0]}:$BULK_PORT no-check

# T2
listen http
    bind $VIP:$HTTP_PORT
    balance roundrobin
$(server_lines h "$HTTP_PORT")

# T3, T5
listen echo
    bind $VIP:$ECHO_PORT
    balance roundrobin
$(server_lines e "$ECHO_PORT")

# T8: WebSockets
listen ws
    bind $VIP:$WS_PORT
    balance roundrobin
$(server_lines w "$WS_PORT")
$(haproxy_db_listens)
CFG
  local out
  if ! out=$(ip netns exec "$LB" haproxy -c -q -f "$RUN/haproxy.cfg" 2>&1); then
    echo "haproxy: its config check failed ($(first_error "$out")); skipped"
    return 1
  fi
  PEER_INFO+="${PEER_INFO:+; }$(haproxy -v | sed -n 's/^HAProxy version \([^ ]*\).*/HAProxy \1/p') (mode tcp, forced splice, nbthread 1, maxconn $maxconn)"
}

# nginx_stream_load: the line that gives nginx its stream module, or
# return 1: Debian builds it as a dynamic module (libnginx-mod-stream).
nginx_stream_load() {
  local v moddir
  v=$(nginx -V 2>&1)
  if grep -qE -- '--with-stream=dynamic( |$)' <<<"$v"; then
    moddir=$(grep -oE -- '--modules-path=[^ ]+' <<<"$v" | cut -d= -f2)
    moddir=${moddir:-/usr/lib/nginx/modules}
    [ -f "$moddir/ngx_stream_module.so" ] || return 1
    echo "load_module $moddir/ngx_stream_module.so;"
  elif grep -qE -- '--with-stream( |$)' <<<"$v"; then
    echo "# the stream module is built in"
  else
    return 1
  fi
}

# nginx_upstream NAME PORT
nginx_upstream() {
  local ip
  echo "    upstream $1 {"
  for ip in "${BACKEND_IPS[@]}"; do echo "        server $ip:$2;"; done
  echo "    }"
}

# nginx_db_servers: T6, T7: one server block per database service, to
# backend 1 only.
nginx_db_servers() {
  local svc
  for svc in "${DB_SERVICES[@]}"; do
    printf '    server { listen %s:%s backlog=65535; proxy_pass %s:%s; proxy_timeout 10m; }\n' \
      "$VIP" "${svc##*:}" "${BACKEND_IPS[0]}" "${svc##*:}"
  done
}

nginx_check() {
  command -v nginx >/dev/null || {
    echo "nginx: not installed (Debian packages nginx-light and libnginx-mod-stream, or nginx-full); skipped"
    return 1
  }
  local load
  load=$(nginx_stream_load) || {
    echo "nginx: installed without the stream module (Debian package libnginx-mod-stream); skipped"
    return 1
  }
  # worker_connections counts both legs of a proxied connection.
  local nofile
  nofile=$(nofile_budget)
  mkdir -p "$RUN/nginx"
  cat >"$RUN/nginx/nginx.conf" <<CFG
# written by scripts/bench.sh: nginx's stream module as a peer of l4lb
$load
daemon off;
worker_processes 1;
worker_rlimit_nofile $((nofile - 100));
pid $RUN/nginx/nginx.pid;
error_log stderr warn;
events { worker_connections $((nofile - 500)); }

stream {
    upstream bulk { server ${BACKEND_IPS[0]}:$BULK_PORT; }
$(nginx_upstream http "$HTTP_PORT")
$(nginx_upstream echo "$ECHO_PORT")
$(nginx_upstream udp "$UDP_PORT")
$(nginx_upstream ws "$WS_PORT")
    # backlog: nginx's default is 511; Go's listeners (l4lb, iocopy) take
    # net.core.somaxconn (65535 in these namespaces).
    server { listen $VIP:$BULK_PORT backlog=65535; proxy_pass bulk; proxy_timeout 10m; }
    server { listen $VIP:$HTTP_PORT backlog=65535; proxy_pass http; proxy_timeout 10m; }
    server { listen $VIP:$ECHO_PORT backlog=65535; proxy_pass echo; proxy_timeout 10m; }
    server { listen $VIP:$UDP_PORT udp; proxy_pass udp; proxy_timeout 10s; }
    server { listen $VIP:$WS_PORT backlog=65535; proxy_pass ws; proxy_timeout 10m; }
$(nginx_db_servers)
}
CFG
  # nginx -t binds the listeners it tests: in the balancer's namespace,
  # where the VIP is, before anything else listens there.
  local out
  if ! out=$(ip netns exec "$LB" nginx -t -q -e stderr -p "$RUN/nginx/" -c "$RUN/nginx/nginx.conf" 2>&1); then
    echo "nginx: its config check failed ($(first_error "$out")); skipped"
    return 1
  fi
  PEER_INFO+="${PEER_INFO:+; }$(nginx -v 2>&1 | sed -n 's|.*nginx/\([^ ]*\).*|nginx \1|p') (stream module, 1 worker)"
}
