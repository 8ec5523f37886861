// Command iocopy is the naive Go TCP proxy that `make bench` compares l4lb
// with: accept, dial the next backend round-robin, io.Copy each direction
// between the raw *net.TCPConn (splice(2) underneath), CloseWrite on EOF.
// No health checks, no limits, no timeouts: a baseline, not a product.
//
//	iocopy -map 198.18.2.10:8080=198.18.1.11:8080,198.18.1.12:8080 [-map ...]
package main
