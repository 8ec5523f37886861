// What `l4lb backend add|set|remove` prints, and the run-time changes
// that `status` and `check --diff` list.

package report

import (
	"fmt"
	"io"
	"time"

	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// BackendChange is what a backend verb did.
func BackendChange(w io.Writer, verb string, res plane.BackendChangeResult) {
	addr := ""
	if res.Address != "" {
		addr = " (" + res.Address + ")"
	}
	switch {
	case res.Unchanged:
		fmt.Fprintf(w, "vip %s: backend %s%s was already so (%s): nothing changed\n", res.VIP, res.Backend, addr, res.Change)
	case verb == "remove":
		if res.Forced != "" {
			fmt.Fprintf(w, "forced: %s\n", res.Forced)
		}
		left := "every flow had ended"
		if res.LeftFlows > 0 {
			left = fmt.Sprintf("%d flows were still open at the deadline", res.LeftFlows)
		}
		fmt.Fprintf(w, "vip %s: backend %s%s removed after a drain of %.1fs from %d live flows; %s\n",
			res.VIP, res.Backend, addr, res.Waited, res.DrainedFrom, left)
	default:
		fmt.Fprintf(w, "vip %s: backend %s%s: %s, by %s; kept until a reload changes the backend in the file or --reset\n",
			res.VIP, res.Backend, addr, res.Change, res.By)
	}
}

// BackendChanges lists run-time backend changes, one a line, indented.
func BackendChanges(w io.Writer, changes []l4.BackendChange) {
	for _, c := range changes {
		fmt.Fprintf(w, "  vip %s: backend %s: %s, by %s at %s\n", c.VIP, c.Backend, ChangeWords(&c), c.By, c.Since.Format(time.RFC3339))
	}
}

// ChangeWords says what a change does, without the file's values.
func ChangeWords(c *l4.BackendChange) string {
	switch {
	case c.Added:
		s := "added " + c.Address
		if c.Weight != nil {
			s += fmt.Sprintf(" weight %d", *c.Weight)
		}
		if c.MaxConns != nil {
			s += fmt.Sprintf(" max_conns %d", *c.MaxConns)
		}
		if c.Backup {
			s += " backup"
		}
		return s
	case c.Removed:
		return "removed"
	}
	s := "set"
	if c.Weight != nil {
		s += fmt.Sprintf(" weight %d", *c.Weight)
	}
	if c.MaxConns != nil {
		s += fmt.Sprintf(" max_conns %d", *c.MaxConns)
	}
	return s
}

// printRunTime is status's lines on the state file and the run-time
// backend changes.
func printRunTime(w io.Writer, st plane.Status) {
	if sf := st.StateFile; sf != nil {
		fmt.Fprintf(w, "state file: %s", sf.Path)
		if !sf.Written.IsZero() {
			fmt.Fprintf(w, ", written %s", sf.Written.Format(time.RFC3339))
		}
		if sf.Error != "" {
			fmt.Fprintf(w, ", LAST WRITE FAILED: %s", sf.Error)
		}
		switch {
		case sf.Refused != "":
			fmt.Fprintf(w, "; at start REFUSED: %s", sf.Refused)
		case sf.Restored != "":
			fmt.Fprintf(w, "; restored at start: %s", sf.Restored)
		}
		fmt.Fprintln(w)
	}
	if len(st.BackendChanges) > 0 {
		fmt.Fprintf(w, "run-time backend changes on top of the file (%d):\n", len(st.BackendChanges))
		BackendChanges(w, st.BackendChanges)
	}
}
