package main

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/counters.md from the status types' tags")

const page = "../../../../docs/counters.md"

// TestPageIsCurrent: docs/counters.md is what the status types' tags make,
// so a counter added, renamed or explained anew without `make docs` fails
// here.
func TestPageIsCurrent(t *testing.T) {
	want := markdown()
	if *update {
		if err := os.WriteFile(page, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/counters.md is stale: run `make docs`")
	}
}
