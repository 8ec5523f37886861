// Package xdpplane is the control half of l4lb's XDP data plane: it
// loads and attaches the XDP program (bpf), writes every xdp VIP's
// entry, backends and Maglev table into its maps, reads its counters and
// flow table back, and keeps the backends' next hops resolved.
//
// Program is the program shared by the VIPs of one control loop; Plane,
// one xdp VIP in its maps, implements l4/plane's contract; Guard is a
// proxy VIP's guard-only entry (allow/deny and the SYN rate enforced
// before the kernel spends a socket). Each reads its own options, which
// the control loop maps from the config: this package never sees the
// config, the health checks or the proxy (Katran's split between its BPF
// library and KatranLb). Pinned maps outlive the process: a restarted or
// upgraded l4lb adopts them, with the backend and VIP indexes they name
// (IndexPool), so established flows keep their backends.
package xdpplane
