package main

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md from the key tables")

const page = "../../../docs/configuration.md"

// TestPageIsCurrent: docs/configuration.md is what the key tables make,
// so a key added, changed or removed without `make docs` fails here.
func TestPageIsCurrent(t *testing.T) {
	want := markdown(config.Reference())
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
		g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(g) && i < len(w) && g[i] == w[i] {
			i++
		}
		line := func(l []string) string {
			if i < len(l) {
				return l[i]
			}
			return "(end of page)"
		}
		t.Fatalf("docs/configuration.md is not what the key tables make: run `make docs` and commit it.\nline %d is\n\t%s\nand should be\n\t%s", i+1, line(g), line(w))
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
