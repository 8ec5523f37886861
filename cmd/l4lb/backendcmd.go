// `l4lb backend add|set|remove`: change a running VIP's backends without
// a reload, as overrides on top of the file.

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/report"
	"github.com/l4lb/l4lb/l4/plane"
)

const backendHelp = `Changes a running VIP's backends without editing the file and reloading
(HAProxy's "add server" / "set server ... weight" / "del server"):

  l4lb backend add VIP ADDRESS [--name N] [--weight N] [--max-conns N] [--backup]
  l4lb backend set VIP BACKEND --weight N | --max-conns N | --reset
  l4lb backend remove VIP BACKEND [--timeout 30s] [--force]

BACKEND is a name, an address:port, or an IP (as drain takes). Each change
is checked exactly as the file is, and refused with the same words (a bad
address, the VIP's own listener, a weight or cap out of range, a name
taken). It applies as a reload does: new flows see it at once,
established flows keep their backend, health checks start or stop.

A change is an override on top of the file: status marks the backend
("added", "weight 7 (file 100)") with who and when, "status
--show-config" shows the config in force, and "check --diff" lists the
changes and whether a reload with the file keeps them. A reload keeps each
change while the file leaves its backend as it was; a reload that changes
that backend in the file (or adds one with the identity of an added
backend) ends the change and logs it. "set --reset" gives a file backend
the file's values again. With [global] state_file the changes, drains,
disables and health survive a restart and an upgrade.

remove drains the backend first (no new flows; a drain the capacity guard
refuses needs --force, as "l4lb drain"), waits until its flows end or
--timeout passes, then removes it; flows still open then end as a reload's
removal ends them. A file backend removed stays out until a reload changes
it in the file; an added one is gone.
`

// backendVerb finds the verb (add, set or remove) among args, where flags
// may come before it, and returns args without it.
func backendVerb(args []string) (string, []string) {
	takesValue := map[string]bool{"--socket": true, "--config": true, "--name": true, "--weight": true, "--max-conns": true, "--timeout": true,
		"-socket": true, "-config": true, "-name": true, "-weight": true, "-max-conns": true, "-timeout": true}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--":
			return "", args
		case takesValue[a]:
			i++
		case a == "add" || a == "set" || a == "remove":
			return a, append(append([]string{}, args[:i]...), args[i+1:]...)
		case !strings.HasPrefix(a, "-"):
			return "", args
		}
	}
	return "", args
}

func cmdBackend(args []string, stdout, stderr io.Writer) int {
	verb, args := backendVerb(args)
	if verb == "" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, commandHelp(commandNamed("backend")))
			return 0
		}
		fmt.Fprint(stderr, commandHelp(commandNamed("backend")))
		return 2
	}
	f := newFlags("backend", stdout, stderr)
	socket := socketFlags(f)
	asJSON := f.Bool("json", false, "print the API's JSON answer")
	var weight, maxConns *int
	var name *string
	var backup, reset, force *bool
	var timeout *time.Duration
	switch verb {
	case "add":
		name = f.String("name", "", "the backend's name (default: its address is its identity)")
		backup = f.Bool("backup", false, "a backup: new flows only while no primary is eligible")
	case "set":
		reset = f.Bool("reset", false, "the file's weight and max_conns again (ends the override)")
	case "remove":
		timeout = f.Duration("timeout", admin.DefaultRemoveTimeout, "how long the drain may wait for the backend's flows to end before it is removed (0s: at once)")
		force = f.Bool("force", false, "drain even when the backends left cannot take its live connections")
	}
	if verb != "remove" {
		weight = f.Int("weight", 0, "the backend's weight, 0..1000 (add: default 100)")
		maxConns = f.Int("max-conns", 0, "the backend's max_conns, 0 = no cap (tcp VIPs in proxy mode)")
	}
	if code, ok := f.parse(args); !ok {
		return code
	}
	if len(f.args) != 2 {
		what := "a backend (its name, address:port, or IP)"
		if verb == "add" {
			what = "an address (ip:port)"
		}
		f.usageError(fmt.Sprintf("backend %s: want a VIP name and %s", verb, what))
		return 2
	}
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if verb == "set" && !set["weight"] && !set["max-conns"] && !*reset {
		f.usageError("backend set: give --weight N, --max-conns N, or --reset")
		return 2
	}
	if verb == "set" && *reset && (set["weight"] || set["max-conns"]) {
		f.usageError("backend set: --reset goes alone")
		return 2
	}
	given := func(flagName string, v *int) *int {
		if set[flagName] {
			return v
		}
		return nil
	}
	path, ok := socket()
	if !ok {
		return 1
	}
	vip, target := f.args[0], f.args[1]
	op := os.Getenv("SUDO_USER")
	var (
		method, urlPath = "POST", ""
		req             any
		clientTimeout   = 10 * time.Second
	)
	switch verb {
	case "add":
		urlPath = admin.BackendsPath(vip)
		req = admin.BackendAddRequest{Address: target, Name: *name, Weight: given("weight", weight), MaxConns: given("max-conns", maxConns), Backup: *backup, Operator: op}
	case "set":
		urlPath = admin.BackendPath(vip, target, "set")
		req = admin.BackendSetRequest{Weight: given("weight", weight), MaxConns: given("max-conns", maxConns), Reset: *reset, Operator: op}
	case "remove":
		urlPath = admin.BackendPath(vip, target, "remove")
		req = admin.BackendRemoveRequest{Timeout: timeout.String(), Force: *force, Operator: op}
		clientTimeout = *timeout + 30*time.Second
	}
	var res plane.BackendChangeResult
	body, err := admin.Client{Socket: path, Timeout: clientTimeout}.Do(context.Background(), method, urlPath, req, &res)
	if err != nil {
		fmt.Fprintf(stderr, "l4lb backend %s: %v\n", verb, err)
		return 1
	}
	if *asJSON {
		stdout.Write(body)
		return 0
	}
	report.BackendChange(stdout, verb, res)
	return 0
}
