// spec.go: what an operator configures for a check, its defaults and validation.

package health

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// Defaults applied to zero fields.
const (
	DefaultInterval    = 2 * time.Second
	DefaultTimeout     = 1 * time.Second
	DefaultRise        = 2
	DefaultFall        = 3
	DefaultFailTimeout = 10 * time.Second
)

// Spec is one target's check as the runtime maps it from the config. The
// zero value of every field means its default (the zero Type is tcp).
type Spec struct {
	Type     l4.CheckType
	Interval time.Duration
	Timeout  time.Duration // must not exceed Interval
	Rise     int
	Fall     int
	// Port, when not 0, is probed instead of the backend's own port.
	Port uint16
	// MaxFails passive failures within FailTimeout mark the target down at
	// once; 0 turns passive marks off.
	MaxFails    int
	FailTimeout time.Duration
	// Metric picks the RTT sample reported per check: connect (the zero
	// value) or first_byte (falls back to connect for checks without a
	// reply).
	Metric l4.RTTMetric

	// send_expect: Send is written; the reply must start with Expect or
	// match ExpectRegex (at most one of them; neither: the send suffices).
	Send        []byte
	Expect      []byte
	ExpectRegex string

	// http: GET Path with Host (default the probed address) must answer
	// Status (default 200). WebSocket sends an Upgrade request instead and
	// always expects 101 with a valid Sec-WebSocket-Accept.
	Path      string
	Host      string
	Status    int
	WebSocket bool

	// postgres, mysql, redis credentials. Postgres and mysql log in only
	// when User is set; then Role (the zero value is any) is checked.
	// Redis sends AUTH when Password is set (with User: AUTH user pass).
	User     string
	Password string
	Database string
	Role     l4.DBRole
	// MaxLag fails a check with Role replica whose server's replication
	// lag is above it, or unknown; 0 = off (the lag is still read).
	MaxLag time.Duration
	// ProxyHeader is the PROXY protocol header (v1 or v2) every check
	// connection starts with, before the check's own bytes (HAProxy's
	// check-send-proxy); 0 = none.
	ProxyHeader l4.ProxyVersion

	// PostgresSSLMode is pgx's sslmode for the login: prefer (default) or
	// disable. prefer against a server without TLS costs a second connect.
	PostgresSSLMode string

	// dns: the question asked (DNSName, a name; DNSType, a query type,
	// 0 = A). The reply must carry the query's ID and RCODE NOERROR.
	DNSName string
	DNSType uint16

	// tls: TLSServerName is the ClientHello's server name (SNI; "" =
	// none). TLSVerify checks the certificate chain against the system's
	// roots and the name; off, any certificate passes.
	TLSServerName string
	TLSVerify     bool

	// Agent, when its Port is not 0, runs HAProxy's agent check beside
	// the check above (agent.go).
	Agent AgentSpec

	// Route, when not zero, is the data plane's route to the backend
	// (set by the runtime, not the config): every check connection goes
	// to Route.Addr with the probed port, from Route.Source, with socket
	// mark Route.Mark, and reaches the backend as the VIP's clients do.
	Route l4.ProbeRoute
}

// withDefaults returns s with zero fields set to their defaults.
func (s Spec) withDefaults() Spec {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&s.Interval, DefaultInterval)
	def(&s.Timeout, DefaultTimeout)
	def(&s.FailTimeout, DefaultFailTimeout)
	if s.Rise <= 0 {
		s.Rise = DefaultRise
	}
	if s.Fall <= 0 {
		s.Fall = DefaultFall
	}
	if s.Path == "" {
		s.Path = "/"
	}
	if s.PostgresSSLMode == "" {
		s.PostgresSSLMode = "prefer"
	}
	s.Agent = s.Agent.withDefaults(s)
	return s
}

// Validate reports every problem of s (after defaults) at once.
func (s Spec) Validate() error {
	s = s.withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if int(s.Type) >= len(l4.CheckTypeNames()) {
		bad("unknown check type %s", s.Type)
	}
	if s.Interval < 0 || s.Timeout < 0 || s.FailTimeout < 0 {
		bad("negative interval, timeout or fail_timeout")
	}
	if s.Timeout > s.Interval {
		bad("timeout %v exceeds interval %v", s.Timeout, s.Interval)
	}
	if s.MaxFails < 0 {
		bad("negative max_fails")
	}
	if int(s.Metric) >= len(l4.RTTMetricNames()) {
		bad("unknown metric %s (want connect or first_byte)", s.Metric)
	}
	if int(s.Role) >= len(l4.DBRoleNames()) {
		bad("unknown role %s (want any, primary or replica)", s.Role)
	}
	if s.Role != l4.RoleAny && s.User == "" && (s.Type == l4.CheckPostgres || s.Type == l4.CheckMySQL) {
		bad("role %s needs a user to log in with", s.Role)
	}
	if s.MaxLag < 0 {
		bad("negative max_lag")
	}
	if s.MaxLag > 0 && (s.Role != l4.RoleReplica || (s.Type != l4.CheckPostgres && s.Type != l4.CheckMySQL)) {
		bad("max_lag needs a postgres or mysql check with role replica")
	}
	if len(s.Expect) > 0 && s.ExpectRegex != "" {
		bad("expect and expect_regex are exclusive")
	}
	if _, err := regexp.Compile(s.ExpectRegex); err != nil {
		bad("expect_regex: %w", err)
	}
	if !strings.HasPrefix(s.Path, "/") || strings.ContainsAny(s.Path, " \r\n") {
		bad("http path %q must start with / and hold no spaces or line breaks", s.Path)
	}
	if strings.ContainsAny(s.Host, " \r\n") {
		bad("http host %q holds spaces or line breaks", s.Host)
	}
	if s.ProxyHeader > l4.ProxyV2 {
		bad("PROXY header version %d (want 0, 1 or 2)", s.ProxyHeader)
	}
	if s.Type == l4.CheckDNS && s.DNSName == "" {
		bad("a dns check needs a name to ask for")
	}
	if s.Type == l4.CheckUDP && len(s.Send) == 0 {
		bad("a udp check needs a datagram to send")
	}
	if s.TLSVerify && s.Type == l4.CheckTLS && s.TLSServerName == "" {
		bad("tls_verify needs a server name to verify the certificate against")
	}
	if err := s.Agent.validate(); err != nil {
		bad("agent: %w", err)
	}
	if s.PostgresSSLMode != "prefer" && s.PostgresSSLMode != "disable" {
		bad("postgres sslmode %q (want prefer or disable)", s.PostgresSSLMode)
	}
	return errors.Join(errs...)
}

// Equal reports whether two specs configure the same check.
func (s Spec) Equal(o Spec) bool {
	if !bytes.Equal(s.Send, o.Send) || !bytes.Equal(s.Expect, o.Expect) || !bytes.Equal(s.Agent.Send, o.Agent.Send) {
		return false
	}
	s.Send, s.Expect, o.Send, o.Expect, s.Agent.Send, o.Agent.Send = nil, nil, nil, nil, nil, nil
	return reflect.DeepEqual(s, o) // every other field is comparable
}

// ProbeAddr is the address a check of backend addr connects to: the
// backend's own, or its IP with s.Port.
func (s Spec) ProbeAddr(addr netip.AddrPort) netip.AddrPort {
	if s.Port == 0 {
		return addr
	}
	return netip.AddrPortFrom(addr.Addr(), s.Port)
}
