// Tests of Diff: every kind of change a reload makes, and when it applies.

package config_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
)

// diffBase is the running config the cases edit: a TCP VIP with named and
// unnamed backends, and a UDP VIP.
const diffBase = `[global]
admin_socket = "off"
drain_timeout = "3s"

[[vip]]
name = "a"
listen = "198.18.2.10:80"
  [[vip.backend]]
  name = "be0"
  address = "198.18.1.11:7000"
  [[vip.backend]]
  name = "be1"
  address = "198.18.1.12:7000"
  [[vip.backend]]
  address = "198.18.1.13:7000"

[[vip]]
name = "u"
listen = "198.18.2.10:53"
protocol = "udp"
  [[vip.backend]]
  name = "d0"
  address = "198.18.1.11:53"
  [[vip.backend]]
  name = "d1"
  address = "198.18.1.12:53"
`

// aListen is VIP a's listen line, after which its own tables may start.
const aListen = `listen = "198.18.2.10:80"`

// diffXDPBase has an xdp VIP (so the XDP program runs) beside a proxy one.
const diffXDPBase = `[global]
admin_socket = "off"
[xdp]
interface = "veth0"
[[vip]]
name = "x"
listen = "198.18.2.20:53"
protocol = "udp"
mode = "xdp"
  [[vip.backend]]
  name = "x0"
  address = "198.18.1.21:53"
  [[vip.backend]]
  name = "x1"
  address = "198.18.1.22:53"
[[vip]]
name = "p"
listen = "198.18.2.20:80"
  [[vip.backend]]
  address = "198.18.1.21:80"
`

// edit applies old -> new replacements to src; each old must be there.
func edit(t *testing.T, src string, pairs ...string) string {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(src, pairs[i]) {
			t.Fatalf("edit: %q not in the config", pairs[i])
		}
		src = strings.Replace(src, pairs[i], pairs[i+1], 1)
	}
	return src
}

// flat writes each change on one line: `~ key old->new effect`,
// `+vip name`, `~vip name ~backend id key old->new effect` and so on.
func flat(c config.Changes) []string {
	var out []string
	for _, g := range c.Global {
		out = append(out, fmt.Sprintf("~ %s %s->%s %s", g.Key, g.Old, g.New, g.Effect))
	}
	sign := map[config.Op]string{config.OpAdd: "+", config.OpRemove: "-", config.OpChange: "~"}
	for _, v := range c.VIPs {
		vip := sign[v.Op] + "vip " + v.Name
		if v.Op != config.OpChange {
			out = append(out, fmt.Sprintf("%s %s/%s", vip, v.Protocol, v.Listen))
			continue
		}
		for _, s := range v.Settings {
			out = append(out, fmt.Sprintf("%s %s %s->%s %s", vip, s.Key, s.Old, s.New, s.Effect))
		}
		for _, b := range v.Members {
			line := fmt.Sprintf("%s %sbackend %s", vip, sign[b.Op], b.ID)
			for _, ch := range b.Changes {
				line += fmt.Sprintf(" %s %s->%s", ch.Key, ch.Old, ch.New)
			}
			out = append(out, line+" "+string(b.Effect))
		}
	}
	return out
}

func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name          string
		running, next string
		opts          config.DiffOptions
		want          []string
		notes         []string // in Text()
	}{
		{name: "identical", running: diffBase, next: diffBase, want: nil, notes: []string{"no changes\n"}},
		{
			name: "vip added", running: diffBase,
			next: diffBase + "[[vip]]\nname = \"c\"\nlisten = \"198.18.2.10:82\"\n  [[vip.backend]]\n  address = \"198.18.1.14:7000\"\n",
			want: []string{"+vip c tcp/198.18.2.10:82"}, notes: []string{`+ vip "c" tcp/198.18.2.10:82: proxy, round_robin, 1 backend; starts`, "reload: 1 VIP to add, 0 to remove, 0 to change"},
		},
		{
			name: "tcp vip removed drains for the new drain_timeout", running: diffBase + "[[vip]]\nname = \"c\"\nlisten = \"198.18.2.10:82\"\n  [[vip.backend]]\n  address = \"198.18.1.14:7000\"\n",
			next: edit(t, diffBase, `drain_timeout = "3s"`, `drain_timeout = "7s"`),
			want: []string{"~ global.drain_timeout 3s->7s now", "-vip c tcp/198.18.2.10:82"},
			notes: []string{`- vip "c" tcp/198.18.2.10:82: stops accepting; its connections have 7s (drain_timeout) to finish, then are reset`,
				"reload: 0 VIPs to add, 1 to remove, 0 to change; 1 global setting"},
		},
		{
			name: "udp vip removed ends its sessions", running: diffBase, next: diffBase[:strings.Index(diffBase, "[[vip]]\nname = \"u\"")],
			want: []string{"-vip u udp/198.18.2.10:53"}, notes: []string{"stops at once: its sessions end"},
		},
		{
			name: "a new listen address is another VIP", running: diffBase, next: edit(t, diffBase, "198.18.2.10:80", "198.18.2.11:80"),
			want:  []string{"+vip a tcp/198.18.2.11:80", "-vip a tcp/198.18.2.10:80"},
			notes: []string{"it replaces the running VIP of this name on tcp/198.18.2.10:80", "its name moves to the new VIP on tcp/198.18.2.11:80"},
		},
		{
			name: "renamed on the same address", running: diffBase, next: edit(t, diffBase, `name = "a"`, `name = "a2"`),
			want: []string{"~vip a2 name a->a2 now"},
		},
		{
			name: "settings: algorithm, timeouts, limits, socket options", running: diffBase,
			next: edit(t, diffBase, `listen = "198.18.2.10:80"`, `listen = "198.18.2.10:80"
algorithm = "least_conn"
connect_timeout = "1s"
max_conns = 10
freebind = true
affinity_timeout = "1m"`, `protocol = "udp"`, `protocol = "udp"
session_timeout = "5s"
max_sessions = 10
udp_responses = 1`),
			want: []string{
				"~vip a algorithm round_robin->least_conn new_flows", "~vip a connect_timeout 2s->1s new_flows",
				"~vip a max_conns 0->10 now", "~vip a freebind false->true next_bind", "~vip a affinity_timeout 0s->1m new_flows",
				"~vip u session_timeout 30s->5s now", "~vip u max_sessions 65536->10 new_flows", "~vip u udp_responses 0->1 now",
			},
			notes: []string{"~ algorithm: round_robin -> least_conn (new connections only)", "~ max_sessions: 65536 -> 10 (new sessions only; no session is ended)",
				"clients' pins are forgotten", "when the VIP's socket is next opened"},
		},
		{
			name: "keys that no longer apply are not reported", running: edit(t, diffBase, `listen = "198.18.2.10:80"`, "listen = \"198.18.2.10:80\"\nalgorithm = \"maglev\"\nmaglev_table_size = 1009"),
			next: diffBase, want: []string{"~vip a algorithm maglev->round_robin new_flows"},
		},
		{
			name: "health", running: edit(t, diffBase, aListen, aListen+"\n[vip.health]\ninterval = \"2s\""),
			next: edit(t, diffBase, aListen, aListen+"\n[vip.health]\ninterval = \"1s\"", `protocol = "udp"`, "protocol = \"udp\"\n[vip.health]\ntype = \"tcp\""),
			want: []string{"~vip a health.interval 2s->1s now", "~vip u health.type none->tcp now"},
			notes: []string{"probes restart with it; health states are kept",
				"every backend's health starts again at unknown (eligible) until its first probe"},
		},
		{
			name: "a new check type restarts the check: its own keys are not listed", running: diffBase,
			next: edit(t, diffBase, aListen, aListen+"\n[vip.health]\ntype = \"http\"\npath = \"/up\""),
			want: []string{"~vip a health.type tcp->http now"},
		},
		{
			name: "keys of an unchanged check type", running: edit(t, diffBase, aListen, aListen+"\n[vip.health]\ntype = \"http\""),
			next: edit(t, diffBase, aListen, aListen+"\n[vip.health]\ntype = \"http\"\npath = \"/up\""),
			want: []string{`~vip a health.path "/"->"/up" now`},
		},
		{
			name: "a redacted running password is not compared", running: edit(t, diffBase, aListen, aListen+"\n[vip.health]\ntype = \"redis\"\npassword = \"<redacted>\""),
			next: edit(t, diffBase, aListen, aListen+"\n[vip.health]\ntype = \"redis\"\npassword = \"s3cret\""),
		},
		{
			name: "a password set is shown redacted", running: edit(t, diffBase, aListen, aListen+"\n[vip.health]\ntype = \"redis\""),
			next: edit(t, diffBase, aListen, aListen+"\n[vip.health]\ntype = \"redis\"\npassword = \"s3cret\""),
			want: []string{"~vip a health.password (none)-><redacted> now"},
		},
		{
			name: "backends added, removed, reweighted, readdressed, renamed", running: diffBase,
			next: edit(t, diffBase,
				"  [[vip.backend]]\n  name = \"be0\"\n  address = \"198.18.1.11:7000\"\n", "",
				"address = \"198.18.1.12:7000\"", "address = \"198.18.1.12:7000\"\n  weight = 50",
				"  [[vip.backend]]\n  address = \"198.18.1.13:7000\"\n", "  [[vip.backend]]\n  name = \"be2\"\n  address = \"198.18.1.13:7000\"\n  [[vip.backend]]\n  name = \"be3\"\n  address = \"198.18.1.14:7000\"\n",
				"address = \"198.18.1.12:53\"", "address = \"198.18.1.15:53\""),
			want: []string{
				"~vip a ~backend be1 weight 100->50 new_flows",
				"~vip a ~backend be2 name (none)->\"be2\" new_flows",
				"~vip a +backend be3 new_flows",
				"~vip a -backend be0 new_flows",
				"~vip u ~backend d1 address 198.18.1.12:53->198.18.1.15:53 now",
			},
			notes: []string{
				`~ vip "a" tcp/198.18.2.10:80`,
				`    ~ backend "be1" 198.18.1.12:7000: weight 100 -> 50 (new connections only)`,
				`    + backend "be3" 198.18.1.14:7000 weight 100 (new connections only)`,
				`    - backend "be0" 198.18.1.11:7000 (no new connections; its established connections continue until they end)`,
				"a new backend to l4lb", "the old one leaves: its sessions move to other backends on their next datagram",
				"reload: 0 VIPs to add, 0 to remove, 2 to change",
			},
		},
		{
			name: "backend caps change for new flows", running: diffBase,
			next: edit(t, diffBase, "address = \"198.18.1.11:7000\"", "address = \"198.18.1.11:7000\"\n  max_conns = 5",
				"address = \"198.18.1.11:53\"", "address = \"198.18.1.11:53\"\n  max_sessions = 9"),
			want: []string{"~vip a ~backend be0 max_conns 0->5 new_flows", "~vip u ~backend d0 max_sessions 0->9 new_flows"},
		},
		{
			name: "weight 0 drains", running: diffBase, next: edit(t, diffBase, "address = \"198.18.1.11:7000\"", "address = \"198.18.1.11:7000\"\n  weight = 0",
				"address = \"198.18.1.11:53\"", "address = \"198.18.1.11:53\"\n  weight = 0"),
			want:  []string{"~vip a ~backend be0 weight 100->0 new_flows", "~vip u ~backend d0 weight 100->0 now"},
			notes: []string{"drain: no new connections; established ones continue", "drain: its sessions move to other backends on their next datagram"},
		},
		{
			name: "global settings: at once or at the next restart", running: diffBase,
			next: edit(t, diffBase, `drain_timeout = "3s"`, "drain_timeout = \"3s\"\nlog_level = \"debug\"\npipe_size = 65536\nworkers = 2\nmetrics_listen = \"127.0.0.1:9370\"\nmax_pipes = 10\nbusy_poll = \"50us\""),
			want: []string{"~ global.log_level info->debug now", "~ global.metrics_listen off->127.0.0.1:9370 restart",
				"~ global.pipe_size 1048576->65536 restart", "~ global.max_pipes 0->10 now", "~ global.workers 0->2 restart", "~ global.busy_poll 0s->50µs now"},
			notes: []string{"~ global.pipe_size: 1048576 -> 65536 (needs a restart: a reload keeps the running value)", "6 global settings; 3 only by a restart"},
		},
		{
			name: "xdp keys need a restart once the program runs", running: diffXDPBase,
			next: edit(t, diffXDPBase, `interface = "veth0"`, "interface = \"veth0\"\nattach = \"generic\"\nweight_refresh = \"1s\""),
			want: []string{"~ xdp.attach driver->generic restart", "~ xdp.weight_refresh 5s->1s now"},
		},
		{
			name: "xdp keys apply while no program runs", running: strings.Replace(diffXDPBase, `mode = "xdp"`, `mode = "proxy"`, 1),
			next: strings.Replace(edit(t, diffXDPBase, `interface = "veth0"`, "interface = \"veth0\"\nattach = \"generic\""), `mode = "xdp"`, `mode = "proxy"`, 1),
			want: []string{"~ xdp.attach driver->generic now"},
		},
		{
			name: "xdp keys of a program loaded by an earlier config", opts: config.DiffOptions{XDPLoaded: true},
			running: strings.Replace(diffXDPBase, `mode = "xdp"`, `mode = "proxy"`, 1),
			next:    strings.Replace(edit(t, diffXDPBase, `interface = "veth0"`, "interface = \"veth0\"\nattach = \"generic\""), `mode = "xdp"`, `mode = "proxy"`, 1),
			want:    []string{"~ xdp.attach driver->generic restart"},
		},
		{
			name: "xdp interfaces: a reload attaches and detaches", running: diffXDPBase,
			next:  edit(t, diffXDPBase, `interface = "veth0"`, `interface = ["veth1", "veth2"]`),
			want:  []string{"~ xdp.interface veth0->veth1, veth2 now"},
			notes: []string{"interfaces added are attached, those removed detached; the others keep forwarding"},
		},
		{
			name: "the [xdp] table removed stays loaded", running: diffXDPBase,
			next: diffBase, // no xdp VIP either
			want: []string{"~ global.drain_timeout 30s->3s now", "~ xdp interface veth0, attach driver->(none) restart", "+vip a tcp/198.18.2.10:80", "+vip u udp/198.18.2.10:53",
				"-vip x udp/198.18.2.20:53", "-vip p tcp/198.18.2.20:80"},
			notes: []string{"new flows are dropped; established flows are forwarded until they end, for up to 3s (drain_timeout)"},
		},
		{
			name: "a mode change restarts the VIP", running: diffXDPBase,
			next: edit(t, diffXDPBase, `mode = "xdp"`, `mode = "proxy"`, `name = "x1"`, "name = \"x1\"\n  weight = 5"),
			want: []string{"~vip x mode xdp->proxy vip_restart", "~vip x algorithm maglev->round_robin vip_restart",
				"~vip x ~backend x1 weight 100->5 vip_restart"},
			notes: []string{"the VIP restarts on the other plane: its established flows stay on the old one until they end or drain_timeout", "every backend starts new (health unknown)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			running, next := mustParse(t, tc.running), mustParse(t, tc.next)
			got := config.Diff(running, next, tc.opts)
			if f := flat(got); !slices.Equal(f, tc.want) {
				t.Errorf("changes:\n  %s\nwant:\n  %s", strings.Join(f, "\n  "), strings.Join(tc.want, "\n  "))
			}
			text := got.Text()
			for _, n := range tc.notes {
				if !strings.Contains(text, n) {
					t.Errorf("text lacks %q:\n%s", n, text)
				}
			}
			if got.Empty() != (len(tc.want) == 0) {
				t.Errorf("Empty() = %v with %d changes", got.Empty(), len(tc.want))
			}
		})
	}
}

// The running config comes from the admin API's TOML: a config printed
// by Format and parsed back differs from its file in nothing.
func TestDiffOfFormattedConfigIsEmpty(t *testing.T) {
	for _, path := range []string{"../examples/l4lb.toml"} {
		c, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		running := mustParse(t, string(config.Format(c, config.FormatOptions{})))
		if d := config.Diff(running, c, config.DiffOptions{}); !d.Empty() {
			t.Errorf("%s against its own Format:\n%s", path, d.Text())
		}
	}
}

func TestRestartOnly(t *testing.T) {
	running := mustParse(t, diffXDPBase)
	next := mustParse(t, edit(t, diffXDPBase, `admin_socket = "off"`, "admin_socket = \"off\"\nlog_format = \"json\"\nlog_level = \"warn\"",
		`interface = "veth0"`, "interface = \"veth0\"\nattach = \"generic\"\nconntrack_size = 2048"))
	want := []string{"global.log_format", "xdp.attach", "xdp.conntrack_size"}
	if got := config.RestartOnly(running, next); !slices.Equal(got, want) {
		t.Fatalf("RestartOnly = %v, want %v", got, want)
	}
	// PlanReload: the same keys, and the running values stay in force.
	inForce, restart, problems := config.PlanReload(running, next)
	if len(problems) != 0 || !slices.Equal(restart, want) || inForce.XDP.Attach != running.XDP.Attach || inForce.Global.LogLevel != next.Global.LogLevel {
		t.Fatalf("PlanReload: problems %v, restart %v, in force %+v", problems, restart, inForce.Global)
	}
}

// TestPlanReloadRefuses: a file a reload would fail on is refused whole.
func TestPlanReloadRefuses(t *testing.T) {
	running := mustParse(t, vipTable("a", "tcp", "198.18.0.1:80", "198.18.1.1:80"))
	moved := mustParse(t, vipTable("b", "tcp", "0.0.0.0:80", "198.18.1.1:80"))
	if inForce, restart, problems := config.PlanReload(running, moved); len(problems) != 1 || inForce != nil || restart != nil {
		t.Fatalf("moving to a wildcard in one reload: in force %v, restart %v, problems %v", inForce, restart, problems)
	}
}
