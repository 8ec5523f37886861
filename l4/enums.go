// The names an operator writes in the config file, as typed values: each
// is named and parsed here and nowhere else.

package l4

import (
	"fmt"
	"strings"
)

// enumName returns names[v], or kind(v) for a value without a name.
func enumName[T ~uint8](v T, kind string, names []string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, uint8(v))
}

// ParseName finds s in names, the list of an enum's names (such as
// ModeNames()), and returns the value it names.
func ParseName[T ~uint8](s string, names []string) (T, bool) {
	for i, n := range names {
		if n == s {
			return T(i), true
		}
	}
	return 0, false
}

// parseEnum finds s in names; the error lists what is allowed.
func parseEnum[T ~uint8](s, kind string, names []string) (T, error) {
	if v, ok := ParseName[T](s, names); ok {
		return v, nil
	}
	return 0, fmt.Errorf("%q is not a %s (want %s)", s, kind, strings.Join(names, ", "))
}

// Mode is a VIP's data plane.
type Mode uint8

// Modes.
const (
	ModeProxy Mode = iota // the user-space TCP/UDP proxy
	ModeXDP               // the XDP fast path: packets steered in the driver, backends reply directly
)

var modeNames = [...]string{ModeProxy: "proxy", ModeXDP: "xdp"}

func (m Mode) String() string { return enumName(m, "mode", modeNames[:]) }

// ParseMode accepts proxy and xdp.
func ParseMode(s string) (Mode, error) { return parseEnum[Mode](s, "mode", modeNames[:]) }

// ModeNames lists the modes as the config names them.
func ModeNames() []string { return modeNames[:] }

// Algorithm names a balancing rule.
type Algorithm uint8

// Algorithms.
const (
	RoundRobin Algorithm = iota
	LeastConn
	P2C
	LeastTime
	SourceHash
	Maglev
	Random
)

var algorithmNames = [...]string{
	RoundRobin: "round_robin",
	LeastConn:  "least_conn",
	P2C:        "p2c",
	LeastTime:  "least_time",
	SourceHash: "source_hash",
	Maglev:     "maglev",
	Random:     "random",
}

func (a Algorithm) String() string { return enumName(a, "algorithm", algorithmNames[:]) }

// ParseAlgorithm maps a config name to an Algorithm.
func ParseAlgorithm(s string) (Algorithm, error) {
	return parseEnum[Algorithm](s, "algorithm", algorithmNames[:])
}

// AlgorithmNames lists the algorithms as the config names them.
func AlgorithmNames() []string { return algorithmNames[:] }

// Hashing reports whether the algorithm hashes flows onto backends (and so
// takes a HashKey).
func (a Algorithm) Hashing() bool { return a == SourceHash || a == Maglev }

// HashKey says which parts of a flow the hashing algorithms hash.
type HashKey uint8

// Hash keys.
const (
	HashSrcIP     HashKey = iota // client address only: a reconnecting client keeps its backend
	HashSrcIPPort                // client address and port
	HashFiveTuple                // protocol, both addresses, both ports
)

var hashKeyNames = [...]string{HashSrcIP: "src_ip", HashSrcIPPort: "src_ip_port", HashFiveTuple: "5tuple"}

func (k HashKey) String() string { return enumName(k, "hash_key", hashKeyNames[:]) }

// ParseHashKey maps a config name to a HashKey.
func ParseHashKey(s string) (HashKey, error) {
	return parseEnum[HashKey](s, "hash_key", hashKeyNames[:])
}

// HashKeyNames lists the hash keys as the config names them.
func HashKeyNames() []string { return hashKeyNames[:] }

// Forward is how an xdp VIP hands a packet to its backend.
type Forward uint8

// Forwarding methods.
const (
	ForwardIPIP Forward = iota // IPIP (or IPv6-in-IPv6) to the backend, routed: the Katran model
	ForwardL2                  // rewrite the destination MAC: backends on the same segment, the LVS DR model
	ForwardGUE                 // IP in UDP (GUE variant 1) to [xdp] gue_port, a per-flow source port: Katran's GUE
	ForwardNAT                 // rewrite destination and source (a NAT address and port): backends need nothing, the IPVS NAT / LoxiLB fullnat model
)

var forwardNames = [...]string{ForwardIPIP: "ipip", ForwardL2: "l2", ForwardGUE: "gue", ForwardNAT: "nat"}

// Encapsulates says whether f wraps the packet in an outer header routed
// to the backend (ipip, gue): the backends decapsulate, and the path to
// them carries the outer header's bytes too.
func (f Forward) Encapsulates() bool { return f == ForwardIPIP || f == ForwardGUE }

func (f Forward) String() string { return enumName(f, "forward", forwardNames[:]) }

// ParseForward accepts ipip, l2, gue and nat.
func ParseForward(s string) (Forward, error) {
	return parseEnum[Forward](s, "forward", forwardNames[:])
}

// ForwardNames lists the forwarding methods as the config names them.
func ForwardNames() []string { return forwardNames[:] }

// CheckType is a health check's kind. The zero value is tcp.
type CheckType uint8

// Check types.
const (
	CheckTCP        CheckType = iota // the handshake, timed by the kernel
	CheckNone                        // no active checks: passive marks only
	CheckSendExpect                  // send bytes, expect a reply
	CheckPostgres
	CheckMySQL
	CheckRedis
	CheckHTTP // also WebSocket upgrades
	CheckUDP  // send a datagram, expect a reply datagram
	CheckDNS  // a DNS query over UDP, a NOERROR reply expected
	CheckTLS  // a TLS handshake: ClientHello sent, ServerHello expected
)

var checkNames = [...]string{
	CheckTCP:        "tcp",
	CheckNone:       "none",
	CheckSendExpect: "send_expect",
	CheckPostgres:   "postgres",
	CheckMySQL:      "mysql",
	CheckRedis:      "redis",
	CheckHTTP:       "http",
	CheckUDP:        "udp",
	CheckDNS:        "dns",
	CheckTLS:        "tls",
}

func (c CheckType) String() string { return enumName(c, "check", checkNames[:]) }

// ParseCheckType maps a config name to a CheckType.
func ParseCheckType(s string) (CheckType, error) {
	return parseEnum[CheckType](s, "health check type", checkNames[:])
}

// CheckTypeNames lists the check types as the config names them.
func CheckTypeNames() []string { return checkNames[:] }

// Database reports whether the check speaks a database protocol over TCP.
func (c CheckType) Database() bool { return c == CheckPostgres || c == CheckMySQL || c == CheckRedis }

// Datagram reports whether the check speaks UDP (no TCP connection).
func (c CheckType) Datagram() bool { return c == CheckUDP || c == CheckDNS }

// EndReason says why a proxied connection or UDP session ended: the end
// field of the per-connection log (log_connections). The zero value is
// "none": not ended.
type EndReason uint8

// End reasons.
const (
	EndNone             EndReason = iota
	EndClientFIN                  // the client closed first (FIN), then the backend: a normal end
	EndBackendFIN                 // the backend closed first (FIN), then the client: a normal end
	EndClientReset                // the client's side failed: a reset, or another socket error (keepalive timeout)
	EndBackendReset               // the backend's side failed: a reset, or another socket error
	EndIdleTimeout                // TCP: no byte either way for idle_timeout; UDP: no datagram for session_timeout
	EndConnectFailed              // no backend answered: every connect (1 + retries) was refused or failed
	EndConnectTimeout             // as connect_failed, and the last connect timed out (connect_timeout)
	EndNoBackend                  // no eligible backend to try: the client was reset
	EndLocalError                 // l4lb ran out of descriptors, memory or ports: the client was reset
	EndDrain                      // reset when drain_timeout expired (a reload removed the VIP, or shutdown); or, app_protocol, closed at a boundary during the drain
	EndOnDown                     // reset (or closed, on_down = "graceful") because its backend went down
	EndDisabled                   // reset because an operator disabled its backend
	EndRebalance                  // closed by a rebalance
	EndMoved                      // UDP: its backend stopped taking flows; the next datagram starts a new session
	EndResponses                  // UDP: udp_responses replies were relayed
	EndEvicted                    // UDP: pushed out of a full session table
	EndVIPClosed                  // UDP: the VIP closed (a reload removed it, or shutdown)
	EndProxyUntrusted             // reset: a PROXY header was due (accept_proxy_protocol) and the source is not trusted
	EndProxyMalformed             // reset: the PROXY header was malformed, too long, or cut short by the client
	EndProxyTimeout               // reset: the PROXY header was not complete within connect_timeout
	EndDenied                     // refused by the VIP's allow/deny lists: TCP reset, UDP datagram dropped
	EndClientLimit                // refused by a per-client limit (max_conns_per_client, conn_rate_per_client)
	EndFirstByte                  // closed (FIN): the client sent nothing within first_byte_timeout; no backend was dialed
	EndQueueTimeout               // reset: every backend stayed at its max_conns for queue_timeout; no backend was dialed
	EndSNITimeout                 // reset: no complete TLS ClientHello within sni_timeout (a VIP with SNI routes); no backend was dialed
	EndSNINoMatch                 // reset: the ClientHello matched no SNI route (not TLS, no server name, or an unlisted one), or (postgres VIPs) the startup packet no route, and sni_no_match = "close"
	EndStartupMalformed           // reset: a postgres VIP with routes got a first packet PostgreSQL would refuse (malformed, over 10000 bytes, not protocol 3); no backend was dialed
	EndPrimaryBack                // reset (or closed, on_backup_recovered = "graceful"): its backend is a backup and new flows went back to the primaries
)

var endNames = [...]string{
	EndNone:             "none",
	EndClientFIN:        "client_fin",
	EndBackendFIN:       "backend_fin",
	EndClientReset:      "client_reset",
	EndBackendReset:     "backend_reset",
	EndIdleTimeout:      "idle_timeout",
	EndConnectFailed:    "connect_failed",
	EndConnectTimeout:   "connect_timeout",
	EndNoBackend:        "no_backend",
	EndLocalError:       "local_error",
	EndDrain:            "drain",
	EndOnDown:           "on_down",
	EndDisabled:         "disabled",
	EndRebalance:        "rebalance",
	EndMoved:            "moved",
	EndResponses:        "responses",
	EndEvicted:          "evicted",
	EndVIPClosed:        "vip_closed",
	EndProxyUntrusted:   "proxy_untrusted",
	EndProxyMalformed:   "proxy_malformed",
	EndProxyTimeout:     "proxy_timeout",
	EndDenied:           "denied",
	EndClientLimit:      "client_limit",
	EndFirstByte:        "first_byte_timeout",
	EndQueueTimeout:     "queue_timeout",
	EndSNITimeout:       "sni_timeout",
	EndSNINoMatch:       "sni_no_match",
	EndStartupMalformed: "startup_malformed",
	EndPrimaryBack:      "primary_back",
}

func (r EndReason) String() string { return enumName(r, "end", endNames[:]) }

// ParseEndReason maps a logged end name back to an EndReason.
func ParseEndReason(s string) (EndReason, error) {
	return parseEnum[EndReason](s, "connection end reason", endNames[:])
}

// EndReasonNames lists the end reasons as the log names them.
func EndReasonNames() []string { return endNames[:] }

// Override is an operator's run-time state for a backend, set through the
// admin API (`l4lb drain|disable|enable`) rather than the config file.
type Override uint8

// Overrides.
const (
	OverrideNone    Override = iota // the file and health decide
	OverrideDrain                   // no new flows; established flows, UDP sessions and affinity pins continue
	OverrideDisable                 // no new flows, and established ones are reset
)

var overrideNames = [...]string{OverrideNone: "none", OverrideDrain: "drain", OverrideDisable: "disable"}

func (o Override) String() string { return enumName(o, "override", overrideNames[:]) }

// ParseOverride accepts none, drain and disable.
func ParseOverride(s string) (Override, error) {
	return parseEnum[Override](s, "backend override", overrideNames[:])
}

// ProxyVersion is the PROXY protocol header l4lb sends a backend before
// the client's bytes (proxy_protocol, and health send_proxy). Its value
// is the version number; 0 sends none.
type ProxyVersion uint8

// PROXY header versions sent.
const (
	ProxyOff ProxyVersion = iota // no header
	ProxyV1                      // the text header
	ProxyV2                      // the binary header
)

var proxyVersionNames = [...]string{ProxyOff: "off", ProxyV1: "v1", ProxyV2: "v2"}

func (v ProxyVersion) String() string { return enumName(v, "proxy", proxyVersionNames[:]) }

// ProxyVersionNames lists the versions as the config names them.
func ProxyVersionNames() []string { return proxyVersionNames[:] }

// ProxyAccept is which PROXY protocol headers a VIP requires its clients
// to send first (accept_proxy_protocol). V1 and V2 are bits and Any is
// both: a header of version n is accepted when bit n-1 is set.
type ProxyAccept uint8

// Accepted PROXY header versions.
const (
	AcceptProxyOff ProxyAccept = iota // clients send no header
	AcceptProxyV1                     // the text header
	AcceptProxyV2                     // the binary header
	AcceptProxyAny                    // either
)

var proxyAcceptNames = [...]string{AcceptProxyOff: "off", AcceptProxyV1: "v1", AcceptProxyV2: "v2", AcceptProxyAny: "any"}

func (a ProxyAccept) String() string { return enumName(a, "accept", proxyAcceptNames[:]) }

// ProxyAcceptNames lists the accepted versions as the config names them.
func ProxyAcceptNames() []string { return proxyAcceptNames[:] }

// RTTMetric is the time that makes a backend's RTT sample for least_time
// (least_time_metric).
type RTTMetric uint8

// RTT metrics.
const (
	MetricConnect   RTTMetric = iota // the TCP handshake
	MetricFirstByte                  // until the reply's first byte (checks that read a reply)
)

var rttMetricNames = [...]string{MetricConnect: "connect", MetricFirstByte: "first_byte"}

func (m RTTMetric) String() string { return enumName(m, "metric", rttMetricNames[:]) }

// RTTMetricNames lists the metrics as the config names them.
func RTTMetricNames() []string { return rttMetricNames[:] }

// SNINoMatch is where a VIP with SNI routes sends a connection that no
// route takes (sni_no_match).
type SNINoMatch uint8

// Where unrouted connections go.
const (
	SNINoMatchDefault SNINoMatch = iota // the VIP's own backends
	SNINoMatchClose                     // reset, no backend dialed
)

var sniNoMatchNames = [...]string{SNINoMatchDefault: "default", SNINoMatchClose: "close"}

func (s SNINoMatch) String() string { return enumName(s, "sni_no_match", sniNoMatchNames[:]) }

// SNINoMatchNames lists the choices as the config names them.
func SNINoMatchNames() []string { return sniNoMatchNames[:] }

// AppProtocol is the application protocol a TCP VIP declares it carries
// (app_protocol): what l4lb may read of its framing as bytes pass, never
// terminating or parsing queries.
type AppProtocol uint8

// Application protocols.
const (
	AppNone      AppProtocol = iota // opaque bytes
	AppPostgres                     // the PostgreSQL frontend/backend protocol
	AppMySQL                        // the MySQL/MariaDB client/server protocol
	AppWebSocket                    // HTTP/1.1 upgraded to WebSocket (RFC 6455)
)

var appProtocolNames = [...]string{AppNone: "none", AppPostgres: "postgres", AppMySQL: "mysql", AppWebSocket: "websocket"}

func (a AppProtocol) String() string { return enumName(a, "app_protocol", appProtocolNames[:]) }

// AppProtocolNames lists the application protocols as the config names them.
func AppProtocolNames() []string { return appProtocolNames[:] }

// BackupMode is which backup backends serve while no primary is eligible
// (backup_mode).
type BackupMode uint8

// Backup modes.
const (
	BackupFirst BackupMode = iota // the first eligible one in file order (HAProxy's default)
	BackupAll                     // every eligible one (HAProxy option allbackups, nginx)
	// BackupSticky: one backend serves at a time, primaries and backups
	// alike, and new flows stay on it until it is no longer eligible; then
	// the next eligible one in the running order takes over, and a backend
	// that comes back joins the end of that order (non-preemptive
	// failover, for a database primary).
	BackupSticky
)

var backupModeNames = [...]string{BackupFirst: "first", BackupAll: "all", BackupSticky: "sticky"}

func (m BackupMode) String() string { return enumName(m, "backup_mode", backupModeNames[:]) }

// BackupModeNames lists the backup modes as the config names them.
func BackupModeNames() []string { return backupModeNames[:] }

// OnDown is what happens to a backend's established connections when its
// health check marks it down (on_down).
type OnDown uint8

// On-down actions.
const (
	OnDownKeep     OnDown = iota // they continue
	OnDownReset                  // they are reset
	OnDownGraceful               // they are closed (FIN), at a boundary of the VIP's app_protocol
)

var onDownNames = [...]string{OnDownKeep: "keep", OnDownReset: "reset", OnDownGraceful: "graceful"}

func (o OnDown) String() string { return enumName(o, "on_down", onDownNames[:]) }

// OnDownNames lists the actions as the config names them.
func OnDownNames() []string { return onDownNames[:] }

// OnBackupRecovered is what happens to the established connections of
// backup backends when new flows go back to the primaries
// (on_backup_recovered; HAProxy's on-marked-up shutdown-backup-sessions).
type OnBackupRecovered uint8

// On-backup-recovered actions.
const (
	BackupRecoveredKeep     OnBackupRecovered = iota // they continue
	BackupRecoveredClose                             // they are reset, so that clients reconnect to a primary
	BackupRecoveredGraceful                          // they are closed (FIN) at the next boundary of the VIP's app_protocol
)

var onBackupRecoveredNames = [...]string{BackupRecoveredKeep: "keep", BackupRecoveredClose: "close", BackupRecoveredGraceful: "graceful"}

func (o OnBackupRecovered) String() string {
	return enumName(o, "on_backup_recovered", onBackupRecoveredNames[:])
}

// OnBackupRecoveredNames lists the actions as the config names them.
func OnBackupRecoveredNames() []string { return onBackupRecoveredNames[:] }

// RetryOnReset says when a TCP connection whose backend accepted and
// then reset (or closed) is retried on another backend (retry_on_reset).
type RetryOnReset uint8

// Retry-on-reset policies.
const (
	// RetryResetOff: the reset is passed to the client, as before.
	RetryResetOff RetryOnReset = iota
	// RetryResetUnsent: retried while no client byte was written to the
	// backend's socket and the backend sent none: nothing reached its
	// application, so a retry cannot repeat anything.
	RetryResetUnsent
	// RetryResetUnanswered: also after client bytes were written, while
	// the backend sent none back and l4lb still holds every client byte
	// it read (up to 16 KiB): they are sent again to the next backend. A
	// backend that read them and died before answering sees them twice.
	RetryResetUnanswered
)

var retryOnResetNames = [...]string{RetryResetOff: "off", RetryResetUnsent: "unsent", RetryResetUnanswered: "unanswered"}

func (r RetryOnReset) String() string { return enumName(r, "retry_on_reset", retryOnResetNames[:]) }

// RetryOnResetNames lists the policies as the config names them.
func RetryOnResetNames() []string { return retryOnResetNames[:] }

// DBRole is the replication role a postgres or mysql check wants of its
// backend (role).
type DBRole uint8

// Database roles.
const (
	RoleAny     DBRole = iota // either
	RolePrimary               // accepts writes
	RoleReplica               // read-only: in recovery (postgres), read_only (mysql)
)

var dbRoleNames = [...]string{RoleAny: "any", RolePrimary: "primary", RoleReplica: "replica"}

func (r DBRole) String() string { return enumName(r, "role", dbRoleNames[:]) }

// DBRoleNames lists the roles as the config names them.
func DBRoleNames() []string { return dbRoleNames[:] }

// AttachMode is where the XDP program runs ([xdp] attach).
type AttachMode uint8

// Attach modes.
const (
	// AttachDriver runs the program in the NIC driver (native XDP), before
	// any allocation; the interface's driver must support XDP.
	AttachDriver AttachMode = iota
	// AttachGeneric runs it after the kernel has built an skb: works on
	// every interface, at a fraction of native speed.
	AttachGeneric
)

var attachModeNames = [...]string{AttachDriver: "driver", AttachGeneric: "generic"}

func (m AttachMode) String() string { return enumName(m, "attach", attachModeNames[:]) }

// AttachModeNames lists the attach modes as the config names them.
func AttachModeNames() []string { return attachModeNames[:] }

// LogLevel is the least severe level the daemon logs (log_level).
type LogLevel uint8

// Log levels, most verbose first.
const (
	LogDebug LogLevel = iota
	LogInfo
	LogWarn
	LogError
)

var logLevelNames = [...]string{LogDebug: "debug", LogInfo: "info", LogWarn: "warn", LogError: "error"}

func (l LogLevel) String() string { return enumName(l, "log_level", logLevelNames[:]) }

// LogLevelNames lists the levels as the config names them.
func LogLevelNames() []string { return logLevelNames[:] }

// LogFormat is how the daemon writes its log (log_format).
type LogFormat uint8

// Log formats.
const (
	LogConsole LogFormat = iota // human-readable lines
	LogJSON                     // one JSON object a line
)

var logFormatNames = [...]string{LogConsole: "console", LogJSON: "json"}

func (f LogFormat) String() string { return enumName(f, "log_format", logFormatNames[:]) }

// LogFormatNames lists the formats as the config names them.
func LogFormatNames() []string { return logFormatNames[:] }

// KernelFwd is whether established proxied TCP connections are forwarded
// inside the kernel (sockmap; kernel_forwarding).
type KernelFwd uint8

// Kernel forwarding settings. A VIP's global takes [global]'s.
const (
	KernelFwdOff    KernelFwd = iota // splice and copy in l4lb's loops
	KernelFwdAuto                    // in the kernel when the program loads and the connection allows it
	KernelFwdGlobal                  // a VIP: as [global] says
)

var kernelFwdNames = [...]string{KernelFwdOff: "off", KernelFwdAuto: "auto", KernelFwdGlobal: "global"}

func (k KernelFwd) String() string { return enumName(k, "kernel_forwarding", kernelFwdNames[:]) }

// KernelFwdNames lists a VIP's kernel_forwarding values as the config
// names them; GlobalKernelFwdNames those of [global] (no "global").
func KernelFwdNames() []string { return kernelFwdNames[:] }

// GlobalKernelFwdNames lists [global]'s kernel_forwarding values.
func GlobalKernelFwdNames() []string { return kernelFwdNames[:KernelFwdGlobal] }
