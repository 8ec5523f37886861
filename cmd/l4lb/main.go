// Command l4lb is a Layer-4 TCP/UDP load balancer: `l4lb run` serves the
// VIPs of a TOML file, `l4lb check` validates one, `l4lb status` asks a
// running instance what it serves.
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
		{"check", "validate a config file (exit 0 ok, 1 problems)", "[--config] FILE", checkHelp, cmdCheck},
		{"status", "show what a running l4lb serves", "[--socket PATH | --config FILE] [--json | --show-config]", statusHelp, cmdStatus},
		{"drain", "stop new flows to a backend; established flows continue", "[--socket PATH | --config FILE] [--reason TEXT] VIP BACKEND", drainHelp, cmdOverride("drain")},
		{"disable", "stop new flows to a backend and reset its established flows", "[--socket PATH | --config FILE] [--reason TEXT] VIP BACKEND", disableHelp, cmdOverride("disable")},
		{"enable", "clear a drain or disable: health and the file decide again", "[--socket PATH | --config FILE] VIP BACKEND", enableHelp, cmdOverride("enable")},
		{"reload", "make a running l4lb reload its config file and print the result", "[--socket PATH | --config FILE] [--json]", reloadHelp, cmdReload},
		{"upgrade", "hand a running l4lb's sockets and connections to a new binary", "[--socket PATH | --config FILE] [--binary PATH] [--timeout 1m] [--json]", upgradeHelp, cmdUpgrade},
		{"xdp", "take off the XDP program a stopped l4lb left pinned", "detach [--config] FILE", xdpHelp, cmdXDP},
		{"decap", "strip the balancer's IPIP header on a backend (xdp VIPs)", "attach|detach|status --iface IF [--mode driver|generic]", decapHelp, cmdDecap},
		{"version", "print version, commit, Go version and build date", "", "", cmdVersion},
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
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.synopsis)
	}
	b.WriteString("\n`l4lb help COMMAND` or `l4lb COMMAND --help` describes one command.\n")
	return b.String()
}

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
	s := fmt.Sprintf("usage: l4lb %s %s\n\n%s.\n", c.name, c.usage, upperFirst(c.synopsis))
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

const runHelp = `Runs in the foreground as root, logging to stderr. SIGHUP reloads the file
(a bad file is refused and the running config stays); SIGUSR2 upgrades to
the binary at the path this one was started from (see l4lb help upgrade);
SIGTERM or SIGINT stops accepting, drains for drain_timeout and exits 0; a
second signal cuts the drain short. FILE defaults to /etc/l4lb/l4lb.toml.
`

const checkHelp = `Prints every problem as file:line and exits 1, or prints "ok" and exits 0.
Warnings (legal but probably wrong: a VIP address no interface has, a VIP
whose weights are all 0, restart-only settings that differ from a running
l4lb) are printed too and do not change the exit code. FILE defaults to
/etc/l4lb/l4lb.toml.
`

const statusHelp = `Asks the admin socket of a running l4lb (default /run/l4lb/admin.sock, or
the admin_socket of --config FILE). --json prints the raw answer;
--show-config (or --config with no FILE) prints the configuration in force,
resolved, as TOML.
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
` + overrideCommon

const disableHelp = `Disable: the backend gets no new flows and its established TCP connections
are reset at once (an RST to both sides, like on_down = reset); in xdp mode
its conntrack entries are deleted, so their next packets hash to another
backend, which resets them; UDP sessions move on their next datagram.
` + overrideCommon

const enableHelp = `Enable clears a drain or disable: the backend takes new flows again when
its health and its weight in the file allow.
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
