// Package plane is the contract between l4lb's control loop and its data
// planes, and the wire format of what they report: status and explain.
//
// A data plane moves one VIP's traffic: the TCP and UDP proxy services
// (l4/proxy) and the XDP program's maps (l4/xdpplane) implement Plane; the
// control loop (l4/reconcile) drives every VIP through it and never names
// a plane's concrete type. What only some planes can do is a small
// optional interface checked at run time, as io.Copy checks for
// io.WriterTo. The status and explain types here are what `l4lb status
// --json`, `l4lb explain --json` and the admin API answer: their JSON is a
// public format and does not change with the code behind it.
//
// It imports only l4 and l4/snapshot: a plane's settings are its own
// package's, mapped from the config by the control loop, and nothing here
// knows the config, sockets or maps.
package plane
