// The run-time verbs' answers: drain, disable, enable, reload, upgrade.

package report

import (
	"fmt"
	"io"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/l4/plane"
)

// overrideDone says what an override leaves a backend.
var overrideDone = map[string]string{"drain": "drained", "disable": "disabled"}

// Override is what drain, disable and enable did.
func Override(w io.Writer, res plane.OverrideResult) {
	if res.Unchanged {
		if res.Override == "none" {
			fmt.Fprintf(w, "vip %s: backend %s (%s) was not drained or disabled: nothing changed\n", res.VIP, res.Backend, res.Address)
		} else {
			fmt.Fprintf(w, "vip %s: backend %s (%s) was already %s (by %s): nothing changed\n", res.VIP, res.Backend, res.Address, overrideDone[res.Override], res.By)
		}
		return
	}
	if res.Forced != "" {
		fmt.Fprintf(w, "forced: %s\n", res.Forced)
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

// Reload is what `l4lb reload` got: applied (on stdout) or refused (on
// stderr).
func Reload(stdout, stderr io.Writer, res admin.ReloadResult) {
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

// Upgrade is what `l4lb upgrade` got: the handover (on stdout), or why
// there was none (on stderr).
func Upgrade(stdout, stderr io.Writer, res admin.UpgradeResult) {
	if res.Stopping {
		fmt.Fprintf(stderr, "upgrade cancelled; l4lb (pid %d) stops: %s\n", res.OldPID, res.Error)
		return
	}
	if !res.OK {
		fmt.Fprintf(stderr, "upgrade failed; l4lb (pid %d) keeps serving: %s\n", res.OldPID, res.Error)
		for _, p := range res.Problems {
			fmt.Fprintln(stderr, "  "+p)
		}
		return
	}
	fmt.Fprintf(stdout, "upgraded: pid %d -> %d (%s) in %.3fs\n", res.OldPID, res.PID, res.Binary, res.Seconds)
	fmt.Fprintf(stdout, "handed over: %d listening sockets, %d connections (%d flushed first, %d with their bytes in flight), %d UDP sessions (in %.3fs)\n",
		res.Listeners, res.Connections, res.Flushed, res.Piped, res.Sessions, res.HandoverSeconds)
	if res.Kept > 0 {
		fmt.Fprintf(stdout, "%d connections stay in pid %d until they end (drain_timeout at most)\n", res.Kept, res.OldPID)
	}
}
