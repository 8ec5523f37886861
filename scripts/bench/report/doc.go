// Command report turns the raw records of `make bench` (one JSON line per
// workload run, from loadgen or scripts/bench.sh) into markdown: a table of
// medians over the rounds, each with its ratio to `direct` and to the best
// peer (the best of HAProxy and nginx in that row), the l4lb ÷ iocopy ratio,
// what the balancers logged and counted, and every round's figures. It
// prints the document on stdout and, with -out, writes it to a file.
package main
