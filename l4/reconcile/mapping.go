// Mapping config values onto the data plane's types.
package reconcile

import (
	"fmt"
	"net"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4/balance"
	"github.com/l4lb/l4lb/l4/proxy"
)

func settings(vc *config.VIP) proxy.Settings {
	pp := 0
	switch vc.ProxyProtocol {
	case "v1":
		pp = 1
	case "v2":
		pp = 2
	}
	return proxy.Settings{
		Name:           vc.Name,
		ConnectTimeout: vc.ConnectTimeout,
		Retries:        vc.Retries,
		IdleTimeout:    vc.IdleTimeout,
		KeepAlive:      vc.KeepAlive,
		MaxConns:       vc.MaxConns,
		ProxyProtocol:  pp,

		AffinityTimeout: vc.AffinityTimeout,
		// Only least_time with the connect metric uses the proxy's own
		// handshake times; others save the syscall.
		MeasureConnect: vc.Algorithm == "least_time" && vc.LeastTimeMetric != "first_byte",
	}
}

func udpSettings(vc *config.VIP) proxy.UDPSettings {
	return proxy.UDPSettings{
		Name:           vc.Name,
		SessionTimeout: vc.SessionTimeout,
		MaxSessions:    vc.MaxSessions,
		Responses:      vc.UDPResponses,
	}
}

func keepAliveFor(st proxy.Settings) net.KeepAliveConfig {
	if st.KeepAlive <= 0 {
		return net.KeepAliveConfig{}
	}
	return net.KeepAliveConfig{Enable: true, Idle: st.KeepAlive, Interval: st.KeepAlive / 4, Count: 4}
}

func balanceOptions(vc *config.VIP) (balance.Options, error) {
	alg, err := balance.ParseAlgorithm(vc.Algorithm)
	if err != nil {
		return balance.Options{}, err
	}
	opts := balance.Options{
		Algorithm:        alg,
		MaglevSize:       uint32(vc.MaglevTableSize),
		BalanceFactor:    uint32(vc.HashBalanceFactor),
		LeastTimeDefault: vc.LeastTimeDefault,
		LeastTimeBias:    vc.LeastTimeBias,
	}
	if vc.HashKey != "" {
		if opts.HashKey, err = balance.ParseHashKey(vc.HashKey); err != nil {
			return balance.Options{}, fmt.Errorf("vip %q: %w", vc.Name, err)
		}
	}
	return opts, nil
}
