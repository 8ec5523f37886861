// The run-time verbs: `l4lb drain|enable|disable VIP BACKEND`, `l4lb
// reload` and `l4lb upgrade`, each a call to the running l4lb's admin API.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/report"
	"github.com/l4lb/l4lb/internal/upgrade"
	"github.com/l4lb/l4lb/l4/plane"
)

// socketFlags adds --socket and --config (where to find the socket). The
// function it returns gives the socket's path, or prints why there is
// none ("l4lb VERB: ...") and returns ok = false (exit 1).
func socketFlags(f *flags) func() (path string, ok bool) {
	sock := f.String("socket", "", "admin socket (default: from --config, else "+defaultAdminSocket+")")
	cfgPath := f.String("config", "", "read the admin socket path from this config file")
	return func() (string, bool) {
		path, err := adminPath(*sock, *cfgPath)
		if err != nil {
			fmt.Fprintf(f.stderr, "l4lb %s: %v\n", f.Name(), err)
		}
		return path, err == nil
	}
}

// cmdOverride is drain, enable and disable: one backend of one VIP.
func cmdOverride(action string) func(args []string, stdout, stderr io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		f := newFlags(action, stdout, stderr)
		socket := socketFlags(f)
		reason := f.String("reason", "", "a note shown in status beside who set it and when (\"kernel upgrade\")")
		force := new(bool)
		if action != "enable" {
			force = f.Bool("force", false, action+" even when the backends left cannot take its live connections, or none is left")
		}
		asJSON := f.Bool("json", false, "print the API's JSON answer")
		if code, ok := f.parse(args); !ok {
			return code
		}
		if len(f.args) != 2 {
			f.usageError("want a VIP name and a backend (its name, address:port, or IP)")
			return 2
		}
		path, ok := socket()
		if !ok {
			return 1
		}
		req := admin.OverrideRequest{Reason: *reason, Operator: os.Getenv("SUDO_USER"), Force: *force}
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
		report.Override(stdout, res)
		return 0
	}
}

// cmdReload asks the running l4lb to reload its config file.
func cmdReload(args []string, stdout, stderr io.Writer) int {
	f := newFlags("reload", stdout, stderr)
	socket := socketFlags(f)
	asJSON := f.Bool("json", false, "print the API's JSON answer")
	if code, ok := f.parseNoArgs(args); !ok {
		return code
	}
	path, ok := socket()
	if !ok {
		return 1
	}
	var res admin.ReloadResult
	body, err := admin.Client{Socket: path, Timeout: time.Minute}.Do(context.Background(), "POST", "/reload", nil, &res)
	return verdict("reload", body, err, func() bool { return res.OK }, func() { report.Reload(stdout, stderr, res) }, *asJSON, stdout, stderr)
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

// cmdUpgrade asks the running l4lb to upgrade to a new binary.
func cmdUpgrade(args []string, stdout, stderr io.Writer) int {
	f := newFlags("upgrade", stdout, stderr)
	socket := socketFlags(f)
	binary := f.String("binary", "", "the new l4lb binary (default: the path the running one was started from)")
	timeout := f.Duration("timeout", upgrade.StartTimeout, "how long the new process may take to start, until it is ready")
	asJSON := f.Bool("json", false, "print the API's JSON answer")
	if code, ok := f.parseNoArgs(args); !ok {
		return code
	}
	path, ok := socket()
	if !ok {
		return 1
	}
	req := admin.UpgradeRequest{Timeout: timeout.String()}
	if *binary != "" {
		abs, err := filepath.Abs(*binary)
		if err != nil {
			fmt.Fprintln(stderr, "l4lb upgrade:", err)
			return 1
		}
		req.Binary = abs
	}
	var res admin.UpgradeResult
	body, err := admin.Client{Socket: path, Timeout: *timeout + 2*time.Minute}.Do(context.Background(), "POST", "/upgrade", req, &res)
	return verdict("upgrade", body, err, func() bool { return res.OK }, func() { report.Upgrade(stdout, stderr, res) }, *asJSON, stdout, stderr)
}
