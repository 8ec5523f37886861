// Package health decides whether a backend may receive new flows.
//
// It has four parts, each usable alone:
//
//   - Checkers (one file per type: tcp, send_expect, postgres, mysql, redis,
//     http, tls; udp.go for udp and dns) run one probe and return a Result: OK, a reason a human can act
//     on, the TCP handshake time (the kernel's own SYN to SYN-ACK sample from
//     TCP_INFO when it has one), the time to the first reply byte, and the
//     whole duration. A check never logs; the caller does.
//   - Tracker is the pure rise/fall state machine with passive marks
//     (nginx max_fails/fail_timeout). It takes results and times, returns
//     transitions, and has no clock, goroutine or lock of its own.
//   - Manager runs the tcp checks of every target on one probe loop (a
//     goroutine with its own epoll set and one timer heap: a non-blocking
//     connect, the RTT from TCP_INFO, the same polite close; no goroutine,
//     timer or allocation per probe) and every other check type's Checker
//     on a goroutine per target. It spreads start times over the interval,
//     jitters every cycle, and reports every result and every transition
//     through one callback.
//   - SlowStartWeight ramps a recovered backend's weight.
//   - The agent check (HAProxy agent-check) runs beside a target's check
//     when its spec has an agent port: ParseAgentReply reads the agent's
//     line, AgentState holds what the agent asks for (weight share, cap,
//     drain, maint, down), reported through the same callback; a failed
//     agent check changes nothing.
//
// Hazards:
//
//   - Probes are real connections. Every checker closes with a FIN, never an
//     RST, and sends nothing a server would log as an error where the
//     protocol allows it: the tcp check sends zero bytes (PostgreSQL logs
//     nothing for those), postgres sends only an SSLRequest, redis ends with
//     QUIT, WebSocket with a Close frame. Exceptions are documented on each
//     checker: a PostgreSQL server with ssl=on logs "could not accept SSL
//     connection: EOF detected" per plain probe, and a plain MySQL probe is an
//     aborted handshake, which MySQL may count toward max_connect_errors.
//   - With Spec.ProxyHeader every probe connection starts with a PROXY
//     header (the prober's own addresses), for backends that require one;
//     the check's own bytes follow, as a proxied client's would.
//   - tcp, postgres, mysql and send_expect probes close first, so each leaves
//     one TIME_WAIT socket on the balancer for 60 s (about 60 per backend at
//     a 1 s interval; docs/bench-health.md); redis, http and WebSocket
//     probes let the server close first.
//   - The report callback runs on the probe loop, on probe goroutines and
//     on the callers of PassiveFailure/PassiveSuccess, one call at a time
//     per target and in order. It must return quickly (on the loop, a slow
//     callback delays every target's tcp probes) and must not call Set,
//     Remove, Close or the Passive methods (State is fine).
//
// Non-goals: TLS beyond a handshake (the tls check verifies a certificate
// only when asked; the postgres credentialed check may negotiate TLS), UDP
// probes beyond one datagram and its reply, DNS names (targets are
// addresses; the dns check asks a server a question), logging
// and metrics (callers own both), and weights (SlowStartWeight computes one;
// the runtime applies it).
package health
