package main

import (
	"flag"
	"testing"

	"github.com/l4lb/l4lb/internal/docpage"
)

var update = flag.Bool("update", false, "rewrite docs/counters.md from the status types' tags")

const page = "../../../../docs/counters.md"

// TestPageIsCurrent: docs/counters.md is what the status types' tags make,
// so a counter added, renamed or explained anew without `make docs` fails
// here.
func TestPageIsCurrent(t *testing.T) {
	if err := docpage.Check(page, markdown(), *update); err != nil {
		t.Fatal(err)
	}
}
