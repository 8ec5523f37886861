// Command loadgen is the load generator of `make bench`: it drives the TCP
// and UDP workloads against a balancer (or a backend directly), itself or
// through iperf3, pgbench and redis-benchmark, reads the balancer's CPU
// time and memory from /proc, and prints one JSON line per run on stdout
// (human-readable text goes to stderr).
//
//	loadgen connrate -addr A -c 64 -d 8s -warmup 1s   new connections/s (HTTP/1.0 GET, Connection: close)
//	loadgen rr       -addr A -c 4 -rate 2000 -d 8s    persistent request/response (TCP echo); -rate 0 = closed loop
//	loadgen hold     -addr A -n 5000 -hold 10s -pidfile F   idle connections, balancer RSS per connection
//	loadgen wshold   -addr A -n 5000 -hold 10s -pidfile F   WebSockets held, a message each a second: echo RTT, balancer RSS and CPU per message
//	loadgen udp      -addr A -flows 4 -inflight 8 -size 64 -d 8s   UDP request/response rate and loss
//	loadgen bulk     -addr A -P 8 -t 10               iperf3 client, throughput and retransmits
//	loadgen pgbench  -addr A -c 16 -j 2 -T 8          pgbench -S (select-only): TPS, average latency
//	loadgen redis    -addr A -t get -n 100000 -c 50   redis-benchmark, one command: req/s, latency
//	loadgen probe    -addr A -kind http|echo|udp|pg|redis|ws   wait until a service answers
//
// Every run is bounded twice: by its own duration flags and by a watchdog
// that ends the process if the run overstays them (a stuck balancer must
// not hang the benchmark).
package main
