// `l4lb status`: ask a running l4lb what it serves.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/internal/report"
	"github.com/l4lb/l4lb/l4/plane"
)

const defaultAdminSocket = "/run/l4lb/admin.sock"

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	f := newFlags("status", stdout, stderr)
	sock := f.String("socket", "", "admin socket (default: from --config, else "+defaultAdminSocket+")")
	cfgPath := f.String("config", "", "read the admin socket path from this config file")
	asJSON := f.Bool("json", false, "print the raw JSON (with --show-config: the config in force as JSON)")
	showConfig := f.Bool("show-config", false, "print the configuration in force, resolved, as TOML")
	allCaps := f.Bool("capabilities", false, "list every capability the process holds (the summary counts them)")
	args, bare := bareConfigFlag(args)
	if code, ok := f.parseNoArgs(args); !ok {
		return code
	}
	if bare {
		*showConfig = true
		fmt.Fprintln(stderr, "l4lb status: --config without a FILE is the old spelling of --show-config; --config FILE names the file whose admin_socket to ask")
	}
	path, err := adminPath(*sock, *cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "l4lb status:", err)
		return 1
	}
	endpoint := "/status"
	if *showConfig {
		endpoint = "/config"
	}
	body, err := adminGet(path, endpoint)
	if err != nil {
		fmt.Fprintln(stderr, "l4lb status:", err)
		return 1
	}
	switch {
	case *showConfig && *asJSON:
		if err := report.ConfigJSON(stdout, body); err != nil {
			fmt.Fprintln(stderr, "l4lb status:", err)
			return 1
		}
		return 0
	case *showConfig:
		runTimeChangesAsComments(stdout, path)
		stdout.Write(body)
		return 0
	case *asJSON:
		stdout.Write(body)
		return 0
	}
	var st plane.Status
	if err := json.Unmarshal(body, &st); err != nil {
		fmt.Fprintln(stderr, "l4lb status: bad answer:", err)
		return 1
	}
	report.Status(stdout, st, report.StatusView{AllCaps: *allCaps})
	return 0
}

func adminPath(sock, cfgPath string) (string, error) {
	if sock != "" {
		return sock, nil
	}
	if cfgPath != "" {
		cfg, err := config.Load(cfgPath)
		if err != nil {
			return "", err
		}
		if cfg.Global.AdminSocket == "" {
			return "", fmt.Errorf("%s: admin socket is off", cfgPath)
		}
		return cfg.Global.AdminSocket, nil
	}
	return defaultAdminSocket, nil
}

// bareConfigFlag takes out a --config given without a file (last, or
// before another flag): the old spelling of --show-config, kept so that
// scripts that use it still work. --config FILE is left alone: it names
// the file that says where the admin socket is.
func bareConfigFlag(args []string) (out []string, bare bool) {
	for i, a := range args {
		if (a == "--config" || a == "-config") && (i+1 == len(args) || strings.HasPrefix(args[i+1], "-")) {
			bare = true
			continue
		}
		out = append(out, a)
	}
	return out, bare
}

// adminGet asks the admin API at sock for endpoint.
func adminGet(sock, endpoint string) ([]byte, error) {
	return admin.Client{Socket: sock, Timeout: 5 * time.Second}.Do(context.Background(), "GET", endpoint, nil, nil)
}

// runTimeChangesAsComments heads --show-config's TOML with the run-time
// backend changes it holds, as TOML comments: what differs from the file.
// Nothing when there are none or the status cannot be read.
func runTimeChangesAsComments(w io.Writer, sock string) {
	body, err := adminGet(sock, "/status")
	if err != nil {
		return
	}
	var st plane.Status
	if json.Unmarshal(body, &st) != nil || len(st.BackendChanges) == 0 {
		return
	}
	var list bytes.Buffer
	report.BackendChanges(&list, st.BackendChanges)
	fmt.Fprintf(w, "# In force: the file with %d run-time backend changes on top (l4lb backend),\n"+
		"# kept until a reload changes the backend in the file or --reset:\n", len(st.BackendChanges))
	for _, line := range strings.Split(strings.TrimRight(list.String(), "\n"), "\n") {
		fmt.Fprintf(w, "#%s\n", line)
	}
}
