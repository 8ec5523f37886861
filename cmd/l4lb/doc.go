// Command l4lb is a Layer-4 TCP/UDP load balancer: `l4lb run` serves the
// VIPs of a TOML file, `l4lb check` validates one, `l4lb status` asks a
// running instance what it serves.
package main
