# Shared by scripts/bench.sh and scripts/soak.sh (sourced, not run): the
# links of the standard test network, inside namespaces that exist already.
#
#   client $CLI 198.18.0.2/24 --veth-- $LB 198.18.0.1/24, VIP $VIP on lo
#   $LB br0 198.18.1.1/24 --veth-- backend i (${BACKEND_NS[i]}) ${BACKEND_IPS[i]}/24
#
# Needs CLI, LB, VIP, BACKEND_NS, BACKEND_IPS and inns. Every veth is made
# directly inside the namespaces, never in the root namespace.
topo_links() {
  local i ns
  ip link add c0 netns $CLI type veth peer name x0 netns $LB
  inns $CLI ip addr add 198.18.0.2/24 dev c0
  inns $CLI ip link set c0 up
  inns $CLI ip route add default via 198.18.0.1
  inns $LB ip addr add 198.18.0.1/24 dev x0
  inns $LB ip link set x0 up
  inns $LB ip addr add $VIP/32 dev lo
  inns $LB ip link add br0 type bridge
  inns $LB ip addr add 198.18.1.1/24 dev br0
  inns $LB ip link set br0 up
  for i in "${!BACKEND_NS[@]}"; do
    ns=${BACKEND_NS[$i]}
    ip link add xb$((i + 1)) netns $LB type veth peer name b0 netns "$ns"
    inns $LB ip link set xb$((i + 1)) master br0
    inns $LB ip link set xb$((i + 1)) up
    inns "$ns" ip addr add "${BACKEND_IPS[$i]}/24" dev b0
    inns "$ns" ip link set b0 up
    inns "$ns" ip route add default via 198.18.1.1
  done
}
