// Command xdpreport turns the output of the XDP benchmarks (several runs
// of `go test -bench`, concatenated on stdin) into the markdown tables of
// docs/bench-xdp.md: medians per benchmark, request and connection rates
// of the xdp and proxy paths next to direct, and the balancer's CPU per
// request (a path's machine CPU per op minus the direct path's).
package main
