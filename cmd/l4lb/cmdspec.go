// What the command table says about each command's words, for the shell
// completion and the man page: the flags (from the command's own flag
// set) and the sub-verbs, arguments and flag values (from its usage line).

package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
)

// flagCollector stands for a command's stdout when its flag set is
// wanted: the command's --help hands it the flag set instead of printing
// it (flags.parse).
type flagCollector struct {
	bytes.Buffer // what the command prints otherwise (ignored)
	set          *flag.FlagSet
}

// commandFlags returns the flags of command c (of its sub-verb verb, if
// any), as c itself declares them: it runs `c [verb] --help`, which only
// parses. nil when the command has no flag set.
func commandFlags(c command, verb string) []*flag.Flag {
	if c.run == nil {
		return nil
	}
	args := []string{"--help"}
	if verb != "" {
		args = []string{verb, "--help"}
	}
	col := &flagCollector{}
	c.run(args, col, io.Discard)
	if col.set == nil {
		return nil
	}
	var out []*flag.Flag
	col.set.VisitAll(func(f *flag.Flag) { out = append(out, f) })
	return out
}

// usageForm is one form of a usage line: the sub-verbs it is for (none
// for most commands), its positional arguments in order (VIP, BACKEND,
// FILE...) and the flags it names with their value (a placeholder such as
// PATH, or "console|json"; "" for a flag without one).
type usageForm struct {
	verbs []string
	args  []string
	flags map[string]string
}

// parseUsage reads a usage line such as
// "[--socket PATH | --config FILE] [--json] VIP BACKEND" or
// "detach [--config] FILE | capture ... VIP" (one form per sub-verb).
func parseUsage(usage string) []usageForm {
	var forms []usageForm
	for _, alt := range splitTopLevel(usage) {
		f := usageForm{flags: map[string]string{}}
		toks := strings.Fields(alt)
		if len(toks) > 0 && isVerbList(toks[0]) {
			f.verbs = strings.Split(toks[0], "|")
			toks = toks[1:]
		}
		open := "" // the flag whose value may come next
		for _, tok := range toks {
			word := strings.TrimLeft(tok, "[")
			// Trailing brackets close groups, except one that an inner
			// bracket opened (CLIENT_IP[:PORT]).
			closes := false
			for strings.HasSuffix(word, "]") && strings.Count(word, "]") > strings.Count(word, "[") {
				word, closes = word[:len(word)-1], true
			}
			switch {
			case word == "|" || word == "":
				open = ""
			case strings.HasPrefix(word, "--"):
				open = strings.TrimPrefix(word, "--")
				f.flags[open] = ""
			case open != "":
				f.flags[open] = word
				open = ""
			default:
				f.args = append(f.args, word)
			}
			if closes {
				open = ""
			}
		}
		forms = append(forms, f)
	}
	return forms
}

// splitTopLevel splits s at the "|" words outside brackets.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case '|':
			if depth == 0 && i > 0 && s[i-1] == ' ' && i+1 < len(s) && s[i+1] == ' ' {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// isVerbList: "detach" or "attach|detach|status", lower-case words.
func isVerbList(tok string) bool {
	for _, w := range strings.Split(tok, "|") {
		if w == "" || strings.Trim(w, "abcdefghijklmnopqrstuvwxyz-") != "" {
			return false
		}
	}
	return true
}

// verbs lists c's sub-verbs in the order its usage line gives them.
func verbs(c command) []string {
	var out []string
	for _, f := range parseUsage(c.usage) {
		out = append(out, f.verbs...)
	}
	return out
}

// formFor returns the usage form of c for sub-verb verb ("" for a
// command without sub-verbs).
func formFor(c command, verb string) usageForm {
	for _, f := range parseUsage(c.usage) {
		if len(f.verbs) == 0 && verb == "" {
			return f
		}
		for _, v := range f.verbs {
			if v == verb {
				return f
			}
		}
	}
	return usageForm{flags: map[string]string{}}
}
