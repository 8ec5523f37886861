// `l4lb status`: ask a running l4lb what it serves.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4/reconcile"
)

const defaultAdminSocket = "/run/l4lb/admin.sock"

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sock := fs.String("socket", "", "admin socket (default: from --config, else "+defaultAdminSocket+")")
	cfgPath := fs.String("config", "", "read the admin socket path from this config file")
	asJSON := fs.Bool("json", false, "print the raw JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	path, err := adminPath(*sock, *cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "l4lb status:", err)
		return 1
	}
	body, err := fetchStatus(path)
	if err != nil {
		fmt.Fprintln(stderr, "l4lb status:", err)
		return 1
	}
	if *asJSON {
		stdout.Write(body)
		return 0
	}
	var st reconcile.Status
	if err := json.Unmarshal(body, &st); err != nil {
		fmt.Fprintln(stderr, "l4lb status: bad answer:", err)
		return 1
	}
	printStatus(stdout, st)
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

func fetchStatus(sock string) ([]byte, error) {
	client := http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
	}
	resp, err := client.Get("http://l4lb/status")
	if err != nil {
		return nil, fmt.Errorf("is l4lb running? %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("admin API: %s", resp.Status)
	}
	return io.ReadAll(resp.Body)
}

func printStatus(w io.Writer, st reconcile.Status) {
	pipeCap := "none"
	if st.Pipes.Max > 0 {
		pipeCap = fmt.Sprint(st.Pipes.Max)
	}
	fmt.Fprintf(w, "splice pipes: %d open, %d in use, max %s\n\n", st.Pipes.Open, st.Pipes.Lent, pipeCap)
	for i, v := range st.VIPs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "VIP %s  %s/%s  %s  eligible %d/%d  active %d  accepted %d  no-backend %d\n",
			v.Name, v.Protocol, v.Listen, v.Algorithm, v.Eligible, len(v.Backends), v.Active, v.Accepted, v.NoBackend)
		if t := v.TCP; t != nil && *t != (reconcile.TCPStatus{}) {
			fmt.Fprintf(w, "  events: accept-errors %d  idle-closed %d  local-resource-errors %d  pipeless-copies %d\n",
				t.AcceptErrors, t.IdleClosed, t.LocalErrors, t.PipelessCopies)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  BACKEND\tADDRESS\tWEIGHT\tHEALTH\tLIVE\tFLOWS\tFAILS\tIN\tOUT\tRTT\tLAST CHECK")
		for _, b := range v.Backends {
			last := b.LastCheck
			if b.Reason != "" && b.Reason != last {
				last = strings.TrimSpace(last + " (down: " + b.Reason + ")")
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n",
				b.ID, b.Address, b.Weight, b.Health, b.LiveFlows, b.Flows, b.ConnectFails,
				bytesString(b.BytesIn), bytesString(b.BytesOut), rttString(b.RTT), last)
		}
		tw.Flush()
	}
}

func bytesString(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func rttString(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
