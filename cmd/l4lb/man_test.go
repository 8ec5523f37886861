// l4lb(8): the committed page is what the command table makes, and man
// renders it without a warning, with every command, flag and signal.

package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/internal/docpage"
	"github.com/l4lb/l4lb/internal/testutil"
)

var updateMan = flag.Bool("update-man", false, "rewrite docs/man/l4lb.8 from the command table")

const manPath = "../../docs/man/l4lb.8"

// TestManPageIsCurrent: a command, flag or help text changed without
// `make docs` fails here.
func TestManPageIsCurrent(t *testing.T) {
	if err := docpage.Check(manPath, manPage(), *updateMan); err != nil {
		t.Fatal(err)
	}
}

func TestManPageRenders(t *testing.T) {
	testutil.RequireTool(t, "groff")
	text, err := docpage.RenderMan(manPath)
	if err != nil {
		t.Fatal(err)
	}
	text = strings.NewReplacer("\u2010", "-", "\u2212", "-").Replace(dropOverstrike(text))
	for _, sec := range []string{"SYNOPSIS", "COMMANDS", "SIGNALS", "EXIT STATUS", "FILES", "SEE ALSO"} {
		if !strings.Contains(text, "\n"+sec+"\n") {
			t.Errorf("no section %s", sec)
		}
	}
	for _, c := range commands() {
		at := strings.Index(text, "\n   l4lb "+c.name+"\n")
		if at < 0 {
			t.Errorf("no subsection for l4lb %s", c.name)
			continue
		}
		entry := text[at+1:]
		if end := strings.Index(entry, "\n   l4lb "); end > 0 {
			entry = entry[:end]
		}
		vs := verbs(c)
		if len(vs) == 0 {
			vs = []string{""}
		}
		for _, v := range vs {
			for _, fl := range commandFlags(c, v) {
				if !strings.Contains(entry, "\n       --"+fl.Name) {
					t.Errorf("l4lb %s: flag --%s not listed", c.name, fl.Name)
				}
			}
		}
	}
	for _, sig := range []string{"SIGHUP", "SIGUSR2", "SIGTERM, SIGINT"} {
		if !strings.Contains(text, "\n       "+sig) {
			t.Errorf("SIGNALS lacks %s", sig)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(text), " "), "0 ok, 1 failed") {
		t.Error("EXIT STATUS lacks the codes")
	}
}

// dropOverstrike removes the backspace bold and underline of groff's tty
// output.
func dropOverstrike(s string) string {
	r := []rune(s)
	out := r[:0]
	for i := 0; i < len(r); i++ {
		if i+1 < len(r) && r[i+1] == '\b' {
			i++
			continue
		}
		out = append(out, r[i])
	}
	return string(out)
}
