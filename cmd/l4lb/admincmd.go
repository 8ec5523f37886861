// The run-time verbs: `l4lb drain|enable|disable VIP BACKEND` and
// `l4lb reload`, each a call to the running l4lb's admin API.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/l4/plane"
)

// socketFlags adds --socket and --config (where to find the socket).
func socketFlags(f *flags) func() (string, error) {
	sock := f.String("socket", "", "admin socket (default: from --config, else "+defaultAdminSocket+")")
	cfgPath := f.String("config", "", "read the admin socket path from this config file")
	return func() (string, error) { return adminPath(*sock, *cfgPath) }
}

// cmdOverride is drain, enable and disable: one backend of one VIP.
func cmdOverride(action string) func(args []string, stdout, stderr io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		f := newFlags(action, stdout, stderr)
		socket := socketFlags(f)
		reason := f.String("reason", "", "a note shown in status beside who set it and when (\"kernel upgrade\")")
		asJSON := f.Bool("json", false, "print the API's JSON answer")
		if code, ok := f.parse(args); !ok {
			return code
		}
		if len(f.args) != 2 {
			f.usageError("want a VIP name and a backend (its name, address:port, or IP)")
			return 2
		}
		path, err := socket()
		if err != nil {
			fmt.Fprintf(stderr, "l4lb %s: %v\n", action, err)
			return 1
		}
		req := admin.OverrideRequest{Reason: *reason, Operator: os.Getenv("SUDO_USER")}
		var res plane.OverrideResult
		body, err := admin.Client{Socket: path}.Do(context.Background(), "POST", admin.BackendPath(f.args[0], f.args[1], action), req, &res)
		if err != nil {
			fmt.Fprintf(stderr, "l4lb %s: %v\n", action, err)
			return 1
		}
		if *asJSON {
			stdout.Write(body)
			return 0
		}
		printOverride(stdout, res)
		return 0
	}
}

// overrideDone says what an override leaves a backend.
var overrideDone = map[string]string{"drain": "drained", "disable": "disabled"}

func printOverride(w io.Writer, res plane.OverrideResult) {
	if res.Unchanged {
		if res.Override == "none" {
			fmt.Fprintf(w, "vip %s: backend %s (%s) was not drained or disabled: nothing changed\n", res.VIP, res.Backend, res.Address)
		} else {
			fmt.Fprintf(w, "vip %s: backend %s (%s) was already %s (by %s): nothing changed\n", res.VIP, res.Backend, res.Address, overrideDone[res.Override], res.By)
		}
		return
	}
	switch res.Override {
	case "drain":
		fmt.Fprintf(w, "vip %s: backend %s (%s) drained: no new flows; %d established continue\n", res.VIP, res.Backend, res.Address, res.LiveFlows)
	case "disable":
		fmt.Fprintf(w, "vip %s: backend %s (%s) disabled: no new flows; %d established reset\n", res.VIP, res.Backend, res.Address, res.Reset)
	default:
		fmt.Fprintf(w, "vip %s: backend %s (%s) enabled (was %s): health and the file decide again\n", res.VIP, res.Backend, res.Address, res.Previous)
	}
}

// cmdReload asks the running l4lb to reload its config file.
func cmdReload(args []string, stdout, stderr io.Writer) int {
	f := newFlags("reload", stdout, stderr)
	socket := socketFlags(f)
	asJSON := f.Bool("json", false, "print the API's JSON answer")
	if code, ok := f.parse(args); !ok {
		return code
	}
	if !f.noArgs() {
		return 2
	}
	path, err := socket()
	if err != nil {
		fmt.Fprintln(stderr, "l4lb reload:", err)
		return 1
	}
	var res admin.ReloadResult
	body, err := admin.Client{Socket: path, Timeout: time.Minute}.Do(context.Background(), "POST", "/reload", nil, &res)
	return verdict("reload", body, err, func() bool { return res.OK }, func() { printReload(stdout, stderr, res) }, *asJSON, stdout, stderr)
}

// verdict ends a command whose answer says whether it worked (reload,
// upgrade): 422 carries a refusal's answer, any other error is printed;
// the answer is printed as JSON or by show; exit 1 unless ok().
func verdict(cmd string, body []byte, err error, ok func() bool, show func(), asJSON bool, stdout, stderr io.Writer) int {
	var se *admin.StatusError
	if err != nil && !(errors.As(err, &se) && se.Status == http.StatusUnprocessableEntity) {
		fmt.Fprintf(stderr, "l4lb %s: %v\n", cmd, err)
		return 1
	}
	if asJSON {
		stdout.Write(body)
	} else {
		show()
	}
	if !ok() {
		return 1
	}
	return 0
}

func printReload(stdout, stderr io.Writer, res admin.ReloadResult) {
	if !res.OK {
		fmt.Fprintf(stderr, "reload refused: %s\n", res.Error)
		for _, p := range res.Problems {
			fmt.Fprintln(stderr, "  "+p)
		}
		return
	}
	fmt.Fprintf(stdout, "reload applied: %s\n", config.Plural(res.VIPs, "VIP"))
	for _, w := range res.Warnings {
		fmt.Fprintln(stdout, "warning:", w)
	}
	for _, k := range res.RestartOnly {
		fmt.Fprintf(stdout, "%s changed: takes effect only after a restart\n", k)
	}
}
