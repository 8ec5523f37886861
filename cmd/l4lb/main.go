package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one `l4lb` subcommand.
type command struct {
	name     string
	synopsis string // one line for `l4lb help`
	usage    string // the flags line, such as "[--config] FILE"
	help     string // what `l4lb help NAME` and `l4lb NAME --help` add
	run      func(args []string, stdout, stderr io.Writer) int
}

// commands lists every subcommand, in the order `l4lb help` shows them.
func commands() []command {
	return []command{
		{"run", "serve the VIPs of a config file", "[--config] FILE [--log-format console|json]", runHelp, cmdRun},
		{"check", "validate a config file; --diff: what a reload with it would change", "[--config] FILE [--diff [--json] [--socket PATH]]", checkHelp, cmdCheck},
		{"status", "show what a running l4lb serves", "[--socket PATH | --config FILE] [--json] [--show-config] [--capabilities]", statusHelp, cmdStatus},
		{"drain", "stop new flows to a backend; established flows continue", "[--socket PATH | --config FILE] [--reason TEXT] [--force] [--json] VIP BACKEND", drainHelp, cmdOverride("drain")},
		{"disable", "stop new flows to a backend and reset its established flows", "[--socket PATH | --config FILE] [--reason TEXT] [--force] [--json] VIP BACKEND", disableHelp, cmdOverride("disable")},
		{"enable", "clear a drain or disable: health and the file decide again", "[--socket PATH | --config FILE] [--reason TEXT] [--json] VIP BACKEND", enableHelp, cmdOverride("enable")},
		{"backend", "add, set the weight or cap of, or remove a running VIP's backend, on top of the file", "add|set|remove [--socket PATH | --config FILE] [--json] VIP ADDRESS|BACKEND [--name N --weight N --max-conns N --backup | --reset | --timeout 30s --force]", backendHelp, cmdBackend},
		{"reload", "make a running l4lb reload its config file and print the result", "[--socket PATH | --config FILE] [--json]", reloadHelp, cmdReload},
		{"explain", "say which backend a client's flow has or would get, and why", "[--socket PATH | --config FILE] [--json] VIP CLIENT_IP[:PORT]", explainHelp, cmdExplain},
		{"rebalance", "close connections on overloaded backends, gradually, until each holds its share", "[--socket PATH | --config FILE] [--rate N] [--reset] [--wait | --dry-run | --stop] [--json] VIP", rebalanceHelp, cmdRebalance},
		{"upgrade", "hand a running l4lb's sockets and connections to a new binary", "[--socket PATH | --config FILE] [--binary PATH] [--timeout 1m] [--json]", upgradeHelp, cmdUpgrade},
		{"xdp", "take off the XDP program a stopped l4lb left pinned; capture an xdp VIP's packets", "detach [--config] FILE | capture [--socket PATH | --config FILE] [--backend B] [--count N] [--rate R] [--timeout D] --write FILE VIP", xdpHelp, cmdXDP},
		{"decap", "strip the balancer's IPIP header on a backend (xdp VIPs)", "attach|detach|status --iface IF [--mode driver|generic] [--gue-port PORT]", decapHelp, cmdDecap},
		{"completion", "print a bash or zsh completion script", "bash|zsh", completionHelp, cmdCompletion},
		{"version", "print version, commit, Go version and build date", "", versionHelp, cmdVersion},
		{"help", "print help for a command", "[COMMAND]", "", nil},
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	name := args[0]
	switch name {
	case "help", "--help", "-h":
		return cmdHelp(args[1:], stdout, stderr)
	case "--version", "-v":
		name = "version"
	case "__complete": // the completion scripts' helper; not in the table
		return cmdComplete(args[1:], stdout, stderr)
	case "__man": // l4lb(8) for `make docs`; not in the table
		return cmdMan(args[1:], stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == name && c.run != nil {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "l4lb: unknown command %q\n\n%s", args[0], usage())
	return 2
}

// commandNamed returns the command called name.
func commandNamed(name string) command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return command{name: name}
}

// usage is the top-level help.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: l4lb <command> [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.synopsis)
	}
	b.WriteString("\n`l4lb help COMMAND` or `l4lb COMMAND --help` describes one command.\n" +
		"A config file is the argument or --config FILE (default " + defaultConfigPath + ").\n" +
		exitStatusHelp)
	return b.String()
}

// exitStatusHelp is what every command's exit status means.
const exitStatusHelp = "Exit status: 0 ok, 1 failed (a bad config, no l4lb answering), 2 a word l4lb does not expect.\n"

// cmdHelp prints the top-level help, or one command's.
func cmdHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage())
		return 0
	}
	if len(args) > 1 {
		fmt.Fprintf(stderr, "l4lb help: one command at a time, not %q\n", strings.Join(args, " "))
		return 2
	}
	for _, c := range commands() {
		if c.name == args[0] {
			fmt.Fprint(stdout, commandHelp(c))
			return 0
		}
	}
	fmt.Fprintf(stderr, "l4lb help: unknown command %q\n\n%s", args[0], usage())
	return 2
}

// commandHelp is one command's help text without its flag list.
func commandHelp(c command) string {
	s := fmt.Sprintf("%s\n\n%s.\n", usageLine(c), upperFirst(c.synopsis))
	if c.help != "" {
		s += "\n" + c.help
	}
	return s
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

const runHelp = `Runs in the foreground as root and logs to stderr: console, or JSON with
--log-format json (or log_format in [global]). At start it makes every
check that "l4lb check" makes; each VIP address must be on an interface,
unless the VIP sets freebind = true (IP_FREEBIND, for an address that
keepalived or a BGP speaker adds later). A backend connect that lands on
l4lb's own listener counts as a failed backend. The admin API ("l4lb
status") listens on admin_socket (root only); Prometheus metrics on
metrics_listen when set.

` + signalsHelp + `
Settings that need a restart (a reload logs a warning and keeps the running
value): [global] admin_socket, metrics_listen, pipe_size, workers and
log_format; [xdp] interface, attach, pin_path and conntrack_size, once the
XDP program is loaded. Everything else takes effect on reload.

Under systemd (Type=notify, see scripts/l4lb.service) it sends READY=1 once
every VIP listens, RELOADING=1 while a SIGHUP is applied (so systemctl
reload returns when the new config is live) and STOPPING=1 when the drain
starts. FILE defaults to /etc/l4lb/l4lb.toml.
`

// signalsHelp: what each signal makes l4lb run do (l4lb help run, and
// SIGNALS in l4lb(8)).
const signalsHelp = `Signals:
  SIGHUP           reload the file. A file that does not parse or validate is
                   refused (logged) and the running config stays. A good file
                   is applied as a diff: new VIPs start; removed VIPs stop
                   accepting and drain for drain_timeout; changed settings and
                   backends apply to new connections while established ones
                   continue; unchanged VIPs keep their listening sockets (no
                   refused connect during a reload). Backends keep their live
                   counts (they are known by name, or by address when
                   unnamed). "l4lb check --diff FILE" shows what a reload
                   would change, and when each change takes effect.
  SIGUSR2          upgrade: start the binary at the path this one was started
                   from and hand it the listeners, the established connections
                   and the UDP sessions (see "l4lb help upgrade").
  SIGTERM, SIGINT  close the listeners, let connections finish for
                   drain_timeout, reset what is left and exit 0. A second
                   signal cuts the drain short.
Signals that arrive while l4lb is still starting are acted on once it has
started.
`

const checkHelp = `Validates FILE like "nginx -t": prints every problem as file:line and
exits 1, or prints "FILE: ok, N VIPs, M warnings" and exits 0. FILE
defaults to /etc/l4lb/l4lb.toml.

Warnings (legal but probably wrong) go to stderr and do not change the exit
status: a VIP address no interface has (unless freebind = true), a VIP whose
backends all have weight 0, access lists that let no client in, PROXY
headers trusted from anywhere or from allowed clients, defer_accept or
first_byte_timeout with a server-first check, values far beyond what the
host has (workers, max_pipes x pipe_size, max_sessions) or anyone waits for,
and, when an l4lb answers on the file's admin_socket (or --socket), settings
that differ from it but need a restart; --diff prints the same ones. "l4lb
run" logs them at start, and a reload only those that are new. check also
refuses what would fail or misbehave at start: listeners that cannot bind
together (a wildcard and a specific address on one port and protocol, a TCP
VIP on the metrics port), a backend that leads back into l4lb (the VIP
itself, a loopback or local address of a wildcard VIP, a loop through other
VIPs), an admin_socket path that holds anything but a socket (l4lb never
removes a file or directory there), and a file that a reload of the running
l4lb would refuse.

--diff compares FILE with the config of the running l4lb (asked on --socket
PATH, else on the file's admin_socket) and prints what a reload with FILE
would change, before anyone sends SIGHUP:

  + vip "pg" tcp/198.18.0.10:5432: proxy, least_conn, 2 backends; starts
  - vip "old" tcp/198.18.0.12:80: stops accepting; its connections have 30s
    (drain_timeout) to finish, then are reset
  ~ vip "redis" tcp/198.18.0.11:6379
      ~ algorithm: maglev -> least_conn (new connections only)
      ~ backend "r1" 198.18.1.21:6379: weight 100 -> 0 (new connections only;
        drain: no new connections; established ones continue)
      + backend "r4" 198.18.1.24:6379 weight 100 (new connections only)
      - backend "r2" 198.18.1.22:6379 (no new connections; its established
        connections continue until they end)
  ~ global.pipe_size: 1048576 -> 2097152 (needs a restart: a reload keeps
    the running value)
  reload: 1 VIP to add, 1 to remove, 1 to change; 1 global setting; 1 only
  by a restart

Each change says when it takes effect: at once (flows in progress too); for
new connections, sessions or flows only (established ones keep what they
started with); the VIP restarts on the other data plane (a mode change:
established flows stay on the old one until they end or drain_timeout); when the VIP's socket is next opened (freebind); or only by a
restart of l4lb. A VIP is known by its listen address and protocol, a
backend by its name (else its address): a new address is a new VIP, a
backend with a new address or name is a new backend. "no changes" when a
reload would change nothing. --json prints the same as JSON, with "changed"
true or false. Health check passwords are not compared: the running l4lb
does not show them.

Exit status: 0 the file is valid (with --diff: whether or not it changes
anything); 1 it is not, a reload of the running l4lb would refuse it, or
(with --diff) no l4lb answers on the socket; 2 a flag or word l4lb does not
expect.
`

const statusHelp = `Asks the admin socket of a running l4lb (root only; default
/run/l4lb/admin.sock, or the admin_socket of --config FILE: --config always
names a file). --json prints the raw answer; --show-config prints the
configuration in force, every default resolved, as TOML (passwords
redacted), and with --json as JSON with the same keys. A --config without a
FILE is the old spelling of --show-config: it still works, and says so on
stderr.

The first lines name the process (version, commit, Go version, pid, uptime,
config file), its capabilities (by name when few are left, as after
drop_capabilities; else their number, and --capabilities lists them all)
and the last reload (when, and whether it was applied or refused with the
first problem); then the splice pipe pool; the event
loops ("workers: N event loops, TCP connections on each: ..."; one loop per
CPU, or workers in [global]; a loop that holds 4 more connections than an
idle one passes new ones to it); the XDP program when loaded, with its pass
and drop counters by reason; and one block per VIP:

  VIP name proto/listen algorithm eligible E/N active A accepted C no-backend X
    E of N backends take new flows; A connections or UDP sessions in
    progress; C accepted since start; X clients closed (TCP) or datagrams
    dropped (UDP) because no backend could be reached.
    DRAINING marks a VIP a reload removed, listed until its last
    connection ends.
  events: (TCP, when nonzero) accept errors, idle-closed, local resource
    errors, pipeless copies, limit waits; UDP: datagrams, replies, dropped,
    truncated, sessions refused, moved; xdp: packets, bytes, new flows,
    drops, live flows.

  BACKEND, ADDRESS  name (or address) and address
  WEIGHT            configured weight (0 = no new flows)
  HEALTH            up, down, unknown (not checked yet; eligible),
                    unknown/trial (health none: a passive mark expired;
                    eligible, and the next connect or reply decides: up, or
                    down again at once), removed (a reload took it out;
                    listed while it still holds flows)
  LIVE, FLOWS       flows in progress; flows established since start
  FAILS             connects refused or timed out
  IN, OUT           bytes client to backend, backend to client
  RTT               handshake round-trip estimate (EWMA of probes and, with
                    least_time, of proxied connects)
  LAST CHECK        the last probe's result, and why it is down
`

const versionHelp = `Prints the version, the commit it was built from (+dirty when the tree had
uncommitted changes), the Go version and the build date. "l4lb --version"
and "l4lb -v" do the same.
`

const overrideCommon = `BACKEND is the backend's name, its address:port, or its IP when only one
backend of the VIP has it. The override is kept across reloads while the file
leaves the backend as it was (same name, address and weight); a reload that
changes or removes the backend clears it (logged). It does not survive a
restart. ` + "`l4lb status`" + ` shows it in the HEALTH column (up/DRAIN,
up/DISABLE) with who set it, when, and the --reason.
`

const drainHelp = `Drain: the backend gets no new flows; its established TCP connections,
UDP sessions and affinity pins continue until they end (like HAProxy's
drain state; in xdp mode the conntrack keeps forwarding them). Watch LIVE in
` + "`l4lb status`" + ` fall to 0 before maintenance. Unlike weight = 0 in the
file, which moves UDP sessions and affinity pins on their next packet.
` + guardHelp + overrideCommon

const disableHelp = `Disable: the backend gets no new flows and its established TCP connections
are reset at once (an RST to both sides, like on_down = reset); in xdp mode
its conntrack entries are deleted, so their next packets hash to another
backend, which resets them; UDP sessions move on their next datagram.
` + guardHelp + overrideCommon

const guardHelp = `
Refused (exit 1, nothing changed) when it would leave the VIP (a read pool:
a VIP whose checks want role = "replica") with no eligible backend, or when
the backends left cannot take the backend's live flows on top of their own:
their room is max_conns (max_sessions) minus live when every one has a cap,
else their peak (the most each held at once: peak_flows in status --json;
xdp VIPs, which have no caps, count the conntrack's flows) minus live. The
message gives the numbers; --force sets it anyway (logged).
` + "`l4lb check --diff`" + ` warns the same for a reload that removes backends
or sets their weight to 0.

`

const enableHelp = `Enable clears a drain or disable: the backend takes new flows again when
its health and its weight in the file allow. A backend with neither is
left as it is ("nothing changed"), as is a drain or disable asked for
twice: the first one and who set it stay.
` + overrideCommon

const upgradeHelp = `Asks the running l4lb to start a new binary (--binary, or the path the
running one was started from, read from disk again) with the same arguments,
like SIGUSR2. The new process loads its config, takes the old one's listening
sockets (no connect is refused: both share the kernel's listen queue), says
ready; the old one stops accepting and hands over its established TCP
connections and UDP sessions, then exits. If the new binary fails (it exits,
refuses its config, or is not ready within --timeout, one minute by
default), the old one keeps serving and this command prints why and exits 1.
`

const reloadHelp = `Asks the running l4lb to read its config file again, like SIGHUP, and prints
the result: the number of VIPs, warnings, and settings that need a restart.
A refused file prints its problems (file:line, as l4lb check does) and exits
1; the running config stays. Reloads from SIGHUP and from this command run
one at a time.
`
