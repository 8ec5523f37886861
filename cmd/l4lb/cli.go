// Command-line parsing shared by the subcommands: help, positional paths,
// unexpected arguments.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

const defaultConfigPath = "/etc/l4lb/l4lb.toml"

// flags is one subcommand's flag set. Its --help prints the command's help
// to stdout (exit 0); a bad flag or argument prints the error and the
// usage to stderr (exit 2).
type flags struct {
	*flag.FlagSet
	cmd    command
	stdout io.Writer
	args   []string // positional arguments, wherever they stood among the flags
}

func newFlags(name string, stdout, stderr io.Writer) *flags {
	f := &flags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), stdout: stdout}
	for _, c := range commands() {
		if c.name == name {
			f.cmd = c
		}
	}
	f.SetOutput(stderr)
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
		fmt.Fprint(f.stdout, commandHelp(f.cmd), "\nflags:\n")
		f.SetOutput(f.stdout)
		f.PrintDefaults()
		return 0, false
	case err != nil:
		f.usageError("")
		return 2, false
	}
	return 0, true
}

// usageError prints msg (if any) and the command's usage line to stderr.
func (f *flags) usageError(msg string) {
	out := f.Output()
	if msg != "" {
		fmt.Fprintf(out, "l4lb %s: %s\n", f.Name(), msg)
	}
	fmt.Fprintf(out, "usage: l4lb %s %s (l4lb help %s)\n", f.Name(), f.cmd.usage, f.Name())
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
