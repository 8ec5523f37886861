// Package bgp announces l4lb's VIPs to routers over BGP, so that several
// l4lb hosts behind one router share the traffic by ECMP.
//
// It embeds GoBGP (github.com/osrg/gobgp/v3, its server package) and is
// the only package of l4lb that imports GoBGP or gRPC: the rest of the
// daemon sees a Speaker with Start, SetAnnounced, PeerStates, WithdrawAll
// and Stop. The speaker runs inside the l4lb process on purpose: when
// l4lb dies, its BGP sessions die with it (the kernel closes the TCP
// connections at once) and the router withdraws the VIPs, where a separate
// gobgpd would keep announcing a dead balancer.
//
// GoBGP runs with no listening socket (l4lb only dials its peers) and no
// gRPC server. Each announced address is a host route (/32 or /128) whose
// next hop is the session's local address unless one is configured.
//
// Non-goals: receiving routes (everything a peer sends is ignored), BFD
// (GoBGP has none; internal/bfd runs it beside the speaker, and
// internal/announce resets a peer's session here when its BFD fails).
package bgp
