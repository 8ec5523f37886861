package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/docpage"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md from the key tables")

const page = "../../../docs/configuration.md"

// TestPageIsCurrent: docs/configuration.md is what the key tables make,
// so a key added, changed or removed without `make docs` fails here.
func TestPageIsCurrent(t *testing.T) {
	if err := docpage.Check(page, markdown(config.Reference()), *update); err != nil {
		t.Fatal(err)
	}
}

// TestPageHasEveryKey: each key of every section has its heading, with
// its facts, under its section's.
func TestPageHasEveryKey(t *testing.T) {
	text := string(markdown(config.Reference()))
	for _, s := range config.Reference() {
		at := strings.Index(text, "\n## "+escape(s.Header)+"\n")
		if at < 0 {
			t.Fatalf("no heading for %s", s.Header)
		}
		rest := text[at+1:]
		if next := strings.Index(rest[3:], "\n## "); next >= 0 {
			rest = rest[:next+3]
		}
		for _, k := range s.Keys {
			if !strings.Contains(rest, "\n### "+k.Name+"\n") {
				t.Errorf("%s: no heading for %s", s.Header, k.Name)
			}
			if !k.Table && !strings.Contains(rest, "| Syntax | "+code(k.Name+" = "+k.Form)) {
				t.Errorf("%s %s: no syntax line", s.Header, k.Name)
			}
		}
	}
}
