// Mapping config values onto the data plane's types.

package reconcile

import (
	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/proxy"
	"github.com/l4lb/l4lb/l4/xdpplane"
)

// tcpSettings are a TCP proxy VIP's plane settings.
func tcpSettings(vc *config.VIP) proxy.TCPPlaneSettings {
	st := proxy.Settings{
		Name:           vc.Name,
		ConnectTimeout: vc.ConnectTimeout,
		Retries:        vc.Retries,
		RetryOnReset:   vc.RetryOnReset,
		IdleTimeout:    vc.IdleTimeout,
		KeepAlive:      vc.KeepAlive,
		MaxConns:       vc.MaxConns,
		ProxyProtocol:  vc.ProxyProtocol,
		AppProtocol:    vc.AppProtocol,

		AcceptProxy:     vc.AcceptProxyProtocol,
		AcceptProxyFrom: vc.AcceptProxyProtocolFrom,

		FirstByteTimeout: vc.FirstByteTimeout,
		QueueTimeout:     vc.QueueTimeout,
		FailoverHold:     vc.FailoverHold,
		StallTimeout:     vc.StallTimeout,
		KernelForward:    vc.KernelForwarding == l4.KernelFwdAuto,

		AffinityTimeout: vc.AffinityTimeout,
		// Only least_time with the connect metric uses the proxy's own
		// handshake times; others save the syscall.
		MeasureConnect: vc.Algorithm == l4.LeastTime && vc.LeastTimeMetric != l4.MetricFirstByte,
		LogConnections: vc.LogConnections,
		LogRate:        vc.LogConnectionsRate,
	}
	st.ClientLimits.MaxOpen, st.ClientLimits.Rate = vc.MaxConnsPerClient, vc.ConnRatePerClient
	return proxy.TCPPlaneSettings{Service: st, Lists: proxy.Lists{Allow: vc.Allow, Deny: vc.Deny}, Freebind: vc.Freebind, DeferAccept: vc.DeferAccept}
}

// udpSettings are a UDP proxy VIP's plane settings.
func udpSettings(vc *config.VIP) proxy.UDPPlaneSettings {
	st := proxy.UDPSettings{
		Name:           vc.Name,
		SessionTimeout: vc.SessionTimeout,
		MaxSessions:    vc.MaxSessions,
		Responses:      vc.UDPResponses,
		LogConnections: vc.LogConnections,
		LogRate:        vc.LogConnectionsRate,
	}
	st.ClientLimits.MaxOpen, st.ClientLimits.Rate = vc.MaxSessionsPerClient, vc.ConnRatePerClient
	return proxy.UDPPlaneSettings{Service: st, Lists: proxy.Lists{Allow: vc.Allow, Deny: vc.Deny}, Freebind: vc.Freebind}
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

// backendRate is b's cap on new connections a second in vc (0 = none;
// config refuses it but on tcp proxy VIPs).
func backendRate(vc *config.VIP, b *config.Backend) int64 {
	if vc.Mode != l4.ModeProxy || vc.Protocol != l4.TCP {
		return 0
	}
	return int64(b.MaxConnRate)
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

// xdpOptions are the XDP program's options.
func xdpOptions(x *config.XDP) xdpplane.Options {
	return xdpplane.Options{Interfaces: x.Interfaces, Attach: x.Attach, PinPath: x.PinPath,
		ConntrackSize: x.ConntrackSize, WeightRefresh: x.WeightRefresh, SYNRatePerSource: x.SYNRatePerSource,
		SourcePrefix4: x.SourcePrefix4, SourcePrefix6: x.SourcePrefix6, GUEPort: x.GUEPort,
		NAT: xdpplane.NATOptions{Source4: x.NATSource4, Source6: x.NATSource6, PortMin: x.NATPortMin, PortMax: x.NATPortMax,
			TCPTimeout: x.NATTCPTimeout, UDPTimeout: x.NATUDPTimeout}}
}

// vipOptions are an xdp VIP's plane options.
func vipOptions(vc *config.VIP) xdpplane.VIPOptions {
	return xdpplane.VIPOptions{HashKey: vc.HashKey, Forward: vc.Forward, NewFlowRate: vc.NewFlowRate,
		MaglevTableSize: vc.MaglevTableSize, Allow: vc.Allow, Deny: vc.Deny, SessionTimeout: vc.SessionTimeout, Algorithm: vc.Algorithm}
}

// guardOptions are the lists of a proxy VIP the XDP program guards.
func guardOptions(vc *config.VIP) xdpplane.GuardOptions {
	return xdpplane.GuardOptions{Allow: vc.Allow, Deny: vc.Deny}
}

// ipipFamilies are the families bpf_fib_lookup routes for vips: those of
// the backends of xdp VIPs with forward = "ipip" (the outer header's
// family) or "nat". l2 VIPs and the guards of proxy VIPs need no
// forwarding.
func ipipFamilies(vips map[l4.VIPKey]*config.VIP) (v4, v6 bool) {
	for _, vc := range vips {
		if vc.Mode != l4.ModeXDP || vc.Forward == l4.ForwardL2 {
			continue
		}
		for _, b := range vc.Backends {
			if a := b.Address.Addr(); a.Is4() {
				v4 = true
			} else if a.Is6() {
				v6 = true
			}
		}
	}
	return v4, v6
}

// checkXDPForwarding refuses xdp VIPs that forward by ipip to backends of
// a family that iface does not forward (see xdpplane.CheckForwarding).
func checkXDPForwarding(ifaces []string, vips map[l4.VIPKey]*config.VIP) error {
	v4, v6 := ipipFamilies(vips)
	return xdpplane.CheckForwarding(ifaces, v4, v6)
}
