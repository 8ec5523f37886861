// Package daemon is `l4lb run`: it loads and checks the config file,
// binds the admin socket and the metrics port, starts the runtime's VIPs
// (or takes an old process's sockets in an upgrade), drops capabilities,
// tells the service manager (systemd's notify protocol), and then runs the
// signal loop: SIGHUP and the admin API's reloads, SIGUSR2 and its
// upgrades, one at a time, until SIGTERM or SIGINT withdraws the BGP
// routes and drains. It implements the admin API's handlers. The upgrade
// protocol (internal/upgrade), the metrics (internal/metrics) and the BGP
// wiring (internal/announce) are packages of their own; the daemon starts
// them and holds them. It never exits the process: Run returns.
package daemon
