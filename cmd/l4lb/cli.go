// Command-line parsing shared by the subcommands: help, positional paths,
// unexpected arguments.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
)

const defaultConfigPath = "/etc/l4lb/l4lb.toml"

// flags is one subcommand's flag set. Its --help prints the command's help
// to stdout (exit 0); a bad flag or argument prints the error and the
// usage to stderr (exit 2).
type flags struct {
	*flag.FlagSet
	cmd            command
	stdout, stderr io.Writer
	args           []string // positional arguments, wherever they stood among the flags
}

func newFlags(name string, stdout, stderr io.Writer) *flags {
	f := &flags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), stdout: stdout, stderr: stderr}
	for _, c := range commands() {
		if c.name == name {
			f.cmd = c
		}
	}
	// The flag package's own messages name a flag with one dash (-reason);
	// parse prints them itself, with two, as every other text does.
	f.SetOutput(io.Discard)
	f.Usage = func() {}
	return f
}

// parse parses args. It returns ok = false with the exit code when the
// command must stop: 0 after --help, 2 after a bad flag.
func (f *flags) parse(args []string) (code int, ok bool) {
	err := f.Parse(args)
	// The flag package stops at the first positional argument; go on
	// after it so that `l4lb run FILE --log-format json` works too.
	for err == nil && f.FlagSet.NArg() > 0 {
		rest := f.FlagSet.Args()
		if rest[0] == "--" {
			f.args = append(f.args, rest[1:]...)
			break
		}
		f.args = append(f.args, rest[0])
		err = f.Parse(rest[1:])
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		if col, ok := f.stdout.(*flagCollector); ok {
			col.set = f.FlagSet // commandFlags: the flags, not their text
			return 0, false
		}
		fmt.Fprint(f.stdout, commandHelp(f.cmd), "\nflags:\n")
		f.printFlags(f.stdout)
		return 0, false
	case err != nil:
		f.usageError(oneDash.ReplaceAllString(err.Error(), "$1--$2"))
		return 2, false
	}
	return 0, true
}

// oneDash finds a flag named with one dash in the flag package's errors
// ("flag provided but not defined: -bogus").
var oneDash = regexp.MustCompile(`(^| )-([a-zA-Z])`)

// printFlags lists the flags as flag.PrintDefaults does, but each as
// --name, the way l4lb's usage lines and help write them.
func (f *flags) printFlags(w io.Writer) {
	f.VisitAll(func(fl *flag.Flag) {
		kind, usage := flag.UnquoteUsage(fl)
		line := "  --" + fl.Name
		if kind != "" {
			line += " " + kind
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		switch def := fl.DefValue; {
		case def == "" || def == "false" || def == "0" || def == "0s":
		case kind == "string":
			line += fmt.Sprintf(" (default %q)", def)
		default:
			line += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintln(w, line)
	})
}

// usageError prints msg (if any) and the command's usage line to stderr.
func (f *flags) usageError(msg string) {
	if msg != "" {
		fmt.Fprintf(f.stderr, "l4lb %s: %s\n", f.Name(), msg)
	}
	fmt.Fprintf(f.stderr, "%s (l4lb help %s)\n", usageLine(f.cmd), f.Name())
}

// usageLine is "usage: l4lb NAME FLAGS", without a trailing space when
// the command takes none.
func usageLine(c command) string {
	return strings.TrimRight("usage: l4lb "+c.name+" "+c.usage, " ")
}

// parseNoArgs is parse for a command that takes no positional argument
// (noArgs).
func (f *flags) parseNoArgs(args []string) (code int, ok bool) {
	if code, ok := f.parse(args); !ok {
		return code, false
	}
	if !f.noArgs() {
		return 2, false
	}
	return 0, true
}

// noArgs refuses positional arguments: a word l4lb does not expect is an
// error, never silently ignored. It returns false (exit 2) if there were any.
func (f *flags) noArgs() bool {
	if len(f.args) == 0 {
		return true
	}
	f.usageError(fmt.Sprintf("unexpected argument %q", strings.Join(f.args, " ")))
	return false
}

// configPath returns the config file named by --config or by the one
// positional argument, refusing both at once (when they differ) and any
// other argument. ok = false means exit 2.
func (f *flags) configPath(flagValue string) (path string, ok bool) {
	set := false
	f.Visit(func(fl *flag.Flag) { set = set || fl.Name == "config" })
	switch {
	case len(f.args) == 0 && flagValue == "":
		return defaultConfigPath, true
	case len(f.args) == 0:
		return flagValue, true
	case len(f.args) > 1:
		f.usageError(fmt.Sprintf("one config file, not %q", strings.Join(f.args, " ")))
		return "", false
	case set && f.args[0] != flagValue:
		f.usageError(fmt.Sprintf("two config files: --config %s and %s", flagValue, f.args[0]))
		return "", false
	}
	return f.args[0], true
}
