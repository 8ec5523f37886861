// `l4lb check`: validate a config file like `nginx -t` / `haproxy -c`.
package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/l4lb/l4lb/config"
)

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "/etc/l4lb/l4lb.toml", "config file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok, %d VIPs\n", *path, len(cfg.VIPs))
	return 0
}
