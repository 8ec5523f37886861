// The command: write the page to a file or to standard output.

package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/l4lb/l4lb/config"
)

func main() {
	out := flag.String("o", "", "write the page to this file (default: standard output)")
	flag.Parse()
	page := markdown(config.Reference())
	var err error
	if *out == "" {
		_, err = os.Stdout.Write(page)
	} else {
		err = os.WriteFile(*out, page, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}
