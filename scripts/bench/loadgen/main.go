package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// subcommand is one workload: it parses args and returns the record to print.
type subcommand func(args []string) (record, error)

var subcommands = map[string]subcommand{
	"connrate": runConnRate,
	"rr":       runRR,
	"hold":     runHold,
	"wshold":   runWSHold,
	"udp":      runUDP,
	"bulk":     runBulk,
	"pgbench":  runPgbench,
	"redis":    runRedisBench,
	"probe":    runProbe,
}

// record is the JSON line of one run. Labels (test, path, round) let the
// report group runs; the other keys are the figures.
type record map[string]any

func main() {
	if len(os.Args) < 2 || subcommands[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: loadgen connrate|rr|hold|wshold|udp|bulk|pgbench|redis|probe [flags] (-h for flags)")
		os.Exit(2)
	}
	rec, err := subcommands[os.Args[1]](os.Args[2:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	if rec == nil {
		return
	}
	line, err := json.Marshal(rec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(string(line))
}

// common holds the flags every workload has.
type common struct {
	addr  string
	test  string
	path  string
	round int
	lbPid int
}

// newFlags makes the flag set of a subcommand with the common flags.
func newFlags(name string, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", "", "target ip:port (required)")
	fs.StringVar(&c.test, "test", name, "label: workload id in the report")
	fs.StringVar(&c.path, "path", "", "label: which path was measured (direct, l4lb, ...)")
	fs.IntVar(&c.round, "round", 0, "label: repetition number")
	fs.IntVar(&c.lbPid, "lbpid", 0, "balancer PID: its process tree's CPU time is measured (0 = none)")
	return fs
}

// parse parses args and checks the common flags.
func parse(fs *flag.FlagSet, c *common, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.addr == "" {
		return fmt.Errorf("-addr is required")
	}
	return nil
}

// labels starts a record with the common labels.
func (c *common) labels(kind string) record {
	return record{"kind": kind, "test": c.test, "path": c.path, "round": c.round, "addr": c.addr}
}

// watchdog ends the process if the run lasts longer than limit: the last
// line of defence when a balancer stops answering without closing.
func watchdog(limit time.Duration) {
	time.AfterFunc(limit, func() {
		fmt.Fprintf(os.Stderr, "loadgen: watchdog: run exceeded %v, exiting\n", limit)
		os.Exit(3)
	})
}

// errorCounter counts errors by kind and keeps a few examples.
type errorCounter struct {
	byKind   map[string]int
	examples []string
}

func newErrorCounter() *errorCounter { return &errorCounter{byKind: map[string]int{}} }

func (e *errorCounter) add(kind string, err error) {
	e.byKind[kind]++
	if len(e.examples) < 3 {
		e.examples = append(e.examples, kind+": "+err.Error())
	}
}

func (e *errorCounter) merge(o *errorCounter) {
	for k, n := range o.byKind {
		e.byKind[k] += n
	}
	for _, ex := range o.examples {
		if len(e.examples) < 3 {
			e.examples = append(e.examples, ex)
		}
	}
}

func (e *errorCounter) total() int {
	n := 0
	for _, v := range e.byKind {
		n += v
	}
	return n
}

// put adds the error figures to rec.
func (e *errorCounter) put(rec record) {
	rec["errors"] = e.total()
	if len(e.byKind) > 0 {
		rec["errors_by_kind"] = e.byKind
		rec["error_examples"] = strings.Join(e.examples, " | ")
	}
}
