// The command: write the page to a file or to standard output.

package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/docpage"
)

func main() {
	out := flag.String("o", "", "write the page to this file (default: standard output)")
	format := flag.String("format", "markdown", "markdown (docs/configuration.md) or man (l4lb.toml(5))")
	flag.Parse()
	render := markdown
	if *format == "man" {
		render = man
	}
	if err := docpage.Write(*out, render(config.Reference())); err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}
