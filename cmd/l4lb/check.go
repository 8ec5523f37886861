// `l4lb check`: validate a config file like `nginx -t` / `haproxy -c`.
package main

import (
	"fmt"
	"io"

	"github.com/l4lb/l4lb/config"
)

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	f := newFlags("check", stdout, stderr)
	configFlag := f.String("config", "", "config file (default "+defaultConfigPath+"; or give it as the argument)")
	if code, ok := f.parse(args); !ok {
		return code
	}
	path, ok := f.configPath(*configFlag)
	if !ok {
		return 2
	}
	cfg, warnings, err := loadChecked(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	problems, restart := runningDiff(cfg)
	warnings = append(warnings, restart...)
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if len(problems) > 0 {
		fmt.Fprintln(stderr, &config.Error{Problems: problems})
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok, %d VIPs, %d warnings\n", path, len(cfg.VIPs), len(warnings))
	return 0
}

// runningDiff compares cfg with the config of an l4lb running on cfg's
// admin socket: problems would make a reload to cfg fail, warnings are
// settings a reload cannot change. No running l4lb (or no socket) means
// nothing to compare.
func runningDiff(cfg *config.Config) (problems, warnings []config.Problem) {
	if cfg.Global.AdminSocket == "" {
		return nil, nil
	}
	body, err := adminGet(cfg.Global.AdminSocket, "/config")
	if err != nil {
		return nil, nil
	}
	running, err := config.Parse("running config", body)
	if err != nil {
		return nil, []config.Problem{{File: cfg.Path, Msg: fmt.Sprintf("cannot read the running l4lb's config to compare: %v", err)}}
	}
	for _, key := range restartOnly(running, cfg) {
		warnings = append(warnings, config.Problem{File: cfg.Path, Key: key,
			Msg: "differs from the running l4lb's; a reload keeps the running value, a restart applies it"})
	}
	return config.CheckReload(running, cfg), warnings
}
