// Command counterdoc writes the reference of the data planes' status
// counters, docs/counters.md, from the tags of l4/plane's status types:
// each counter's place in the text status, its JSON name, its Prometheus
// series and what it counts (`make docs`).
package main

//go:generate go run . -o ../../../../docs/counters.md
