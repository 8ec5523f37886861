// Package config turns an l4lb TOML file into a validated, normalised,
// immutable Config.
//
// Decoding is strict: an unknown key is an error naming the key and its
// line. Validation reports every problem at once, each naming the file, the
// line and the VIP. Values come out typed (netip.AddrPort, time.Duration,
// checked enum strings) with defaults applied: first the built-in ones, then
// the file's [defaults] table, then the VIP's own keys. Nothing here does I/O
// after reading the file, and nothing imports the rest of l4lb: the
// reconciler maps a Config onto running state.
package config

import (
	"net/netip"
	"time"
)

// Config is a whole validated file.
type Config struct {
	Path   string
	Global Global
	VIPs   []VIP
	// XDP is set only when the file has an [xdp] table.
	XDP *XDP
}

// Global holds process-wide settings ([global]).
type Global struct {
	LogLevel  string // debug | info | warn | error; default info
	LogFormat string // console | json; default console
	// AdminSocket is the Unix socket of the admin/status API; default
	// /run/l4lb/admin.sock; "" after validation never happens (use "off" to disable: then "").
	AdminSocket string
	// MetricsListen is host:port for Prometheus metrics; "" = off (default).
	MetricsListen string
	// DrainTimeout bounds how long shutdown and removed VIPs wait for
	// connections to finish; default 30s.
	DrainTimeout time.Duration
	// PipeSize is the size in bytes of each splice pipe; default 1 MiB;
	// range 4096..16 MiB, rounded up to a power of two by the kernel.
	PipeSize int
}

// VIP is one virtual service ([[vip]]).
type VIP struct {
	Name     string
	Listen   netip.AddrPort
	Protocol string // tcp | udp
	Mode     string // proxy | xdp; default proxy

	// Balancing.
	Algorithm         string        // round_robin | least_conn | p2c | least_time | source_hash | maglev | random; default round_robin
	HashKey           string        // src_ip | src_ip_port | 5tuple; default src_ip (proxy), 5tuple (xdp)
	HashBalanceFactor int           // percent, 0 = off, else >= 100; default 0
	MaglevTableSize   int           // prime, default 65537
	LeastTimeDefault  time.Duration // RTT assumed before the first sample; default 1ms
	LeastTimeAlpha    float64       // EWMA weight of a new sample, (0,1]; default 0.3
	LeastTimeMetric   string        // connect | first_byte; default connect

	// TCP proxy behaviour.
	ConnectTimeout time.Duration // default 2s
	Retries        int           // extra backends tried after a failed connect; 0..15; default 2
	IdleTimeout    time.Duration // no bytes either way for this long closes the connection; default 1h
	KeepAlive      time.Duration // TCP keepalive idle time on both sides; default 60s; 0 = off
	MaxConns       int           // 0 = unlimited; at the limit the VIP stops accepting (clients wait in the listen backlog)
	ProxyProtocol  string        // off | v1 | v2; default off
	// AffinityTimeout > 0 keeps a client address on its last backend for this long.
	AffinityTimeout time.Duration

	// UDP.
	SessionTimeout time.Duration // default 30s
	MaxSessions    int           // default 65536
	UDPResponses   int           // close a session after this many replies; 0 = unlimited

	// XDP.
	Forward string // ipip | l2 (xdp mode only); default ipip

	Health   Health
	Backends []Backend

	// Line is where the VIP's [[vip]] header is in the file.
	Line int
}

// Health is a VIP's health check ([vip.health], defaults from [defaults.health]).
type Health struct {
	Type     string        // none | tcp | send_expect | postgres | mysql | redis | http; default tcp
	Interval time.Duration // default 2s
	Timeout  time.Duration // default 1s; must be <= interval
	Rise     int           // default 2
	Fall     int           // default 3
	Port     int           // 0 = the backend's own port
	// Passive marks: a connect failure seen by the proxy counts toward Fall.
	// MaxFails failures within FailTimeout mark the backend down (nginx
	// semantics); 0 disables passive marks. Defaults 1 and 10s.
	MaxFails    int
	FailTimeout time.Duration
	SlowStart   time.Duration // ramp the weight over this after recovery; 0 = off
	OnDown      string        // keep | reset; default keep

	// send_expect
	Send        []byte // from send (string) or send_hex
	Expect      []byte // prefix the reply must start with (expect / expect_hex)
	ExpectRegex string // alternatively, a regular expression the reply must match

	// http
	Path   string // default "/"
	Host   string // Host header; default the backend address
	Status int    // default 200
	// WebSocket sends an Upgrade: websocket request (expect Status 101).
	WebSocket bool

	// postgres / mysql / redis
	User     string
	Password string
	Database string
	Role     string // any | primary | replica; default any (postgres and mysql only)
}

// Backend is one backend of a VIP ([[vip.backend]]).
type Backend struct {
	// Name is optional; the backend's identity is Name or, when empty, Address.
	Name    string
	Address netip.AddrPort
	Weight  int // 0..1000, default 100; 0 = no new flows (drain)
	Line    int
}

// ID returns the backend's stable identity: its name or its address.
func (b Backend) ID() string {
	if b.Name != "" {
		return b.Name
	}
	return b.Address.String()
}

// XDP holds fast-path settings ([xdp]).
type XDP struct {
	Interface string
	Attach    string // driver | generic; default driver
	PinPath   string
}
