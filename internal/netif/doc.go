// Package netif is what the XDP control plane asks of the kernel over
// netlink: interfaces (index, MTU, MAC, addresses, state), the route and
// source address toward a backend, path MTUs, keeping backend next-hop
// neighbours resolved, each backend's resolved next hop (NextHops, for the
// XDP program's nexthops map), notice of route, neighbour and link changes
// (Watch), and the forwarding sysctls.
//
// # Namespaces
//
// Everything that goes through netlink is a method of a Handle, and a
// Handle is bound to one network namespace for its whole life: Open binds
// it to the namespace of the calling thread at the time of the call,
// OpenPath to a namespace file (/run/netns/NAME, /proc/PID/ns/net). After
// that its methods may be called from any goroutine, locked or not.
// The sysctl functions (ReadForwarding, InterfaceForwarding,
// CheckForwarding) have no handle: /proc/sys/net follows the network
// namespace of the thread that opens it, so they act on the calling
// thread's namespace. A daemon whose threads all share one namespace may
// call them from anywhere; a test calls them on a locked OS thread inside
// its own namespace.
//
// # Neighbours
//
// bpf_fib_lookup never sends ARP or neighbour solicitations: without a
// valid entry for the next hop it answers NO_NEIGH. Neighbors keeps one
// managed entry (NTF_EXT_MANAGED, Linux >= 5.16) per backend next hop, and
// the kernel resolves, re-confirms and re-resolves those by itself, with no
// traffic or timer of ours. On Linux 6.18 this was measured: a managed
// entry resolves in ~10 ms; it goes REACHABLE -> STALE -> DELAY ->
// REACHABLE every reachable time without any traffic; it follows a
// backend's MAC change (7 s with a 3 s reachable time, 36 s with the
// defaults); a FAILED one is probed again every few seconds and came back
// 50 ms after its host answered again. A plain entry, by contrast, went
// FAILED after the backend's MAC changed and stayed FAILED with no traffic
// to revive it (XDP-forwarded packets do not count). Poking (a UDP datagram
// or NTF_USE per next hop on a timer) needs that timer and leaves STALE
// entries, which bpf_fib_lookup still uses, pointing at an old MAC between
// pokes; NUD_PERMANENT copies never notice a MAC change at all.
//
// # Hazards
//
//   - Managed entries are flushed with every other dynamic entry when the
//     interface goes down or loses its carrier. Call Neighbors.Refresh (or
//     Ensure) periodically or on link events: it puts back what is missing
//     and leaves what is there alone. An administrative down also removes
//     the link's IPv6 addresses (unless keep_addr_on_down is set), and with
//     them the routes to IPv6 backends: Refresh reports those until the
//     addresses are back.
//   - Replacing a NUD_PERMANENT entry with a managed one silently throws away
//     its static MAC (measured). Neighbors therefore never touches, takes
//     over or deletes an entry that is PERMANENT or NOARP, nor a managed one
//     that it did not create.
//   - IPv6 neighbour solicitations that no packet triggered are sent from
//     the interface's link-local address; while that is tentative (duplicate
//     address detection, ~1-2 s after the link comes up) the kernel sends
//     nothing and IPv6 next hops stay INCOMPLETE. Tests disable DAD.
//   - Forwarding is the administrator's to switch on: netif only reads it
//     (CheckForwarding names the sysctl to set), because switching it
//     changes more than one value. net.ipv4.ip_forward=1 also sets every
//     interface's forwarding, disables LRO on every device and turns
//     accept_redirects off; net.ipv6.conf.all.forwarding=1 makes
//     interfaces with accept_ra=1 ignore router advertisements, so a host
//     that takes its IPv6 default route from them loses it when it expires
//     (set accept_ra=2 there first).
//   - Ownership of neighbour entries lives in memory: a process that dies
//     without Close leaves its managed entries behind; they keep probing
//     their next hops until deleted (ip neigh del) or the link goes down.
//
// # Non-goals
//
// netif does not attach programs, log, or read the config: it answers
// questions and keeps neighbours, and the caller decides what to do with
// the answers. The one link it creates, with its routes and policy rules,
// is the probe device (CreateProbeDevice), which nothing but marked
// health probes is routed into.
package netif
