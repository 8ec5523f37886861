package main

import (
	"flag"
	"regexp"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/docpage"
	"github.com/l4lb/l4lb/internal/testutil"
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

const manPage = "../../../docs/man/l4lb.toml.5"

// TestManIsCurrent: docs/man/l4lb.toml.5 is what the key tables make (the
// same tables as docs/configuration.md), so the two never differ.
func TestManIsCurrent(t *testing.T) {
	if err := docpage.Check(manPage, man(config.Reference()), *update); err != nil {
		t.Fatal(err)
	}
}

// TestManRendersEveryKey: groff and man render the page without a
// warning, and the text shows every key of every section with its facts.
func TestManRendersEveryKey(t *testing.T) {
	testutil.RequireTool(t, "groff")
	text, err := docpage.RenderMan(manPage)
	if err != nil {
		t.Fatal(err)
	}
	text = stripOverstrike(text)
	for _, s := range config.Reference() {
		at := strings.Index(text, "\n"+s.Header+"\n")
		if at < 0 {
			t.Fatalf("no section %s in the rendered page", s.Header)
		}
		for _, k := range s.Keys {
			i := strings.Index(text[at:], "\n   "+k.Name+"\n")
			if i < 0 {
				t.Errorf("%s: no subsection %s", s.Header, k.Name)
				continue
			}
			if k.Table {
				continue
			}
			entry := text[at+i+1:]
			if end := nextHeading.FindStringIndex(entry); end != nil {
				entry = entry[:end[0]]
			}
			for _, fact := range []string{"Syntax", "Default", "Context", "Reload"} {
				if !strings.Contains(entry, fact) {
					t.Errorf("%s %s: no %s in\n%s", s.Header, k.Name, fact, entry)
				}
			}
		}
	}
}

// nextHeading is the line of the next subsection (indented 3) or section.
var nextHeading = regexp.MustCompile(`\n(   )?[^ \n]`)

// stripOverstrike removes the backspace bold of groff's tty output.
func stripOverstrike(s string) string {
	b := []byte(s)
	out := b[:0]
	for i := 0; i < len(b); i++ {
		if i+1 < len(b) && b[i+1] == '\b' {
			i++ // skip the char and the backspace: the next one is printed
			continue
		}
		out = append(out, b[i])
	}
	return string(out)
}
