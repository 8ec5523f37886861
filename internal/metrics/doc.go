// Package metrics serves l4lb's Prometheus metrics: a collector that reads
// the runtime's status once per scrape (the data plane keeps only its own
// atomics and pays nothing between scrapes) and turns it into the l4lb_*
// series, and the HTTP server on metrics_listen that exposes them with the
// Go runtime's and the process's (and the status page of
// internal/statuspage beside them). It reads the status wire types
// (l4/plane) and, of the rest of the project, only mounts that page.
package metrics
