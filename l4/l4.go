package l4

import (
	"fmt"
	"net/netip"
	"time"
)

// Protocol is an IP protocol number; the values match IANA's so that they can
// be written into BPF maps unchanged.
type Protocol uint8

// Protocols l4lb balances.
const (
	TCP Protocol = 6
	UDP Protocol = 17
)

func (p Protocol) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	}
	return fmt.Sprintf("proto(%d)", uint8(p))
}

// ParseProtocol accepts "tcp" and "udp".
func ParseProtocol(s string) (Protocol, error) {
	switch s {
	case "tcp":
		return TCP, nil
	case "udp":
		return UDP, nil
	}
	return 0, fmt.Errorf("unknown protocol %q (want tcp or udp)", s)
}

// VIPKey identifies a virtual service by what the kernel sees: the listen
// address and the protocol. Two VIPs never share a key.
type VIPKey struct {
	Addr  netip.AddrPort
	Proto Protocol
}

func (k VIPKey) String() string { return k.Proto.String() + "/" + k.Addr.String() }

// BackendID is a backend's stable identity within its VIP: the configured
// name, or the address when no name is given. Hash tables and live counts
// are keyed by it, never by a slice index, so they survive reloads.
type BackendID string

// Flow is a connection or datagram session as the balancer sees it.
// Src is the client, Dst the VIP address it reached.
type Flow struct {
	Src, Dst netip.AddrPort
	Proto    Protocol
}

// Health is a backend's eligibility as decided by health checks.
type Health uint8

// Health states. Unknown is the state before the first check completes;
// l4lb treats it as eligible so that a fresh start serves at once.
const (
	HealthUnknown Health = iota
	HealthUp
	HealthDown
)

func (h Health) String() string {
	switch h {
	case HealthUp:
		return "up"
	case HealthDown:
		return "down"
	}
	return "unknown"
}

// BinaryUnits splits a byte count into a value and its binary unit (B,
// KiB, MiB, ... EiB), the unit the largest that leaves the value at least
// 1: what every size l4lb prints is written from.
func BinaryUnits(n uint64) (float64, string) {
	const unit = 1024
	if n < unit {
		return float64(n), "B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return float64(n) / float64(div), string("KMGTPE"[exp]) + "iB"
}

// LagString is a replica's replication lag as l4lb prints it, to the
// tenth of a second: "7.2s", "300ms", "1m30s".
func LagString(d time.Duration) string {
	return d.Round(100 * time.Millisecond).String()
}
