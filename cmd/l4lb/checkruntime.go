// `l4lb check --diff`: the run-time backend changes on top of the file,
// and which of them a reload with the file keeps.

package main

import (
	"fmt"
	"io"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/report"
	"github.com/l4lb/l4lb/l4"
)

// runTimeChange is one run-time backend change in check --diff.
type runTimeChange struct {
	l4.BackendChange
	// Kept: a reload with the file keeps it; else Ends says why it ends.
	Kept bool   `json:"kept"`
	Ends string `json:"ends,omitempty"`
}

// runTimeDiff lists the changes a reload keeps, then those it ends.
func runTimeDiff(kept []l4.BackendChange, dropped []config.DroppedChange) []runTimeChange {
	var out []runTimeChange
	for _, c := range kept {
		out = append(out, runTimeChange{BackendChange: c, Kept: true})
	}
	for _, d := range dropped {
		out = append(out, runTimeChange{BackendChange: d.Change, Ends: d.Why})
	}
	return out
}

// printRunTimeDiff prints the run-time changes as differences from the
// file, with what a reload does to each.
func printRunTimeDiff(w io.Writer, changes []runTimeChange) {
	if len(changes) == 0 {
		return
	}
	fmt.Fprintf(w, "run-time backend changes on top of the file (l4lb backend; the diff above keeps those kept):\n")
	for _, c := range changes {
		fate := "kept by the reload"
		if !c.Kept {
			fate = "ENDED by the reload: " + c.Ends
		}
		fmt.Fprintf(w, "  vip %s: backend %s: %s (by %s): %s\n", c.VIP, c.Backend, report.ChangeWords(&c.BackendChange), c.By, fate)
	}
}
