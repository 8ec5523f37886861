// `l4lb check`: validate a config file like `nginx -t` / `haproxy -c`, and
// with --diff show what a reload with it would change in the running l4lb.

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/daemon"
	"github.com/l4lb/l4lb/internal/names"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// checkNamesTimeout bounds the lookups of named backends in `l4lb check`.
const checkNamesTimeout = 5 * time.Second

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	f := newFlags("check", stdout, stderr)
	configFlag := f.String("config", "", "config file (default "+defaultConfigPath+"; or give it as the argument)")
	diff := f.Bool("diff", false, "also show what a reload with the file would change in the running l4lb (exit 1 if none answers)")
	sock := f.String("socket", "", "admin socket of the running l4lb to compare with (default: the file's admin_socket)")
	asJSON := f.Bool("json", false, "with --diff: print the changes as JSON")
	if code, ok := f.parse(args); !ok {
		return code
	}
	path, ok := f.configPath(*configFlag)
	if !ok {
		return 2
	}
	if *asJSON && !*diff {
		f.usageError("--json goes with --diff")
		return 2
	}
	cfg, warnings, err := daemon.LoadChecked(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	// Names are looked up, but one that does not resolve is a warning:
	// run starts without its backends, and the file is still right.
	warnings = append(warnings, names.Check(cfg, checkNamesTimeout)...)
	// What would stop the XDP program from starting here (pin path,
	// forwarding): run would fail, but the file is right.
	warnings = append(warnings, reconcile.CheckXDPHost(cfg)...)
	socket := *sock
	if socket == "" {
		socket = cfg.Global.AdminSocket
	}
	if *diff {
		return checkDiff(cfg, warnings, socket, *asJSON, stdout, stderr)
	}
	problems, restart := runningDiff(cfg, socket)
	warnings = append(warnings, restart...)
	printWarnings(stderr, warnings)
	if len(problems) > 0 {
		fmt.Fprintln(stderr, &config.Error{Problems: problems})
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok, %s, %s\n", path, config.Plural(len(cfg.VIPs), "VIP"), config.Plural(len(warnings), "warning"))
	return 0
}

func printWarnings(w io.Writer, warnings []config.Problem) {
	for _, p := range warnings {
		fmt.Fprintln(w, "warning:", p)
	}
}

// runningDiff compares cfg with the config of an l4lb running on sock:
// problems would make a reload to cfg fail, warnings are settings a
// reload cannot change. No running l4lb (or no socket) means nothing to
// compare.
func runningDiff(cfg *config.Config, sock string) (problems, warnings []config.Problem) {
	if sock == "" {
		return nil, nil
	}
	running, reached, err := runningConfig(sock)
	switch {
	case !reached:
		return nil, nil
	case err != nil:
		return nil, []config.Problem{{File: cfg.Path, Msg: fmt.Sprintf("cannot read the running l4lb's config to compare: %v", err)}}
	}
	return config.CheckReload(running, cfg), config.RestartWarnings(running, cfg)
}

// runningConfig asks the l4lb on sock for the config it runs; reached is
// false when none answers.
func runningConfig(sock string) (running *config.Config, reached bool, err error) {
	body, err := adminGet(sock, "/config")
	if err != nil {
		return nil, false, err
	}
	running, err = config.Parse("running config", body)
	return running, true, err
}

// diffReport is what `check --diff --json` prints.
type diffReport struct {
	File    string `json:"file"`
	Socket  string `json:"socket"`
	PID     int    `json:"pid,omitempty"`
	Changed bool   `json:"changed"`
	config.Changes
	// BackendChanges are the run-time backend changes on top of the file
	// that runs, and whether a reload with this file keeps each.
	BackendChanges []runTimeChange `json:"backend_changes,omitempty"`
}

// checkDiff prints what a reload of the l4lb on sock with cfg would
// change. It fails (exit 1) when no l4lb answers, or when the reload
// would be refused.
func checkDiff(cfg *config.Config, warnings []config.Problem, sock string, asJSON bool, stdout, stderr io.Writer) int {
	if sock == "" {
		fmt.Fprintf(stderr, "l4lb check --diff: %s has admin_socket = \"off\": give the running l4lb's --socket PATH\n", cfg.Path)
		return 1
	}
	running, reached, err := runningConfig(sock)
	switch {
	case !reached:
		fmt.Fprintf(stderr, "l4lb check --diff: no l4lb answers on %s: %v\n", sock, err)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "l4lb check --diff: cannot read the config of the l4lb on %s: %v\n", sock, err)
		return 1
	}
	var st plane.Status // best effort: the pid, whether XDP is loaded, the live flows, the run-time changes
	if body, err := adminGet(sock, "/status"); err == nil {
		_ = json.Unmarshal(body, &st)
	}
	// A reload lays the run-time backend changes it keeps over the file:
	// the diff is from what runs to that.
	file := cfg
	cfg, kept, dropped := config.RebaseBackendChanges(file, st.BackendChanges)
	// The same warnings as check without --diff: the file's, the host's,
	// the names', and the settings only a restart applies; then what the
	// drain guard would say of the backends the reload takes out.
	warnings = append(warnings, config.RestartWarnings(running, cfg)...)
	warnings = append(warnings, reconcile.ReloadCapacity(&st, cfg)...)
	printWarnings(stderr, warnings)
	if problems := config.CheckReload(running, cfg); len(problems) > 0 {
		fmt.Fprintln(stderr, &config.Error{Problems: problems})
		return 1
	}
	changes := config.Diff(running, cfg, config.DiffOptions{XDPLoaded: st.XDP != nil})
	runTime := runTimeDiff(kept, dropped)
	if asJSON {
		return printDiffJSON(stdout, stderr, diffReport{File: file.Path, Socket: sock, PID: st.Process.PID, Changed: !changes.Empty(), Changes: changes, BackendChanges: runTime})
	}
	fmt.Fprintf(stdout, "%s: ok, %s, %s\n", cfg.Path, config.Plural(len(cfg.VIPs), "VIP"), config.Plural(len(warnings), "warning"))
	pid := ""
	if st.Process.PID != 0 {
		pid = fmt.Sprintf(" (pid %d)", st.Process.PID)
	}
	fmt.Fprintf(stdout, "a reload of the l4lb on %s%s with this file:\n%s", sock, pid, changes.Text())
	printRunTimeDiff(stdout, runTime)
	return 0
}

func printDiffJSON(stdout, stderr io.Writer, r diffReport) int {
	if r.Global == nil {
		r.Global = []config.Change{}
	}
	if r.VIPs == nil {
		r.VIPs = []config.VIPChange{}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		fmt.Fprintln(stderr, "l4lb check --diff:", err)
		return 1
	}
	return 0
}
