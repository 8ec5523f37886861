// Mapping config values onto the data plane's types.

package reconcile

import (
	"fmt"
	"net"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/guard"
	"github.com/l4lb/l4lb/l4/proxy"
)

func settings(vc *config.VIP) (proxy.Settings, error) {
	acl, err := accessList(vc)
	if err != nil {
		return proxy.Settings{}, err
	}
	return proxy.Settings{
		Name:           vc.Name,
		ConnectTimeout: vc.ConnectTimeout,
		Retries:        vc.Retries,
		IdleTimeout:    vc.IdleTimeout,
		KeepAlive:      vc.KeepAlive,
		MaxConns:       vc.MaxConns,
		ProxyProtocol:  vc.ProxyProtocol,

		AcceptProxy:     vc.AcceptProxyProtocol,
		AcceptProxyFrom: vc.AcceptProxyProtocolFrom,

		FirstByteTimeout: vc.FirstByteTimeout,
		QueueTimeout:     vc.QueueTimeout,

		AffinityTimeout: vc.AffinityTimeout,
		// Only least_time with the connect metric uses the proxy's own
		// handshake times; others save the syscall.
		MeasureConnect: vc.Algorithm == l4.LeastTime && vc.LeastTimeMetric != l4.MetricFirstByte,
		LogConnections: vc.LogConnections,
		LogRate:        vc.LogConnectionsRate,

		Access:       acl,
		ClientLimits: guard.Limits{MaxOpen: vc.MaxConnsPerClient, Rate: vc.ConnRatePerClient},
	}, nil
}

func udpSettings(vc *config.VIP) (proxy.UDPSettings, error) {
	acl, err := accessList(vc)
	if err != nil {
		return proxy.UDPSettings{}, err
	}
	return proxy.UDPSettings{
		Name:           vc.Name,
		SessionTimeout: vc.SessionTimeout,
		MaxSessions:    vc.MaxSessions,
		Responses:      vc.UDPResponses,
		LogConnections: vc.LogConnections,
		LogRate:        vc.LogConnectionsRate,
		Access:         acl,
		ClientLimits:   guard.Limits{MaxOpen: vc.MaxSessionsPerClient, Rate: vc.ConnRatePerClient},
	}, nil
}

// backendCap is the cap on b's live flows in vc: max_conns for tcp,
// max_sessions for udp (0 = none; config refuses caps in xdp mode).
func backendCap(vc *config.VIP, b *config.Backend) int64 {
	if vc.Mode != l4.ModeProxy {
		return 0
	}
	if vc.Protocol == l4.UDP {
		return int64(b.MaxSessions)
	}
	return int64(b.MaxConns)
}

// accessList builds the VIP's allow/deny list (nil when it has none).
func accessList(vc *config.VIP) (*guard.ACL, error) {
	acl, err := guard.NewACL(vc.Allow, vc.Deny)
	if err != nil {
		return nil, fmt.Errorf("vip %q: %w", vc.Name, err)
	}
	return acl, nil
}

func keepAliveFor(st proxy.Settings) net.KeepAliveConfig {
	if st.KeepAlive <= 0 {
		return net.KeepAliveConfig{}
	}
	return net.KeepAliveConfig{Enable: true, Idle: st.KeepAlive, Interval: st.KeepAlive / 4, Count: 4}
}

func balanceOptions(vc *config.VIP) (balance.Options, error) {
	opts := balance.Options{
		Algorithm:        vc.Algorithm,
		HashKey:          vc.HashKey,
		MaglevSize:       uint32(vc.MaglevTableSize),
		BalanceFactor:    uint32(vc.HashBalanceFactor),
		LeastTimeDefault: vc.LeastTimeDefault,
		LeastTimeBias:    vc.LeastTimeBias,
	}
	return opts, nil
}
