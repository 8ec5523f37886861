// `l4lb version` and the build information that status and metrics report.

package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/l4lb/l4lb/internal/daemon"
)

// Set at build time by the Makefile: -ldflags "-X main.version=... -X
// main.commit=... -X main.buildDate=..." (GOFLAGS may turn the toolchain's
// own VCS stamp off).
var (
	version   = "dev"
	commit    = ""
	buildDate = ""
)

// readBuildInfo combines the linker-set values with what the Go toolchain
// recorded (the VCS revision and time when built from a git checkout).
func readBuildInfo() daemon.Build {
	bi := daemon.Build{Version: version, GoVersion: runtime.Version(), BuildDate: buildDate, Commit: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if commit != "" {
		bi.Commit = commit
	}
	if !ok || commit != "" && buildDate != "" {
		return bi
	}
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if commit == "" {
				bi.Commit = s.Value
			}
		case "vcs.time":
			if bi.BuildDate == "" {
				bi.BuildDate = s.Value + " (commit time)"
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && commit == "" {
		bi.Commit += "+dirty"
	}
	if bi.BuildDate == "" {
		bi.BuildDate = "unknown"
	}
	return bi
}

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	f := newFlags("version", stdout, stderr)
	if code, ok := f.parseNoArgs(args); !ok {
		return code
	}
	bi := readBuildInfo()
	fmt.Fprintf(stdout, "l4lb %s\ncommit:  %s\ngo:      %s %s/%s\nbuilt:   %s\n",
		bi.Version, bi.Commit, bi.GoVersion, runtime.GOOS, runtime.GOARCH, bi.BuildDate)
	return 0
}
