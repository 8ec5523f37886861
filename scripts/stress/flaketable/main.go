package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// event is one line of `go test -json`.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// failure is what the table says of one test.
type failure struct {
	runs    []int
	excerpt []string
}

func main() {
	lines := flag.Int("lines", 6, "output lines shown per failing test")
	flag.Parse()
	runs := flag.Args()
	if len(runs) == 0 {
		fmt.Fprintln(os.Stderr, "usage: flaketable [-lines N] run1.json run2.json ...")
		os.Exit(2)
	}
	fails := map[string]*failure{}
	for i, path := range runs {
		if err := readRun(path, i+1, *lines, fails); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	print(os.Stdout, fails, len(runs))
	if len(fails) > 0 {
		os.Exit(1)
	}
}

// readRun adds one run's failures to fails.
func readRun(path string, run, keep int, fails map[string]*failure) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	output := map[string][]string{}  // by test, this run
	failedTests := map[string]bool{} // packages and tests with a failing test or subtest
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue // not a JSON line (make's own output)
		}
		key := e.Package
		if e.Test != "" {
			key += " " + e.Test
		}
		switch e.Action {
		case "output":
			if o := strings.TrimRight(e.Output, "\n"); strings.TrimSpace(o) != "" && !strings.HasPrefix(strings.TrimSpace(o), "=== ") {
				output[key] = append(output[key], o)
			}
		case "fail":
			if e.Test != "" {
				failedTests[e.Package] = true
				for i := range len(e.Test) { // every ancestor (a subtest's name may hold a slash)
					if e.Test[i] == '/' {
						failedTests[e.Package+" "+e.Test[:i]] = true
					}
				}
			}
			if failedTests[key] {
				continue // a test (or package) that failed because a subtest (or test) did
			}
			fl := fails[key]
			if fl == nil {
				fl = &failure{}
				fails[key] = fl
			}
			if len(fl.runs) == 0 {
				fl.excerpt = excerpt(output[key], keep)
			}
			fl.runs = append(fl.runs, run)
		}
	}
	return sc.Err()
}

// excerpt keeps the last n lines a test file wrote (file.go:line: ...,
// not the lines of a logger it installed), or else the last n lines.
func excerpt(l []string, n int) []string {
	var own []string
	for _, s := range l {
		if fileLine.MatchString(s) && !strings.Contains(s, "logger.go:") {
			own = append(own, s)
		}
	}
	if len(own) > 0 {
		l = own
	}
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return l
}

// fileLine matches a line t.Log or t.Error wrote.
var fileLine = regexp.MustCompile(`^\s+\w+\.go:\d+: `)

func print(w *os.File, fails map[string]*failure, runs int) {
	if len(fails) == 0 {
		fmt.Fprintf(w, "no test failed in %d runs\n", runs)
		return
	}
	keys := make([]string, 0, len(fails))
	for k := range fails {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintf(w, "| test | failed runs (of %d) | in runs |\n|---|---:|---|\n", runs)
	for _, k := range keys {
		fl := fails[k]
		fmt.Fprintf(w, "| %s | %d | %s |\n", k, len(fl.runs), strings.Trim(fmt.Sprint(fl.runs), "[]"))
	}
	for _, k := range keys {
		fmt.Fprintf(w, "\n%s (first failure):\n", k)
		for _, l := range fails[k].excerpt {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}
