#!/usr/bin/env bash
# make demo-ecmp: scale out with BGP. A client behind a router (BIRD) that
# learns the VIP from two l4lb balancers over BGP and spreads flows over
# both (ECMP, a hash of the 5-tuple); three backends behind the balancers.
# Requests from many source ports land on both balancers and, because both
# build the same Maglev table, each flow reaches the same backend whichever
# balancer takes it. BFD runs beside each BGP session: a balancer that goes
# silent (its link cut on the router's side) is out of the router's table
# in about 300 ms, not after the 9 s hold time. Then one balancer is killed
# (kill -9): its BGP session dies with it, the router drops its path at
# once, and the requests go on through the other. Part 2 runs the VIP in
# xdp mode with flow sync: long-lived connections keep their backend
# through a balancer's death even after a backend was added under them.
# Everything is removed again at the end (also on Ctrl-C). Needs only Go,
# iproute2 and bird2.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "make demo-ecmp needs root (it creates network namespaces)"; exit 1; }
command -v ip >/dev/null || { echo "missing ip: apt-get install -y iproute2"; exit 1; }
for tool in bird birdc; do
  command -v $tool >/dev/null || { echo "missing $tool: the router of this demo is BIRD 2: apt-get install -y bird2"; exit 1; }
done

S="l4e$$"                        # unique per run: namespaces never collide
CLI=$S-cli RTR=$S-rtr
LBS=($S-lb1 $S-lb2)
BACKENDS=($S-b1 $S-b2 $S-b3)
VIP=198.18.2.10
TMP=$(mktemp -d /tmp/l4lb-demo-ecmp.XXXXXX)
PIDS=()

cleanup() {
  set +e
  for p in "${PIDS[@]}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do [ -n "$p" ] && wait "$p" 2>/dev/null; done
  for ns in $CLI $RTR "${LBS[@]}" "${BACKENDS[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

source scripts/lib/demo.sh # step, inns, wait_running

step "network: client -> router (BIRD, ECMP) -> two l4lb (VIP $VIP on each) -> three backends, in namespaces $S-*"
for ns in $CLI $RTR "${LBS[@]}" "${BACKENDS[@]}"; do ip netns add "$ns"; inns "$ns" ip link set lo up; done
ip link add c0 netns $CLI type veth peer name r0 netns $RTR
inns $CLI ip addr add 198.18.0.2/24 dev c0 && inns $CLI ip link set c0 up
inns $CLI ip route add default via 198.18.0.1
inns $RTR ip addr add 198.18.0.1/24 dev r0 && inns $RTR ip link set r0 up
inns $RTR ip link add br0 type bridge && inns $RTR ip addr add 198.18.3.1/24 dev br0 && inns $RTR ip link set br0 up
inns $RTR ip link add br1 type bridge && inns $RTR ip addr add 198.18.1.1/24 dev br1 && inns $RTR ip link set br1 up
# the router hashes addresses, protocol and ports to pick a path
inns $RTR sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=3 net.ipv4.fib_multipath_hash_fields=0x0037
for i in 1 2; do
  ns=${LBS[$((i-1))]}
  ip link add xl$i netns $RTR type veth peer name x0 netns "$ns"
  ip link add yl$i netns $RTR type veth peer name y0 netns "$ns"
  inns $RTR ip link set xl$i master br0 && inns $RTR ip link set xl$i up
  inns $RTR ip link set yl$i master br1 && inns $RTR ip link set yl$i up
  inns "$ns" ip addr add 198.18.3.1$i/24 dev x0 && inns "$ns" ip link set x0 up
  inns "$ns" ip addr add 198.18.1.$((1+i))/24 dev y0 && inns "$ns" ip link set y0 up
  inns "$ns" ip addr add $VIP/32 dev lo
  inns "$ns" ip route add default via 198.18.3.1
done
for i in 1 2 3; do
  ns=${BACKENDS[$((i-1))]}
  ip link add yb$i netns $RTR type veth peer name b0 netns "$ns"
  inns $RTR ip link set yb$i master br1 && inns $RTR ip link set yb$i up
  inns "$ns" ip addr add 198.18.1.2$i/24 dev b0 && inns "$ns" ip link set b0 up
  inns "$ns" ip route add default via 198.18.1.1
  # `ip netns exec` execs the program, so $! is the server's own PID
  ip netns exec "$ns" bin/testserver -name backend-$i -http 198.18.1.2$i:8080 > "$TMP/backend-$i.log" 2>&1 &
  PIDS+=($!)
done

step "router: BIRD 2 with one eBGP session per balancer, each with BFD (100 ms x 3); 'merge paths on' installs one route with both next hops"
cat > "$TMP/bird.conf" <<CONF
router id 198.18.3.1;
protocol device { scan time 1; }
protocol kernel { ipv4 { import none; export all; }; merge paths on; }
protocol bfd { interface "*" { interval 100 ms; multiplier 3; }; }
protocol bgp lb1 { local as 65000; neighbor 198.18.3.11 as 65001; passive on; hold time 9; bfd on; error wait time 1, 5; ipv4 { import all; export none; }; }
protocol bgp lb2 { local as 65000; neighbor 198.18.3.12 as 65001; passive on; hold time 9; bfd on; error wait time 1, 5; ipv4 { import all; export none; }; }
CONF
sed 's/^/  bird.conf| /' "$TMP/bird.conf"
ip netns exec $RTR bird -f -c "$TMP/bird.conf" -s "$TMP/bird.ctl" -P "$TMP/bird.pid" > "$TMP/bird.log" 2>&1 &
PIDS+=($!)
birdc() { command birdc -s "$TMP/bird.ctl" "$@"; }

step "two balancers, the same config but for router_id: Maglev on the client's address and port"
LBPIDS=()
for i in 1 2; do
  cat > "$TMP/l4lb-$i.toml" <<TOML
[global]
admin_socket = "$TMP/admin-$i.sock"
drain_timeout = "3s"

[bgp]
asn = 65001
router_id = "198.18.3.1$i"
shutdown_grace = "1s"
  [[bgp.peer]]
  address = "198.18.3.1"
  asn = 65000
  bfd = { interval = "100ms", multiplier = 3 }

[[vip]]
name = "web"
listen = "$VIP:80"
algorithm = "maglev"
hash_key = "src_ip_port"
  [vip.health]
  type = "http"
  path = "/"
  interval = "500ms"
  timeout = "300ms"
  [[vip.backend]]
  name = "backend-1"
  address = "198.18.1.21:8080"
  [[vip.backend]]
  name = "backend-2"
  address = "198.18.1.22:8080"
  [[vip.backend]]
  name = "backend-3"
  address = "198.18.1.23:8080"
TOML
  ip netns exec ${LBS[$((i-1))]} bin/l4lb run --config "$TMP/l4lb-$i.toml" > "$TMP/l4lb-$i.log" 2>&1 &
  LBPIDS+=($!); PIDS+=($!)
done
for i in 1 2; do
  wait_running "$TMP/l4lb-$i.log" "${LBPIDS[$((i-1))]}" "l4lb-$i"
done
sed -n '/^\[bgp\]/,/^\[\[vip\]\]/p' "$TMP/l4lb-1.toml" | sed '$d' | sed 's/^/  l4lb-1.toml| /'

route() { inns $RTR ip route show $VIP; }
for _ in $(seq 150); do [ "$(route | grep -c nexthop)" = 2 ] && break; sleep 0.1; done
[ "$(route | grep -c nexthop)" = 2 ] || { birdc show protocols; echo "the router did not learn the VIP from both balancers"; exit 1; }
step "router: ip route show $VIP (one route, two next hops: both balancers announce the VIP)"
route | sed 's/^/  /'
birdc show protocols | sed 's/^/  birdc| /'

requests() { # requests N: N HTTP/1.0 requests, each from a new source port
  inns $CLI bash -c '
    for i in $(seq '"$1"'); do
      exec 3<>/dev/tcp/'$VIP'/80
      printf "GET / HTTP/1.0\r\nHost: demo\r\n\r\n" >&3
      tail -n 1 <&3
      exec 3>&-
    done'
}
accepted() { bin/l4lb status --socket "$TMP/admin-$1.sock" | sed -n 's/^VIP web .*accepted \([0-9]*\).*/\1/p'; }

step "client: 40 HTTP requests, each from a new source port"
requests 40 | cut -d: -f1 | sort | uniq -c | sed 's/^/  /'
echo "  connections per balancer: l4lb-1 $(accepted 1), l4lb-2 $(accepted 2)"

for _ in $(seq 100); do [ "$(birdc show bfd sessions | grep -c ' Up ')" = 2 ] && break; sleep 0.1; done
step "bin/l4lb status of l4lb-1: the BGP session, its BFD session and what it announces"
bin/l4lb status --socket "$TMP/admin-1.sock" | sed -n '/^bgp:/,/^$/{/^$/!p}' | sed 's/^/  /'
step "router: birdc show bfd sessions"
birdc show bfd sessions | sed 's/^/  birdc| /'

step "the same flow through either balancer reaches the same backend: identical Maglev tables"
for port in 40001 40002 40003; do
  for i in 1 2; do
    # sed reads the whole answer: a reader that quits at its first match
    # would make explain fail with SIGPIPE (pipefail)
    b=$(bin/l4lb explain --socket "$TMP/admin-$i.sock" web 198.18.0.2:$port | sed -n 's/^backend: \(backend-[0-9]*\).*/\1/p')
    printf '  client port %s via l4lb-%s: %s\n' $port $i "${b:-not determined}"
  done
done

step "silent death of l4lb-2: its link cut on the router's side; its process and TCP session live on, unheard"
inns $RTR ip link set xl2 down
t0=$(date +%s%N)
for _ in $(seq 500); do [ "$(route | grep -c nexthop)" = 0 ] && break; sleep 0.005; done
echo "  path gone after $(( ($(date +%s%N) - t0) / 1000000 )) ms (BFD: 3 x 100 ms; BGP alone would wait for its 9 s hold time):"
route | sed 's/^/  /'
birdc show bfd sessions | grep 198.18.3.12 | sed 's/^/  birdc| /'
bin/l4lb status --socket "$TMP/admin-2.sock" | grep '    bfd' | sed 's/^/  l4lb-2| /'
inns $RTR ip link set xl2 up
t0=$(date +%s%N)
for _ in $(seq 600); do [ "$(route | grep -c nexthop)" = 2 ] && break; sleep 0.05; done
echo "  link back up: BFD, then BGP (BIRD's error wait 1 s, l4lb's connect_retry 1 s), then the path:"
echo "  $(route | grep -c nexthop) next hops again after $(( ($(date +%s%N) - t0) / 1000000 )) ms"

step "kill -9 l4lb-1: its BGP session dies with it, the router drops its path"
kill -9 "${LBPIDS[0]}"; wait "${LBPIDS[0]}" 2>/dev/null || true
t0=$(date +%s%N)
for _ in $(seq 100); do [ "$(route | grep -c nexthop)" = 0 ] && break; sleep 0.02; done
echo "  path gone after $(( ($(date +%s%N) - t0) / 1000000 )) ms:"
route | sed 's/^/  /'

step "client: 20 more requests, all through l4lb-2"
before=$(accepted 2)
requests 20 | cut -d: -f1 | sort | uniq -c | sed 's/^/  /'
echo "  l4lb-2 took $(( $(accepted 2) - before )) of them"

step "SIGTERM l4lb-2: it withdraws the VIP first (shutdown_grace 1s), then drains and exits"
kill -TERM "${LBPIDS[1]}"
for _ in $(seq 50); do route | grep -q . || break; sleep 0.05; done
echo "  route to $VIP after the withdraw: '$(route)' (l4lb-2 still running: $(kill -0 "${LBPIDS[1]}" 2>/dev/null && echo yes || echo no))"
wait "${LBPIDS[1]}" 2>/dev/null || true
grep -E "withdrawn|stopped" "$TMP/l4lb-2.log" | cut -c1-160 | sed 's/^/  l4lb-2| /'

# Part 2: xdp mode and flow sync.
step "part 2, xdp: the balancers forward in XDP (Maglev, a flow table, IPIP to the backends, which answer the client directly)"
for ns in "${LBS[@]}"; do inns "$ns" ip addr del $VIP/32 dev lo; done
inns $RTR sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.br1.rp_filter=0
for i in 1 2 3; do
  ns=${BACKENDS[$((i-1))]}
  # A DSR backend: the VIP on lo, never answering ARP for it; decap strips
  # the balancer's IPIP header; an echo server on the VIP's port.
  inns "$ns" ip addr add $VIP/32 dev lo
  inns "$ns" sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.b0.rp_filter=0
  echo "  backend-$i: $(inns "$ns" bin/l4lb decap attach --iface b0 --mode generic)"
  ip netns exec "$ns" bin/testserver -http "" -echo 0.0.0.0:80 > "$TMP/echo-$i.log" 2>&1 &
  PIDS+=($!)
done
for i in 1 2; do inns ${LBS[$((i-1))]} sysctl -qw net.ipv4.ip_forward=1; done
xdp_conf() { # xdp_conf I BACKENDS: balancer I's config over the first BACKENDS backends
  cat <<TOML
[global]
admin_socket = "$TMP/xadmin-$1.sock"
drain_timeout = "1s"

[xdp]
interface = "x0"
attach = "generic"   # veth peers without XDP programs; keep "driver" on a real NIC

[bgp]
asn = 65001
router_id = "198.18.3.1$1"
shutdown_grace = "1s"
  [[bgp.peer]]
  address = "198.18.3.1"
  asn = 65000
  bfd = { interval = "100ms", multiplier = 3 }

[flow_sync]
listen = "198.18.3.1$1:7946"
peers = ["198.18.3.1$((3-$1)):7946"]
key = "demo-ecmp flow sync key"
interval = "500ms"

[[vip]]
name = "web"
listen = "$VIP:80"
mode = "xdp"
algorithm = "maglev"
  [vip.health]
  type = "tcp"
  interval = "500ms"
  timeout = "300ms"
TOML
  for j in $(seq "$2"); do printf '  [[vip.backend]]\n  name = "backend-%s"\n  address = "198.18.1.2%s:80"\n' "$j" "$j"; done
}
XPIDS=()
for i in 1 2; do
  xdp_conf $i 2 > "$TMP/xdp-$i.toml"
  ip netns exec ${LBS[$((i-1))]} bin/l4lb run --config "$TMP/xdp-$i.toml" > "$TMP/xdp-$i.log" 2>&1 &
  XPIDS+=($!); PIDS+=($!)
done
for i in 1 2; do wait_running "$TMP/xdp-$i.log" "${XPIDS[$((i-1))]}" "l4lb-$i (xdp)"; done
sed -n '/^\[flow_sync\]/,/^$/p' "$TMP/xdp-1.toml" | sed '/^$/d; s/^/  xdp-1.toml| /'
for _ in $(seq 300); do [ "$(route | grep -c nexthop)" = 2 ] && break; sleep 0.05; done
echo "  $(route | grep -c nexthop) next hops for $VIP; backends: backend-1, backend-2"

step "client: 40 long-lived connections, each says hello and gets its echo"
cat > "$TMP/holder.sh" <<'HOLDER'
# holder.sh VIP DIR: 40 connections held open; each exchanges a line now and
# another once DIR/go exists; the second round's tally goes to DIR/result.
vip=$1 dir=$2 fds=() ok=0
for i in $(seq 40); do
  exec {fd}<>/dev/tcp/$vip/80 || exit 1
  fds+=($fd)
  printf 'hello %s\n' $i >&$fd
  read -r -t 3 line <&$fd && [ "$line" = "hello $i" ] && ok=$((ok+1))
done
echo $ok > "$dir/ready"
while [ ! -e "$dir/go" ]; do sleep 0.1; done
ok=0
for i in $(seq 40); do
  fd=${fds[$((i-1))]}
  printf 'still here %s\n' $i >&$fd 2>/dev/null
  read -r -t 3 line <&$fd 2>/dev/null && [ "$line" = "still here $i" ] && ok=$((ok+1))
done
echo $ok > "$dir/result"
HOLDER
inns $CLI bash "$TMP/holder.sh" $VIP "$TMP" &
HOLDER=$!; PIDS+=($HOLDER)
for _ in $(seq 200); do [ -e "$TMP/ready" ] && break; sleep 0.1; done
newflows() { bin/l4lb status --socket "$TMP/xadmin-$1.sock" --json | sed -n 's/.*"new_flows": *\([0-9]*\).*/\1/p' | head -1; }
echo "  $(cat "$TMP/ready" 2>/dev/null || echo 0) of 40 echoed; new flows pinned: l4lb-1 $(newflows 1), l4lb-2 $(newflows 2)"

step "reload both with backend-3 added: the Maglev tables change under the established flows"
for i in 1 2; do xdp_conf $i 3 > "$TMP/xdp-$i.toml"; kill -HUP "${XPIDS[$((i-1))]}"; done
sleep 2   # the reloads, and a few flow sync rounds
for i in 1 2; do
  echo "  l4lb-$i serves $(bin/l4lb status --socket "$TMP/xadmin-$i.sock" --json | grep -c '"name": "backend-') backends now"
  bin/l4lb status --socket "$TMP/xadmin-$i.sock" | awk '/^flow sync:/ {p=1; print; next} p && /^  / {print; next} {p=0}' | sed 's/^/  l4lb-'$i'| /'
done

step "kill -9 l4lb-1: its connections move to l4lb-2, which has them pinned from l4lb-1's flow sync datagrams"
before=$(newflows 2)
kill -9 "${XPIDS[0]}"; wait "${XPIDS[0]}" 2>/dev/null || true
for _ in $(seq 100); do [ "$(route | grep -c nexthop)" = 0 ] && break; sleep 0.02; done
touch "$TMP/go"
wait $HOLDER 2>/dev/null || true
echo "  $(cat "$TMP/result" 2>/dev/null || echo 0) of 40 connections answered byte for byte through l4lb-2; new flows it pinned after the failover: $(( $(newflows 2) - before ))"
echo "  (without [flow_sync], about a quarter of l4lb-1's connections would now hash to backend-3 and be reset: TestFlowSyncXDP)"
kill -TERM "${XPIDS[1]}"; wait "${XPIDS[1]}" 2>/dev/null || true

step "done: namespaces and files are removed"
