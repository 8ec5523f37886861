// [flow_sync]: send the flows this balancer pins to its peers, and
// install theirs, so that a flow keeps its backend across a balancer's
// death even when the backend sets changed during its life.

package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// FlowSync is [flow_sync].
type FlowSync struct {
	// Listen is where the peers' datagrams arrive (this balancer's
	// address and the sync port).
	Listen netip.AddrPort
	// Peers are the other balancers' listen addresses.
	Peers []netip.AddrPort
	// Key authenticates every datagram (HMAC-SHA256); the same on every
	// balancer, at least 16 bytes.
	Key string
	// Interval is how often the flows seen since the last round are sent.
	Interval time.Duration
	// MaxRate caps the flows sent, and the flows installed, per second.
	MaxRate int
	// MaxEntries caps the entries that came from peers in the table.
	MaxEntries int
}

// MinFlowSyncKey is the shortest key [flow_sync] takes.
const MinFlowSyncKey = 16

// buildFlowSync resolves [flow_sync]; nil when the file has none.
func buildFlowSync(p *problems, file rawTable) *FlowSync {
	if !file.has("flow_sync") {
		return nil
	}
	out := &FlowSync{}
	resolveKeys(newLayer(p, "", "flow_sync", ""), flowSyncKeys, file.table("flow_sync"), nil, out)
	return out
}

func formatFlowSync(w *tomlWriter, f *FlowSync, opts FormatOptions) {
	if f == nil {
		return
	}
	shown := *f
	if !opts.ShowSecrets {
		shown.Key = Redacted
	}
	w.table("flow_sync")
	writeKeys(w, flowSyncKeys, &shown)
}

// diffFlowSync reports a changed [flow_sync] as one change: a reload
// restarts the sync with the new settings (the table keeps its entries).
func diffFlowSync(o, v *FlowSync) []Change {
	old, cur := flowSyncSummary(o), flowSyncSummary(v)
	switch {
	case old != cur:
		return []Change{{Key: "flow_sync", Old: old, New: cur, Effect: EffectNow}}
	case o != nil && v != nil && o.Key != v.Key:
		return []Change{{Key: "flow_sync", Old: old, New: cur, Effect: EffectNow, Note: "the key changed"}}
	}
	return nil
}

func flowSyncSummary(f *FlowSync) string {
	if f == nil {
		return "(none)"
	}
	peers := make([]string, len(f.Peers))
	for i, p := range f.Peers {
		peers[i] = p.String()
	}
	return fmt.Sprintf("listen %s, peers %s, interval %s, max_rate %d, max_entries %d", f.Listen, strings.Join(peers, " "),
		fmtDuration(f.Interval), f.MaxRate, f.MaxEntries)
}

// flowSyncListen is listen: a unicast address and a port.
func flowSyncListen() keyValue[FlowSync] {
	return keyValue[FlowSync]{
		resolve: func(l *layer, key string, own, _ rawTable, f *FlowSync) {
			s := l.str(key, get[string](own, key), opt[string]{}, "")
			ap, err := netip.ParseAddrPort(s)
			switch {
			case s == "":
				l.problem(key, "is required: this balancer's address and the sync port, such as \"198.18.3.10:7946\"")
			case err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() || ap.Addr().IsMulticast():
				l.problem(key, "%q must be a unicast IP address and a port", s)
			default:
				f.Listen = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			}
		},
		text: func(f *FlowSync) string { return f.Listen.String() },
		toml: func(f *FlowSync) string { return quoteTOML(f.Listen.String()) },
		copy: func(dst, src *FlowSync) { dst.Listen = src.Listen },
		form: `"IP:PORT"`,
	}
}

// flowSyncPeers is peers: at least one address and port.
func flowSyncPeers() keyValue[FlowSync] {
	return keyValue[FlowSync]{
		resolve: func(l *layer, key string, own, _ rawTable, f *FlowSync) {
			raw := value(l, key, get[[]any](own, key), opt[[]any]{}, nil, "an array of addresses")
			l.eachString(key, raw, `an address and port such as "198.18.3.11:7946"`, func(i int, s string) {
				ap, err := netip.ParseAddrPort(s)
				if err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() || ap.Addr().IsMulticast() {
					l.problem(key, "[%d] %q must be a unicast IP address and a port", i, s)
					return
				}
				f.Peers = append(f.Peers, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
			})
			if len(f.Peers) == 0 && !l.failed[key] {
				l.problem(key, "is required: the other balancers' listen addresses, at least one")
			}
		},
		text: func(f *FlowSync) string { return addrList(f.Peers) },
		toml: func(f *FlowSync) string { return addrList(f.Peers) },
		copy: func(dst, src *FlowSync) { dst.Peers = src.Peers },
		form: `["IP:PORT", ...]`,
	}
}

func checkFlowSyncKey(l *layer, f *FlowSync) {
	switch {
	case !l.has("key"):
		l.problem("key", "is required: the secret every balancer shares (at least %d bytes)", MinFlowSyncKey)
	case len(f.Key) < MinFlowSyncKey:
		l.problem("key", "is %d bytes; at least %d are required", len(f.Key), MinFlowSyncKey)
	}
}
