#!/usr/bin/env bash
# make demo: a throwaway network (client, balancer, three backends, each in
# its own namespace), l4lb in front of the backends, some traffic, what each
# backend served, then everything removed again (also on Ctrl-C). Part 2
# shows the XDP fast path: one-arm direct server return, backends
# decapsulating with `l4lb decap`, replies that never cross the balancer.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "make demo needs root (it creates network namespaces)"; exit 1; }
for tool in ip; do command -v $tool >/dev/null || { echo "missing $tool: apt-get install -y iproute2"; exit 1; }; done

S="l4d$$"                        # unique per run: namespaces never collide
CLI=$S-cli LB=$S-lb
BACKENDS=($S-b1 $S-b2 $S-b3)
SW=$S-sw XCLI=$S-xcli XLB=$S-xlb  # part 2: the XDP network
XBACKENDS=($S-xb1 $S-xb2 $S-xb3)
XVIP=198.18.100.1
VIP=198.18.2.10
TMP=$(mktemp -d /tmp/l4lb-demo.XXXXXX)
PIDS=()
BPIDS=()

cleanup() {
  set +e
  for p in "${PIDS[@]}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do [ -n "$p" ] && wait "$p" 2>/dev/null; done
  for ns in $CLI $LB "${BACKENDS[@]}" $SW $XCLI $XLB "${XBACKENDS[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

source scripts/lib/demo.sh # step, inns, wait_running

step "network: client -> l4lb (VIP $VIP) -> three backends, in namespaces $S-*"
for ns in $CLI $LB "${BACKENDS[@]}"; do ip netns add "$ns"; inns "$ns" ip link set lo up; done
ip link add c0 netns $CLI type veth peer name x0 netns $LB
inns $CLI ip addr add 198.18.0.2/24 dev c0 && inns $CLI ip link set c0 up
inns $CLI ip route add default via 198.18.0.1
inns $LB ip addr add 198.18.0.1/24 dev x0 && inns $LB ip link set x0 up
inns $LB ip addr add $VIP/32 dev lo
inns $LB ip link add br0 type bridge
inns $LB ip addr add 198.18.1.1/24 dev br0 && inns $LB ip link set br0 up
for i in 1 2 3; do
  ns=${BACKENDS[$((i-1))]}
  ip link add xb$i netns $LB type veth peer name b0 netns "$ns"
  inns $LB ip link set xb$i master br0 && inns $LB ip link set xb$i up
  inns "$ns" ip addr add 198.18.1.1$i/24 dev b0 && inns "$ns" ip link set b0 up
  inns "$ns" ip route add default via 198.18.1.1
  # `ip netns exec` execs the program, so $! is the server's own PID
  ip netns exec "$ns" bin/testserver -name backend-$i -http 198.18.1.1$i:8080 -https 198.18.1.1$i:8443 > "$TMP/backend-$i.log" 2>&1 &
  PIDS+=($!); BPIDS+=($!)
done

cat > "$TMP/l4lb.toml" <<TOML
[global]
log_level = "info"
admin_socket = "$TMP/admin.sock"
drain_timeout = "5s"

[[vip]]
name = "web"
listen = "$VIP:80"
protocol = "tcp"
algorithm = "round_robin"
  [vip.health]
  type = "http"
  path = "/"
  interval = "500ms"
  timeout = "300ms"
  [[vip.backend]]
  name = "backend-1"
  address = "198.18.1.11:8080"
  [[vip.backend]]
  name = "backend-2"
  address = "198.18.1.12:8080"
  [[vip.backend]]
  name = "backend-3"
  address = "198.18.1.13:8080"
TOML

step "bin/l4lb check --config demo.toml (in the balancer namespace, where the VIP address is)"
inns $LB bin/l4lb check --config "$TMP/l4lb.toml"

step "bin/l4lb run --config demo.toml (in the balancer namespace)"
ip netns exec $LB bin/l4lb run --config "$TMP/l4lb.toml" > "$TMP/l4lb.log" 2>&1 &
LBPID=$!
PIDS+=($LBPID)
wait_running "$TMP/l4lb.log" $LBPID
sed 's/^/  l4lb| /' "$TMP/l4lb.log"

requests() { # requests N: N HTTP/1.0 requests to the VIP from the client namespace
  inns $CLI bash -c '
    for i in $(seq '"$1"'); do
      exec 3<>/dev/tcp/'$VIP'/80
      printf "GET / HTTP/1.0\r\nHost: demo\r\n\r\n" >&3
      tail -n 1 <&3
      exec 3>&-
    done'
}
per_backend() { cut -d: -f1 | sort | uniq -c | sed 's/^/  /'; }

stop_lb() { # stop_lb PID LOG: SIGTERM, wait, show how it ended
  local status=0
  kill -TERM "$1"
  wait "$1" || status=$?
  echo "l4lb exited with status $status"
  PIDS=("${PIDS[@]/$1}")
  tail -n 2 "$2" | cut -c1-160 | sed 's/^/  l4lb| /'
}

# Let the first health checks (every 500 ms) mark the backends up.
sleep 1.2

step "client: 30 HTTP requests to $VIP:80"
requests 30 > "$TMP/replies"
head -n 6 "$TMP/replies" | sed 's/^/  /'
echo "  ... ($(wc -l < "$TMP/replies") replies)"
echo
echo "replies per backend (as the client saw them):"
per_backend < "$TMP/replies"

step "bin/l4lb status: what each backend served"
bin/l4lb status --socket "$TMP/admin.sock"

step "backend-2's server dies: clients are still served (refused connects are retried on the next backend), health marks it down"
kill "${BPIDS[1]}"; wait "${BPIDS[1]}" 2>/dev/null || true
requests 12 > "$TMP/replies2"
echo "12 more requests, replies per backend:"
per_backend < "$TMP/replies2"
sleep 1
bin/l4lb status --socket "$TMP/admin.sock"

step "an operator drains backend-1 for maintenance: new connections avoid it, established ones would go on"
bin/l4lb drain --socket "$TMP/admin.sock" --reason "kernel upgrade" web backend-1
requests 6 > "$TMP/replies3"
echo "6 more requests, replies per backend:"
per_backend < "$TMP/replies3"
bin/l4lb status --socket "$TMP/admin.sock" | grep -E "BACKEND|backend-1"

step "bin/l4lb explain: where would the client's next connection go, and why"
bin/l4lb explain --socket "$TMP/admin.sock" web 198.18.0.2:40000

step "bin/l4lb enable: backend-1 takes new connections again"
bin/l4lb enable --socket "$TMP/admin.sock" web backend-1

step "access control: a reload denies the client's address (deny = [\"198.18.0.2\"]); its connections are reset before any backend is chosen"
sed -i 's/^algorithm = "round_robin"$/algorithm = "round_robin"\ndeny = ["198.18.0.2"]/' "$TMP/l4lb.toml"
bin/l4lb reload --socket "$TMP/admin.sock"
{ inns $CLI bash -c 'exec 3<>/dev/tcp/'$VIP'/80 && printf "GET / HTTP/1.0\r\n\r\n" >&3 && cat <&3' 2>&1 || true; } | tail -n 1 | sed 's/^/  client: /'
bin/l4lb explain --socket "$TMP/admin.sock" web 198.18.0.2:40000 | sed -n "/^access/p;/^backend/p"
bin/l4lb status --socket "$TMP/admin.sock" | sed -n "/^VIP/p;/^  refused/p"
sed -i '/^deny = \["198.18.0.2"\]$/d' "$TMP/l4lb.toml"
bin/l4lb reload --socket "$TMP/admin.sock"
echo "deny removed: 3 more requests, replies per backend:"
requests 3 | per_backend

step "TLS routed by server name: a reload adds VIP tls ($VIP:443) with SNI routes; TLS ends at the backends, l4lb only peeks the ClientHello"
cat >> "$TMP/l4lb.toml" <<TOML

[[vip]]
name = "tls"
listen = "$VIP:443"
algorithm = "round_robin"
defer_accept = true             # TLS clients speak first
sni_no_match = "default"        # other names: the VIP's own backends
  [vip.health]
  type = "tcp"
  interval = "500ms"
  timeout = "300ms"
  [[vip.backend]]
  name = "backend-3"
  address = "198.18.1.13:8443"
  [[vip.route]]
  name = "api"
  names = ["api.demo.test"]
    [[vip.route.backend]]
    name = "backend-1"
    address = "198.18.1.11:8443"
TOML
sed -n '/^name = "tls"/,$p' "$TMP/l4lb.toml" | sed 's/^/  /'
bin/l4lb reload --socket "$TMP/admin.sock"
sleep 1.2 # the new backends' first health checks
for name in api.demo.test www.demo.test; do
  printf '  https://%s/ -> ' $name
  inns $CLI bin/testserver -get "https://$name/" -connect $VIP:443
done
bin/l4lb status --socket "$TMP/admin.sock" | sed -n '/^VIP tls/,/^$/p'

step "SIGTERM: l4lb drains and exits"
stop_lb $LBPID "$TMP/l4lb.log"

# ---------------------------------------------------------------------------
# Part 2: the XDP fast path.
step "part 2, XDP: one segment (a bridge) with the client, l4lb and three backends; the client routes $XVIP to l4lb"
for ns in $SW $XCLI $XLB "${XBACKENDS[@]}"; do ip netns add "$ns"; inns "$ns" ip link set lo up; done
inns $SW ip link add br0 type bridge && inns $SW ip link set br0 up
attach_host() { # attach_host NS LAST-BYTE: a veth0 in NS, its peer on the bridge, 198.18.10.LAST-BYTE
  ip link add veth0 netns "$1" type veth peer name p-$2 netns $SW
  inns $SW ip link set p-$2 master br0 && inns $SW ip link set p-$2 up
  inns "$1" ip addr add 198.18.10.$2/24 dev veth0 && inns "$1" ip link set veth0 up
}
attach_host $XLB 1
# ipip goes through the kernel's FIB (bpf_fib_lookup), which needs
# forwarding on; l4lb checks it but writes no sysctl.
inns $XLB sysctl -qw net.ipv4.ip_forward=1
attach_host $XCLI 2
inns $XCLI ip route add $XVIP/32 via 198.18.10.1
for i in 1 2 3; do
  ns=${XBACKENDS[$((i-1))]}
  attach_host "$ns" 1$i
  # A DSR backend: the VIP on lo, never answering ARP for it, replying to
  # the client directly; decap strips the balancer's IPIP header.
  inns "$ns" ip addr add $XVIP/32 dev lo
  inns "$ns" sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 \
    net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.veth0.rp_filter=0
  echo "  backend-$i: $(inns "$ns" bin/l4lb decap attach --iface veth0 --mode generic)"
  ip netns exec "$ns" bin/testserver -name backend-$i -http 0.0.0.0:80 > "$TMP/xbackend-$i.log" 2>&1 &
  PIDS+=($!)
done

cat > "$TMP/xdp.toml" <<TOML
[global]
admin_socket = "$TMP/xdp.sock"

[xdp]
interface = "veth0"
attach = "generic"   # these veth peers run no XDP program; on a real NIC, keep the default "driver"

[[vip]]
name = "web-xdp"
listen = "$XVIP:80"
mode = "xdp"         # balanced in the driver: Maglev, a flow table, IPIP to the backend
  [vip.health]
  type = "http"
  interval = "1s"
  [[vip.backend]]
  name = "backend-1"
  address = "198.18.10.11:80"
  [[vip.backend]]
  name = "backend-2"
  address = "198.18.10.12:80"
  [[vip.backend]]
  name = "backend-3"
  address = "198.18.10.13:80"
TOML
step "bin/l4lb run xdp.toml (in the balancer namespace)"
ip netns exec $XLB bin/l4lb run "$TMP/xdp.toml" > "$TMP/xdp.log" 2>&1 &
XPID=$!
PIDS+=($XPID)
wait_running "$TMP/xdp.log" $XPID
grep -E "xdp program attached|generic mode" "$TMP/xdp.log" | cut -c1-160 | sed 's/^/  l4lb| /'
sleep 1.2

step "client: 24 HTTP requests to $XVIP:80 (each a new connection: a new flow, hashed onto the Maglev table)"
inns $XCLI bash -c '
  for i in $(seq 24); do
    timeout 3 bash -c "exec 3<>/dev/tcp/'$XVIP'/80; printf \"GET / HTTP/1.0\r\nHost: demo\r\n\r\n\" >&3; tail -n 1 <&3" || echo "no reply"
  done' > "$TMP/xreplies"
echo "replies per backend:"
per_backend < "$TMP/xreplies"

step "bin/l4lb status: packets, bytes and flows counted in the driver; OUT stays 0 (replies go from the backends to the client directly)"
bin/l4lb status --socket "$TMP/xdp.sock"

step "SIGTERM: l4lb drains and detaches the program"
stop_lb $XPID "$TMP/xdp.log"
step "cleaning up namespaces $S-*"
