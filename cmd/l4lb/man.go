// The man page l4lb(8), from the command table: each command's usage,
// help and flags (its own flag set), the signals, the exit status. `make
// docs` writes it with the hidden `l4lb __man`; TestManPageIsCurrent holds
// docs/man/l4lb.8 to it.

package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/l4lb/l4lb/internal/docpage"
)

const manDescription = `l4lb is a Layer-4 TCP/UDP load balancer for Linux. In proxy mode it
accepts connections and UDP datagrams on each VIP's address and moves the
bytes to a backend it picks (round robin, least connections, least
handshake time, power of two choices, source hash or Maglev), with health
checks, drains and backups. In xdp mode an XDP program steers the packets of
a VIP in the NIC driver and the backends answer the clients directly. One
TOML file, l4lb.toml(5), describes the VIPs; ` + "`l4lb run`" + ` serves them, and the
other commands validate a file or ask a running l4lb on its admin socket.`

const manFiles = `/etc/l4lb/l4lb.toml
  The configuration (l4lb.toml(5)); the package marks it a conffile.
/run/l4lb/admin.sock
  The admin socket (admin_socket in [global]) the commands ask.
/lib/systemd/system/l4lb.service
  The systemd unit: Type=notify; reload sends SIGHUP, stop SIGTERM.
/usr/share/doc/l4lb/examples/
  Commented configurations, one per common job.
/usr/share/bash-completion/completions/l4lb, /usr/share/zsh/vendor-completions/_l4lb
  Shell completion (l4lb completion bash|zsh).`

// cmdMan is the hidden `l4lb __man`: it prints l4lb(8).
func cmdMan(_ []string, stdout, _ io.Writer) int {
	stdout.Write(manPage())
	return 0
}

// manPage renders l4lb(8).
func manPage() []byte {
	m := docpage.NewMan("l4lb", "8", "System Administration", "Layer-4 TCP/UDP load balancer")
	m.Section("SYNOPSIS")
	m.Raw(".ad l\n")
	for _, c := range commands() {
		manSynopsis(m, c)
	}
	m.Raw(".ad b\n")
	m.Section("DESCRIPTION")
	m.Paragraph(manDescription)
	m.Section("COMMANDS")
	for _, c := range commands() {
		m.Subsection("l4lb " + c.name)
		m.Raw(".ad l\n")
		manSynopsis(m, c)
		m.Raw(".ad b\n")
		m.Paragraph(upperFirst(c.synopsis) + ".")
		if c.help != "" {
			m.Help(c.help)
		}
		vs := verbs(c)
		if len(vs) == 0 {
			vs = []string{""}
		}
		seen := map[string]bool{}
		for _, v := range vs {
			for _, fl := range commandFlags(c, v) {
				if seen[fl.Name] {
					continue
				}
				seen[fl.Name] = true
				m.Tagged(flagTag(c, v, fl.Name), flagText(fl.Usage, fl.DefValue))
			}
		}
	}
	m.Section("SIGNALS")
	manSignals(m, signalsHelp)
	m.Section("EXIT STATUS")
	m.Paragraph(strings.TrimPrefix(exitStatusHelp, "Exit status: "))
	m.Section("FILES")
	lines := strings.Split(manFiles, "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		m.Tagged(lines[i], strings.TrimSpace(lines[i+1]))
	}
	m.Section("SEE ALSO")
	m.Raw(".BR l4lb.toml (5),\n.BR systemctl (1),\n.BR systemd.service (5)\n")
	m.Paragraph("/usr/share/doc/l4lb/ holds the README and the guides (operations, configuration, XDP, BGP).")
	return m.Bytes()
}

// manSynopsis writes c's usage line, one line per form ("xdp detach ...",
// "xdp capture ...").
func manSynopsis(m *docpage.Man, c command) {
	for _, form := range splitTopLevel(c.usage) {
		m.Raw(".PP\n.B l4lb " + docpage.Escape(c.name) + "\n")
		if form != "" {
			m.Raw(docpage.Escape(form) + "\n")
		}
	}
}

// flagTag is "--name VALUE", the value as the usage line names it.
func flagTag(c command, verb, name string) string {
	if v := formFor(c, verb).flags[name]; v != "" {
		return "--" + name + " " + v
	}
	return "--" + name
}

// flagText is a flag's usage with its default, as --help prints it.
func flagText(usage, def string) string {
	switch def {
	case "", "false", "0", "0s":
		return usage
	}
	return fmt.Sprintf("%s (default %s)", usage, def)
}

// manSignals renders the signals table of the help ("  SIGHUP   text",
// continued indented) as tagged paragraphs, the lines after it as text.
func manSignals(m *docpage.Man, help string) {
	var tag, text string
	flush := func() {
		if tag != "" {
			m.Tagged(tag, text)
		}
		tag, text = "", ""
	}
	var after []string
	for _, l := range strings.Split(strings.TrimSpace(help), "\n")[1:] { // after "Signals:"
		switch {
		case strings.HasPrefix(l, "  S"):
			flush()
			name, rest, _ := strings.Cut(strings.TrimSpace(l), "  ")
			tag, text = name, strings.TrimSpace(rest)
		case strings.HasPrefix(l, " "):
			text += "\n" + strings.TrimSpace(l)
		default:
			after = append(after, l)
		}
	}
	flush()
	if len(after) > 0 {
		m.Paragraph(strings.Join(after, "\n"))
	}
}
