// Command l4lb is a Layer-4 TCP/UDP load balancer: `l4lb run` serves the
// VIPs of a TOML file, `l4lb check` validates one, `l4lb status` asks a
// running instance what it serves.
package main

import (
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: l4lb <command> [flags]

commands:
  run     --config FILE   serve the VIPs of FILE (SIGHUP reloads, SIGTERM drains and exits)
  check   --config FILE   validate FILE; exit 0 if it is good, 1 with every problem if not
  status  [--socket PATH | --config FILE] [--json]
                          show VIPs and backends of a running l4lb
  version                 print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stderr)
	case "check":
		return cmdCheck(args[1:], stdout, stderr)
	case "status":
		return cmdStatus(args[1:], stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "l4lb", version)
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "l4lb: unknown command %q\n\n%s", args[0], usage)
	return 2
}
