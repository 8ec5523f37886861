// Command flaketable reads the `go test -json` output of several runs of
// the suite (one file per run, as scripts/stress.sh writes them) and
// prints a table of every test that failed in any run: in how many runs,
// and the first lines of its output from the first failing one. A
// package that failed without a failing test (a panic, a timeout, a build
// error) counts as a failure of the package itself.
package main
