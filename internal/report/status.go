// `l4lb status`: the text a person reads.

package report

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/l4lb/l4lb/l4/plane"
)

// StatusView says how much the text status shows.
type StatusView struct {
	AllCaps bool // every capability, not their count
}

// Status is `l4lb status`: the process, its planes and every VIP with
// its backends, for a person.
func Status(w io.Writer, st plane.Status, view StatusView) {
	printProcess(w, st, view)
	pipeCap := "none"
	if st.Pipes.Max > 0 {
		pipeCap = fmt.Sprint(st.Pipes.Max)
	}
	fmt.Fprintf(w, "splice pipes: %d open, %d in use, max %s\n", st.Pipes.Open, st.Pipes.Lent, pipeCap)
	if k := st.Kernel; k.State != "" && (k.State != "not loaded" || k.Total > 0) {
		fmt.Fprintf(w, "kernel forwarding: %s; TCP connections in the kernel %d, in the loops %d (%d moved in, %d refused)\n",
			k.State, k.Conns, k.UserConns, k.Total, k.Failed)
	}
	if len(st.Workers) > 0 {
		conns, sessions := make([]string, len(st.Workers)), make([]string, len(st.Workers))
		var udp int64
		for i, wk := range st.Workers {
			conns[i], sessions[i] = fmt.Sprint(wk.Conns), fmt.Sprint(wk.UDPSessions)
			udp += wk.UDPSessions
		}
		fmt.Fprintf(w, "workers: %d event loops", len(st.Workers))
		if st.BusyPoll > 0 {
			fmt.Fprintf(w, " (busy polling %v)", st.BusyPoll)
		}
		fmt.Fprintf(w, ", TCP connections on each: %s", strings.Join(conns, " "))
		if udp > 0 {
			fmt.Fprintf(w, "; UDP sessions: %s", strings.Join(sessions, " "))
		}
		fmt.Fprintln(w)
	}
	if x := st.XDP; x != nil {
		fmt.Fprintf(w, "xdp: on %s%s, %d live flows\n", xdpInterfaces(x), pinned(x.PinPath), x.LiveFlows)
		if len(x.Counters) > 0 {
			fmt.Fprintf(w, "  counters: %s\n", counterList(x.Counters))
		}
	}
	printBGP(w, st.BGP)
	printRunTime(w, st)
	printFlowSync(w, st.FlowSync)
	fmt.Fprintln(w)
	for i, v := range st.VIPs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		draining := ""
		switch {
		case v.ModeChange != nil:
			m := v.ModeChange
			draining = fmt.Sprintf("  DRAINING (mode changed to %s: the %s plane keeps its established flows until they end, at most until %s)",
				m.To, m.From, m.Until.Local().Format(time.TimeOnly))
		case v.Draining && st.Stopping:
			draining = "  DRAINING (l4lb is stopping)"
		case v.Draining:
			draining = "  DRAINING (removed by a reload)"
		}
		if v.Serving == "backups" || v.Serving == "none" || v.Serving == "panic" {
			draining += "  serving: " + strings.ToUpper(v.Serving) // the primaries are all out
		}
		fmt.Fprintf(w, "VIP %s  %s/%s  %s  eligible %d/%d  active %d  accepted %d  no-backend %d%s\n",
			v.Name, v.Protocol, v.Listen, v.Algorithm, v.Eligible, len(v.Backends), v.Active, v.Accepted, v.NoBackend, draining)
		if t := v.TCP; t != nil && *t != (plane.TCPStatus{}) {
			printLines(w, plane.CounterLines("  ", plane.Counters(t), false))
		}
		if v.Denied+v.ClientLimited > 0 {
			fmt.Fprintf(w, "  refused: denied %d  client-limited %d\n", v.Denied, v.ClientLimited)
		}
		printLines(w, plane.CounterLines("  ", plane.Counters(v.XDP), false))
		printLines(w, plane.CounterLines("  ", plane.Counters(v.XDPGuard), true))
		printLines(w, plane.CounterLines("  ", plane.Counters(v.UDP), false))
		printLines(w, plane.CounterLines("  ", plane.Counters(v.Failover), false))
		if rb := v.Rebalance; rb != nil {
			fmt.Fprintf(w, "  rebalance %s: %s\n", rb.State, rebalanceSummary(*rb))
		}
		for _, n := range v.Names {
			fmt.Fprintf(w, "  dns %s\n", nameSummary(n))
		}
		backendTable(w, "  ", v.UDP != nil, v.Backends)
		if sni := v.SNI; sni != nil {
			fmt.Fprintf(w, "  sni: timeout %s  no-match %s  default %d  sni-no-match %d  sni-not-tls %d  sni-timeouts %d\n",
				sni.Timeout, sni.NoMatch, sni.Default, sni.NoMatchCount, sni.NotTLS, sni.Timeouts)
			printLines(w, plane.CounterLines("  ", plane.Counters(sni.Startup), false))
			for _, r := range sni.Routes {
				fmt.Fprintf(w, "  route %s  %s  %s  eligible %d/%d  routed %d\n",
					r.Name, routeMatch(r), r.Algorithm, r.Eligible, len(r.Backends), r.Routed)
				backendTable(w, "    ", false, r.Backends)
			}
		}
	}
}

// routeMatch is what a route takes: its server names, and a postgres
// VIP's route its databases and users.
func routeMatch(r plane.RouteStatus) string {
	var parts []string
	if len(r.Names) > 0 {
		parts = append(parts, strings.Join(r.Names, ","))
	}
	if len(r.Databases) > 0 {
		parts = append(parts, "database "+strings.Join(r.Databases, ","))
	}
	if len(r.Users) > 0 {
		parts = append(parts, "user "+strings.Join(r.Users, ","))
	}
	return strings.Join(parts, " ")
}

// liveString is a backend's live flows, "n/cap" when it has a cap
// (max_conns, max_sessions), then "@rate/s" when it has a max_conn_rate
// and "over-rate" while it is over it.
func liveString(b plane.BackendStatus) string {
	s := strconv.FormatInt(b.LiveFlows, 10)
	if b.MaxFlows > 0 {
		s = fmt.Sprintf("%d/%d", b.LiveFlows, b.MaxFlows)
	}
	if b.MaxConnRate > 0 {
		s += fmt.Sprintf(" @%d/s", b.MaxConnRate) // max_conn_rate
	}
	if b.OverRate {
		s += " over-rate"
	}
	return s
}

// backendTable writes a backend table, each line indented by indent.
func backendTable(w io.Writer, indent string, udp bool, bs []plane.BackendStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	noReply := ""
	if udp {
		noReply = "\tNO REPLY"
	}
	fmt.Fprintln(tw, indent+"BACKEND\tADDRESS\tWEIGHT\tHEALTH\tLIVE\tFLOWS\tFAILS"+noReply+"\tIN\tOUT\tRTT\tLAST CHECK")
	for _, b := range bs {
		last := b.LastCheck
		if lag := b.ReplicaLag.Text(); lag != "" && last == "ok" {
			last += ", " + lag // a failed check says the lag in its reason
		}
		if b.Reason != "" && b.Reason != b.LastCheck {
			last = strings.TrimSpace(last + " (down: " + b.Reason + ")")
		}
		health := b.Health
		if b.Trial {
			health += "/trial"
		}
		if b.Backup {
			health += "/backup"
		}
		if b.Degraded != "" {
			health += "/DEGRADED"
			kept := ""
			if b.DegradedKept {
				kept = "; kept: the last eligible backend"
			}
			last = strings.TrimSpace(fmt.Sprintf("%s (degraded since %s: %s%s)", last, b.DegradedSince.Format(time.RFC3339), b.Degraded, kept))
		}
		if b.EjectKept {
			health += "/KEPT"
			last = strings.TrimSpace(last + " (kept in: max_ejected)")
		}
		if b.Agent != nil {
			last = strings.TrimSpace(last + " (" + b.Agent.Text() + ")")
		}
		if b.Override != "" {
			health += "/" + strings.ToUpper(b.Override)
			last = strings.TrimSpace(fmt.Sprintf("%s (%s by %s at %s)", last, b.Override, b.OverrideBy, b.OverrideSince.Format(time.RFC3339)))
		}
		if b.Change != "" {
			health += "/RUNTIME"
			last = strings.TrimSpace(fmt.Sprintf("%s (%s at run time by %s at %s)", last, b.Change, b.ChangeBy, b.ChangeSince.Format(time.RFC3339)))
		}
		fails := strconv.FormatUint(b.ConnectFails, 10)
		if udp {
			fails += "\t" + strconv.FormatUint(b.Unanswered, 10)
		}
		fmt.Fprintf(tw, indent+"%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n",
			b.ID, b.Address, b.Weight, health, liveString(b), b.Flows, fails,
			plane.SizeString(b.BytesIn), plane.SizeString(b.BytesOut), rttString(b.RTT), last)
	}
	tw.Flush()
}

func pinned(path string) string {
	if path == "" {
		return ""
	}
	return ", maps pinned at " + path
}

// counterList prints counters as name=value, sorted by name.
func counterList(c map[string]uint64) string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%d", n, c[n])
	}
	return strings.Join(parts, " ")
}

// printProcess prints the build, uptime and last reload.
func printProcess(w io.Writer, st plane.Status, view StatusView) {
	p := st.Process
	fmt.Fprintf(w, "l4lb %s (commit %s, %s), pid %d, up %s, config %s\n", p.Version, shortCommit(p.Commit), p.GoVersion,
		p.PID, (time.Duration(p.UptimeSeconds) * time.Second).String(), st.Config)
	if c := p.Capabilities; c != nil {
		fmt.Fprintf(w, "capabilities: %s\n", capSummary(c, view.AllCaps))
	}
	switch r := p.LastReload; {
	case r == nil:
		fmt.Fprintln(w, "last reload: none since start")
	case r.OK:
		fmt.Fprintf(w, "last reload: %s, applied\n", r.Time.Format(time.RFC3339))
	default:
		fmt.Fprintf(w, "last reload: %s, REFUSED (running config kept): %s\n", r.Time.Format(time.RFC3339), firstLine(r.Error))
	}
	if st.Stopping {
		fmt.Fprintln(w, "STOPPING: no new connections; the VIPs below drain until their connections end or drain_timeout")
	}
}

// listedCaps is how many capabilities the status line lists by name;
// more (root's full set is about 40) are counted, and --capabilities
// lists them.
const listedCaps = 8

// capSummary is the capabilities line: the few the daemon keeps after
// drop_capabilities by name, a full set as a count.
func capSummary(c *plane.CapabilityStatus, all bool) string {
	switch {
	case c.Dropped:
		return capList(c.Effective) + " (drop_capabilities: the rest dropped, bounding set too)"
	case all || len(c.Effective) <= listedCaps:
		return capList(c.Effective)
	}
	return fmt.Sprintf("%d, not dropped (drop_capabilities = false; --capabilities lists them)", len(c.Effective))
}

// capList prints capability names without their cap_ prefix.
func capList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	short := make([]string, len(names))
	for i, n := range names {
		short[i] = strings.TrimPrefix(n, "cap_")
	}
	return strings.Join(short, " ")
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// printLines writes each line and a newline.
func printLines(w io.Writer, lines []string) {
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

func rttString(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// nameSummary is one named backend's line: its last good answer, how old,
// and the error while lookups fail.
func nameSummary(n plane.NameStatus) string {
	s := n.Lookup + ": "
	if len(n.Addresses) == 0 {
		s += "NOT RESOLVED (no backends from it)"
	} else {
		s += fmt.Sprintf("%s (answer %s old)", strings.Join(n.Addresses, " "), secondsString(n.AnswerAge))
	}
	if n.Error != "" {
		s += fmt.Sprintf("  FAILING for %s: %s", secondsString(n.FailingFor), n.Error)
	}
	return s
}

func secondsString(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond).String()
}

// printBGP shows the speaker: each session and the announced routes.
func printBGP(w io.Writer, b *plane.BGPStatus) {
	if b == nil {
		return
	}
	announced := "none"
	if len(b.Announced) > 0 {
		announced = strings.Join(b.Announced, " ")
	}
	if b.Withdrawn {
		announced += " (WITHDRAWN: shutting down)"
	}
	fmt.Fprintf(w, "bgp: as %d, router id %s, announced: %s\n", b.ASN, b.RouterID, announced)
	for _, p := range b.Peers {
		up := ""
		if p.Up {
			up = " for " + secondsString(p.UptimeSeconds)
		}
		fmt.Fprintf(w, "  peer %s as %d  %s%s  prefixes sent %d\n", p.Address, p.ASN, p.State, up, p.PrefixesSent)
		printBFD(w, p.BFD)
	}
	if d := b.BFDDropped; d != nil && (d.Malformed+d.TTL+d.NoSession) > 0 {
		fmt.Fprintf(w, "  bfd dropped: malformed %d, ttl %d, no-session %d\n", d.Malformed, d.TTL, d.NoSession)
	}
}

// printFlowSync shows flow sync's peers and counters.
func printFlowSync(w io.Writer, f *plane.FlowSyncStatus) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "flow sync: listen %s, peers %s, every %s\n", f.Listen, strings.Join(f.Peers, " "), f.Interval)
	fmt.Fprintf(w, "  sent %d flows (%d datagrams, %d unsent for max_rate)  from peers: installed %d, known %d, foreign-vip %d, unknown-backend %d, in table %d\n",
		f.Sent, f.DatagramsSent, f.SendRateLimited, f.Installed, f.Known, f.ForeignVIP, f.UnknownBackend, f.FromPeers)
	if dropped := f.Malformed + f.BadVersion + f.BadAuth + f.Replays + f.InstallRateLimited + f.TableFull + f.InstallFailed + f.SendErrors; dropped > 0 {
		fmt.Fprintf(w, "  dropped: malformed %d, version %d, auth %d, replay %d, rate-limited %d, table-full %d, failed %d, send-errors %d\n",
			f.Malformed, f.BadVersion, f.BadAuth, f.Replays, f.InstallRateLimited, f.TableFull, f.InstallFailed, f.SendErrors)
	}
}

// printBFD shows a peer's BFD session under its BGP line.
func printBFD(w io.Writer, b *plane.BFDStatus) {
	if b == nil {
		return
	}
	fmt.Fprintf(w, "    bfd %s (remote %s)  %s x %d", b.State, b.RemoteState, b.Interval, b.Multiplier)
	if b.DetectTime > 0 {
		fmt.Fprintf(w, ", detect %s", b.DetectTime)
	}
	if b.Diag != "none" {
		fmt.Fprintf(w, ", last diag %s", b.Diag)
	}
	fmt.Fprintf(w, "  sent %d received %d  ups %d downs %d  bgp resets %d  max gap %s\n", b.Sent, b.Received, b.Ups, b.Downs, b.BGPResets, b.MaxTxGap.Round(time.Millisecond))
}

// ConfigJSON prints the config in force (TOML, as the admin API answers
// it) as JSON with the same keys: a table is an object, an array of
// tables an array.
func ConfigJSON(w io.Writer, body []byte) error {
	var m map[string]any
	if _, err := toml.Decode(string(body), &m); err != nil {
		return fmt.Errorf("bad answer: %w", err)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(m)
}

// xdpInterfaces is "eth0 (driver mode)", one such per interface the
// program runs on.
func xdpInterfaces(x *plane.XDPStatus) string {
	if len(x.Interfaces) == 0 {
		return fmt.Sprintf("%s (%s mode)", x.Interface, x.Attach)
	}
	out := make([]string, len(x.Interfaces))
	for i, ifc := range x.Interfaces {
		out[i] = fmt.Sprintf("%s (%s mode)", ifc.Name, ifc.Attach)
	}
	return strings.Join(out, ", ")
}
