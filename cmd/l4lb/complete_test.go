// Shell completion, driven the way bash drives it: the script from `l4lb
// completion bash` sourced, COMP_WORDS and COMP_CWORD set, the function
// called, COMPREPLY read. Names come from a real running l4lb.

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
)

// bashComplete completes the last of words (after "l4lb") in bash with
// the installed script and returns COMPREPLY, sorted.
func bashComplete(t *testing.T, script string, words ...string) []string {
	t.Helper()
	var b strings.Builder
	b.WriteString("source " + script + "\nCOMP_WORDS=(l4lb")
	for _, w := range words {
		b.WriteString(" '" + strings.ReplaceAll(w, "'", `'\''`) + "'")
	}
	fmt.Fprintf(&b, ")\nCOMP_CWORD=%d\n_l4lb\nprintf '%%s\\n' \"${COMPREPLY[@]}\"\n", len(words))
	cmd := exec.Command("bash", "--norc", "--noprofile", "-c", b.String())
	// "l4lb" on PATH is the binary under test, as the package installs it.
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(mustBin(t))+":"+os.Getenv("PATH"))
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash completion of %q: %v\n%s", words, err, out)
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" {
			got = append(got, l)
		}
	}
	slices.Sort(got)
	return got
}

// completionScript writes `l4lb completion SHELL` to a file.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	out, errOut, code := l4lbCmd(t, "completion", shell)
	if code != 0 {
		t.Fatalf("l4lb completion %s: exit %d: %s", shell, code, errOut)
	}
	path := filepath.Join(t.TempDir(), "l4lb."+shell)
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func wantWords(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: completed %q, want %q", what, got, want)
	}
}

// TestBashCompletion: commands, sub-verbs, flags and their values from
// the command table, files where a file goes, and nothing (silently) for
// names when no l4lb runs.
func TestBashCompletion(t *testing.T) {
	script := completionScript(t, "bash")
	var all []string
	for _, c := range commands() {
		all = append(all, c.name)
	}
	wantWords(t, "l4lb <TAB>", bashComplete(t, script, ""), all...)
	wantWords(t, "l4lb d<TAB>", bashComplete(t, script, "d"), "drain", "disable", "decap")
	wantWords(t, "l4lb help re<TAB>", bashComplete(t, script, "help", "re"), "reload", "rebalance")
	wantWords(t, "l4lb drain --<TAB>", bashComplete(t, script, "drain", "--"), "--config", "--force", "--json", "--reason", "--socket")
	wantWords(t, "l4lb enable --<TAB>", bashComplete(t, script, "enable", "--"), "--config", "--json", "--reason", "--socket")
	wantWords(t, "l4lb run --log-format <TAB>", bashComplete(t, script, "run", "--log-format", ""), "console", "json")
	wantWords(t, "l4lb xdp <TAB>", bashComplete(t, script, "xdp", ""), "detach", "capture")
	wantWords(t, "l4lb backend <TAB>", bashComplete(t, script, "backend", ""), "add", "set", "remove")
	wantWords(t, "l4lb backend remove --<TAB>", bashComplete(t, script, "backend", "remove", "--"), "--config", "--force", "--json", "--socket", "--timeout")
	wantWords(t, "l4lb xdp capture --w<TAB>", bashComplete(t, script, "xdp", "capture", "--w"), "--write")
	wantWords(t, "l4lb decap attach --mode g<TAB>", bashComplete(t, script, "decap", "attach", "--mode", "g"), "generic")
	wantWords(t, "l4lb completion <TAB>", bashComplete(t, script, "completion", ""), "bash", "zsh")
	wantWords(t, "l4lb version <TAB>", bashComplete(t, script, "version", ""))

	// A file where the usage line says FILE: the shell's own file names.
	dir := t.TempDir()
	for _, f := range []string{"lb-a.toml", "lb-b.toml", "other"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantWords(t, "l4lb check DIR/lb<TAB>", bashComplete(t, script, "check", dir+"/lb"), dir+"/lb-a.toml", dir+"/lb-b.toml")
	wantWords(t, "l4lb status --socket DIR/o<TAB>", bashComplete(t, script, "status", "--socket", dir+"/o"), dir+"/other")

	// No l4lb on the socket: no names, no error, no delay worth a mention.
	nobody := filepath.Join(dir, "none.sock")
	wantWords(t, "VIPs with no l4lb", bashComplete(t, script, "drain", "--socket", nobody, ""))
	wantWords(t, "backends with no l4lb", bashComplete(t, script, "drain", "--socket", nobody, "a", ""))
}

// TestBashCompletionNames: VIP and backend names from a running l4lb,
// on the socket given by --socket and by --config.
func TestBashCompletionNames(t *testing.T) {
	testutil.RequirePriv(t, "runs l4lb in a network namespace")
	testutil.RequireTool(t, "zsh")
	tp := testutil.NewTopology(t, 3)
	namedEchoes(t, tp)
	conf := newConf(`drain_timeout = "1s"`).
		vip("web", ":80", `protocol = "tcp"`).backends(2, 7000).
		vip("cache", ":81", `protocol = "tcp"`).named("redis-1", 2, 7000).at("", fmt.Sprintf(topoBackend+":7001", 11)).String()
	lb := startLB(t, tp, conf)
	script := completionScript(t, "bash")

	wantWords(t, "l4lb drain --socket S <TAB>", bashComplete(t, script, "drain", "--socket", lb.sock, ""), "web", "cache")
	wantWords(t, "l4lb explain --socket S w<TAB>", bashComplete(t, script, "explain", "--socket", lb.sock, "w"), "web")
	wantWords(t, "l4lb drain --socket S web <TAB>", bashComplete(t, script, "drain", "--socket", lb.sock, "web", ""), "be0", "be1")
	wantWords(t, "l4lb disable --json --socket S cache <TAB>", bashComplete(t, script, "disable", "--json", "--socket", lb.sock, "cache", ""), "redis-1", fmt.Sprintf(topoBackend+":7001", 11))
	wantWords(t, "l4lb enable --config F web b<TAB>", bashComplete(t, script, "enable", "--config", lb.cfg, "web", "b"), "be0", "be1")
	wantWords(t, "l4lb backend remove --socket S web <TAB>", bashComplete(t, script, "backend", "remove", "--socket", lb.sock, "web", ""), "be0", "be1")
	wantWords(t, "l4lb rebalance --socket S <TAB>", bashComplete(t, script, "rebalance", "--socket", lb.sock, ""), "web", "cache")
	wantWords(t, "l4lb drain --socket S web be0 <TAB>", bashComplete(t, script, "drain", "--socket", lb.sock, "web", "be0", ""))
	wantWords(t, "zsh: l4lb drain --socket S web <TAB>", zshComplete(t, completionScript(t, "zsh"), "drain", "--socket", lb.sock, "web", ""), "be0", "be1")
	wantWords(t, "l4lb xdp capture --socket S --backend <TAB>", bashComplete(t, script, "xdp", "capture", "--socket", lb.sock, "--backend", "r"), "redis-1")
}

// TestUsageNamesEveryFlag: the usage line of each command names exactly
// the flags its flag sets have (a form shared by sub-verbs, such as
// "add|set|remove ...", names the union of theirs), so the help, the man
// page and the completion's values agree with what the command parses.
func TestUsageNamesEveryFlag(t *testing.T) {
	for _, c := range commands() {
		for _, form := range parseUsage(c.usage) {
			vs := form.verbs
			if len(vs) == 0 {
				vs = []string{""}
			}
			have := map[string]bool{}
			for _, v := range vs {
				for _, fl := range commandFlags(c, v) {
					have[fl.Name] = true
					if _, ok := form.flags[fl.Name]; !ok {
						t.Errorf("l4lb %s %s: --%s is not in the usage line %q", c.name, v, fl.Name, c.usage)
					}
				}
			}
			for name := range form.flags {
				if !have[name] {
					t.Errorf("l4lb %s %v: the usage line names --%s, which it does not take", c.name, vs, name)
				}
			}
		}
	}
}

// zshComplete completes the last of words (after "l4lb") with the zsh
// script's function: words and CURRENT set as the completion system sets
// them, compadd and _files standing in for its builtins (they print what
// they are given).
func zshComplete(t *testing.T, script string, words ...string) []string {
	t.Helper()
	var b strings.Builder
	b.WriteString("compdef() { :; }\ncompadd() { [[ $1 == -- ]] && shift; print -rl -- \"$@\"; }\n_files() { print -r -- FILES; }\n")
	b.WriteString("source " + script + "\nwords=(l4lb")
	for _, w := range words {
		b.WriteString(" '" + strings.ReplaceAll(w, "'", `'\''`) + "'")
	}
	fmt.Fprintf(&b, ")\nCURRENT=%d\n_l4lb || : # nonzero: no match, as completion functions say it\n", len(words)+1)
	cmd := exec.Command("zsh", "-f", "-c", b.String())
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(mustBin(t))+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("zsh completion of %q: %v\n%s", words, err, out)
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" {
			got = append(got, l)
		}
	}
	slices.Sort(got)
	return got
}

// TestZshCompletion: the zsh script is valid zsh and its function gives
// what the bash one gives: commands, flags, values, files, no names
// without a daemon.
func TestZshCompletion(t *testing.T) {
	testutil.RequireTool(t, "zsh")
	script := completionScript(t, "zsh")
	if out, err := exec.Command("zsh", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	wantWords(t, "zsh: l4lb d<TAB>", zshComplete(t, script, "d"), "drain", "disable", "decap")
	wantWords(t, "zsh: l4lb enable --<TAB>", zshComplete(t, script, "enable", "--"), "--config", "--json", "--reason", "--socket")
	wantWords(t, "zsh: l4lb run --log-format <TAB>", zshComplete(t, script, "run", "--log-format", ""), "console", "json")
	wantWords(t, "zsh: l4lb check <TAB>", zshComplete(t, script, "check", ""), "FILES")
	wantWords(t, "zsh: VIPs with no l4lb", zshComplete(t, script, "drain", "--socket", filepath.Join(t.TempDir(), "none.sock"), ""))
}
