// Shell completion: `l4lb completion bash|zsh` prints a script whose
// function asks `l4lb __complete WORDS...` for the candidates. Commands,
// sub-verbs and flags come from the command table and each command's own
// flag set (cmdspec.go), VIP and backend names from the running l4lb's
// admin socket: nothing when none answers.

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/l4lb/l4lb/internal/admin"
	"github.com/l4lb/l4lb/l4/plane"
)

// completeFiles is the line `l4lb __complete` prints when the shell
// should complete file names itself.
const completeFiles = ":files"

// completeTimeout bounds the status call a completion makes: a hung
// daemon must not hang the shell.
const completeTimeout = time.Second

const completionHelp = `Prints a completion script for bash or zsh: commands, sub-verbs, flags, flag
values, config files, and the VIP and backend names of the running l4lb
(asked on its admin socket, or the one --socket or --config name on the
command line; nothing when none answers). The Debian package installs both;
by hand:

  l4lb completion bash > /etc/bash_completion.d/l4lb
  l4lb completion zsh > "${fpath[1]}/_l4lb"
`

func cmdCompletion(args []string, stdout, stderr io.Writer) int {
	f := newFlags("completion", stdout, stderr)
	if code, ok := f.parse(args); !ok {
		return code
	}
	if len(f.args) != 1 || (f.args[0] != "bash" && f.args[0] != "zsh") {
		f.usageError("want bash or zsh")
		return 2
	}
	if f.args[0] == "bash" {
		io.WriteString(stdout, bashCompletion)
	} else {
		io.WriteString(stdout, zshCompletion)
	}
	return 0
}

// cmdComplete is the hidden `l4lb __complete WORD... CURRENT`: the words
// after "l4lb" up to the one being completed (maybe empty). It prints the
// candidates that start with CURRENT, one a line, or completeFiles.
func cmdComplete(args []string, stdout, _ io.Writer) int {
	if len(args) == 0 {
		args = []string{""}
	}
	for _, c := range completions(args[:len(args)-1], args[len(args)-1], namesFromSocket) {
		fmt.Fprintln(stdout, c)
	}
	return 0
}

// nameSource returns the VIP names of the l4lb on socket, or the backend
// names of vip when vip is set (every VIP's when vip is "*").
type nameSource func(socket, vip string) []string

// completions computes the candidates for cur after words.
func completions(words []string, cur string, names nameSource) []string {
	if len(words) == 0 {
		var out []string
		for _, c := range commands() {
			out = append(out, c.name)
		}
		return filterPrefix(out, cur)
	}
	c := commandNamed(words[0])
	if c.usage == "" && c.run == nil && c.name != "help" {
		return nil // not a command
	}
	if c.name == "help" {
		if len(words) > 1 {
			return nil
		}
		return completions(nil, cur, names)
	}
	rest := words[1:]
	verb := ""
	if vs := verbs(c); len(vs) > 0 {
		if len(rest) == 0 {
			return filterPrefix(vs, cur)
		}
		verb, rest = rest[0], rest[1:]
	}
	form := formFor(c, verb)
	flags := commandFlags(c, verb)
	// Walk the words typed: flags (and their values), positionals.
	var positional []string
	var socket, cfg string
	pending := (*flag.Flag)(nil) // a flag that waits for its value
	for _, w := range rest {
		if pending != nil {
			switch pending.Name {
			case "socket":
				socket = w
			case "config":
				cfg = w
			}
			pending = nil
			continue
		}
		if name, ok := strings.CutPrefix(w, "--"); ok && name != "" {
			name, _, hasValue := strings.Cut(name, "=")
			if fl := flagNamed(flags, name); fl != nil && !isBool(fl) && !hasValue {
				pending = fl
			}
			continue
		}
		positional = append(positional, w)
	}
	sock := func() string {
		path, err := adminPath(socket, cfg)
		if err != nil {
			return ""
		}
		return path
	}
	if pending != nil {
		return valueCandidates(form, pending, positional, cur, sock, names)
	}
	if strings.HasPrefix(cur, "-") {
		var out []string
		for _, fl := range flags {
			out = append(out, "--"+fl.Name)
		}
		return filterPrefix(out, cur)
	}
	if len(positional) >= len(form.args) {
		return nil
	}
	return argCandidates(form.args[len(positional)], positional, cur, sock, names)
}

// valueCandidates completes the value of flag fl.
func valueCandidates(form usageForm, fl *flag.Flag, positional []string, cur string, sock func() string, names nameSource) []string {
	placeholder := form.flags[fl.Name]
	if placeholder == "" && len(form.args) > 0 {
		placeholder = form.args[0] // "[--config] FILE": the flag's value is the argument
	}
	if strings.Contains(placeholder, "|") && strings.ToLower(placeholder) == placeholder {
		return filterPrefix(strings.Split(placeholder, "|"), cur) // console|json
	}
	if placeholder == "B" || placeholder == "BACKEND" {
		vip := "*"
		if len(positional) > 0 {
			vip = positional[0]
		}
		return filterPrefix(names(sock(), vip), cur)
	}
	return argCandidates(placeholder, positional, cur, sock, names)
}

// argCandidates completes a positional argument or a flag value by its
// placeholder in the usage line.
func argCandidates(placeholder string, positional []string, cur string, sock func() string, names nameSource) []string {
	switch placeholder {
	case "FILE", "PATH":
		return []string{completeFiles}
	case "VIP":
		return filterPrefix(names(sock(), ""), cur)
	case "BACKEND":
		if len(positional) == 0 {
			return nil
		}
		return filterPrefix(names(sock(), positional[0]), cur)
	case "COMMAND":
		return completions(nil, cur, names)
	}
	if alts := strings.Split(placeholder, "|"); len(alts) > 1 { // ADDRESS|BACKEND
		var out []string
		for _, a := range alts {
			out = append(out, argCandidates(a, positional, cur, sock, names)...)
		}
		return out
	}
	return nil
}

func flagNamed(flags []*flag.Flag, name string) *flag.Flag {
	for _, fl := range flags {
		if fl.Name == name {
			return fl
		}
	}
	return nil
}

func isBool(fl *flag.Flag) bool {
	b, ok := fl.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func filterPrefix(words []string, prefix string) []string {
	var out []string
	for _, w := range words {
		if strings.HasPrefix(w, prefix) {
			out = append(out, w)
		}
	}
	return out
}

// namesFromSocket asks the l4lb on socket for its status: the VIP names,
// or the backends (name, else address) of vip, of every VIP for "*".
// Nothing when no l4lb answers within completeTimeout.
func namesFromSocket(socket, vip string) []string {
	if socket == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	defer cancel()
	body, err := admin.Client{Socket: socket, Timeout: completeTimeout}.Do(ctx, "GET", "/status", nil, nil)
	if err != nil {
		return nil
	}
	var st plane.Status
	if json.Unmarshal(body, &st) != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, v := range st.VIPs {
		switch {
		case vip == "":
			add(v.Name)
		case vip == "*" || vip == v.Name:
			for _, b := range v.Backends {
				add(b.ID)
			}
			if v.SNI != nil {
				for _, r := range v.SNI.Routes {
					for _, b := range r.Backends {
						add(b.ID)
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// The scripts hold no command or flag: they hand the words to
// `l4lb __complete` and turn its answer into the shell's candidates.
const bashCompletion = `# bash completion for l4lb (generated by "l4lb completion bash")
_l4lb() {
    local cur line cword
    local -a words
    # With bash-completion loaded, "198.18.1.11:5432" stays one word.
    if declare -F _get_comp_words_by_ref >/dev/null; then
        _get_comp_words_by_ref -n =: cur words cword
    else
        cur=${COMP_WORDS[COMP_CWORD]} words=("${COMP_WORDS[@]}") cword=$COMP_CWORD
    fi
    COMPREPLY=()
    while IFS= read -r line; do
        if [[ $line == ` + completeFiles + ` ]]; then
            while IFS= read -r line; do COMPREPLY+=("$line"); done < <(compgen -f -- "$cur")
            compopt -o filenames 2>/dev/null
        elif [[ -n $line ]]; then
            COMPREPLY+=("$line")
        fi
    done < <("${words[0]}" __complete "${words[@]:1:cword}" 2>/dev/null)
    if declare -F __ltrim_colon_completions >/dev/null; then
        __ltrim_colon_completions "$cur"
    fi
}
complete -F _l4lb l4lb
`

const zshCompletion = `#compdef l4lb
# zsh completion for l4lb (generated by "l4lb completion zsh")
_l4lb() {
    local -a cands
    local line
    cands=("${(@f)$("${words[1]}" __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    if [[ ${cands[1]} == ` + completeFiles + ` ]]; then
        _files
        return
    fi
    cands=(${cands:#})
    (( ${#cands} )) && compadd -- "${cands[@]}"
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _l4lb "$@"
else
    compdef _l4lb l4lb
fi
`
