// `l4lb run`: the daemon (internal/daemon).

package main

import (
	"io"

	"github.com/l4lb/l4lb/internal/daemon"
)

func cmdRun(args []string, stdout, stderr io.Writer) int {
	f := newFlags("run", stdout, stderr)
	configFlag := f.String("config", "", "config file (default "+defaultConfigPath+"; or give it as the argument)")
	logFormat := f.String("log-format", "", "console or json (overrides the config file)")
	if code, ok := f.parse(args); !ok {
		return code
	}
	path, ok := f.configPath(*configFlag)
	if !ok {
		return 2
	}
	// The daemon reports why it could not start itself.
	if err := daemon.Run(daemon.Options{Path: path, LogFormat: *logFormat, Stderr: stderr, Build: readBuildInfo()}); err != nil {
		return 1
	}
	return 0
}
