// Command xdpcompare sums up scripts/bench-xdp-compare.sh's measurements
// (lines "benchmark side round value" on stdin, side old or new, one line
// per map setup) into a markdown table: per benchmark the median of every
// setup of each side, their ratio, and the spread of that ratio over the
// rounds (each round's ratio of its own medians), so that a reader sees
// how far one figure can be trusted.
package main
