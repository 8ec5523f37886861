// agent.go: the agent check (HAProxy agent-check): connect to an agent beside the backend, read one line, report what it asks for.

package health

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"
)

// AgentSpec configures a target's agent check. The zero value is off.
type AgentSpec struct {
	// Port is the agent's TCP port on the backend's address; 0 = off.
	Port uint16
	// Interval between agent checks (0: the check's interval) and the
	// time one may take (0: the check's timeout).
	Interval time.Duration
	Timeout  time.Duration
	// Send is written once connected (HAProxy agent-send); nil: the
	// agent speaks first.
	Send []byte
}

// On reports whether the agent check runs.
func (a AgentSpec) On() bool { return a.Port != 0 }

// withDefaults fills the agent's zero durations from the check's s.
func (a AgentSpec) withDefaults(s Spec) AgentSpec {
	if !a.On() {
		return AgentSpec{}
	}
	if a.Interval == 0 {
		a.Interval = s.Interval
	}
	if a.Timeout == 0 {
		a.Timeout = min(s.Timeout, a.Interval)
	}
	return a
}

// validate checks a defaulted agent spec.
func (a AgentSpec) validate() error {
	switch {
	case a.Interval < 0 || a.Timeout < 0:
		return errors.New("negative interval or timeout")
	case a.Timeout > a.Interval:
		return fmt.Errorf("timeout %v exceeds interval %v", a.Timeout, a.Interval)
	case len(a.Send) > maxAgentReply:
		return fmt.Errorf("send of %d bytes is more than %d", len(a.Send), maxAgentReply)
	}
	return nil
}

// agentChecker runs one agent check: connect to the agent's port, send
// Send, read one line (up to a newline, the agent's close, or 1 KiB),
// parse it. Failing to reach the agent changes nothing (HAProxy: the
// regular check tests connectivity); the caller keeps the state.
type agentChecker struct {
	opts connOpts
	send []byte
}

func newAgentChecker(s Spec) *agentChecker {
	// Agents take no PROXY header, and listen on the backend host's own
	// address: never through the data plane's route to the VIP there.
	o := connOpts{timeout: s.Agent.Timeout}
	return &agentChecker{opts: o, send: bytes.Clone(s.Agent.Send)}
}

// check returns the agent's line and its parsed reply, or why there is
// none.
func (ch *agentChecker) check(ctx context.Context, addr netip.AddrPort) (string, AgentReply, error) {
	var line string
	var reply AgentReply
	var failed error
	res := overConn(ctx, ch.opts, addr, func(p *probe, c net.Conn) {
		if len(ch.send) > 0 {
			if _, err := c.Write(ch.send); err != nil {
				p.failErr(err, "sending to the agent")
				return
			}
		}
		var err error
		line, err = readAgentLine(c)
		if err != nil {
			if line == "" {
				p.failErr(err, "waiting for the agent's reply")
				if errors.Is(err, io.EOF) {
					p.fail("agent closed the connection without a reply")
				}
				return
			}
		}
		if reply, failed = ParseAgentReply(line); failed == nil {
			p.pass()
		}
	})
	switch {
	case failed != nil:
		return line, AgentReply{}, failed
	case !res.OK:
		return line, AgentReply{}, errors.New(res.Reason)
	}
	return line, reply, nil
}

// readAgentLine reads up to a newline; a line the agent ended by closing
// counts too.
func readAgentLine(c net.Conn) (string, error) {
	br := bufio.NewReaderSize(io.LimitReader(c, maxAgentReply), maxAgentReply)
	line, err := br.ReadString('\n')
	if err == nil || (errors.Is(err, io.EOF) && line != "") {
		return line, nil
	}
	return line, err
}

// agentLoop is a target's agent goroutine: like loop, with its own
// interval and checker, reporting through target.observeAgent.
type agentLoop struct {
	m        *Manager
	t        *target
	checker  *agentChecker
	addr     netip.AddrPort
	interval time.Duration
}

func (l agentLoop) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	next := time.Now().Add(rand.N(l.interval))
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		line, reply, err := l.checker.check(ctx, l.addr)
		if ctx.Err() != nil {
			return
		}
		l.t.observeAgent(l.m, line, reply, err)
		next = next.Add(jittered(l.interval))
		if now := time.Now(); next.Before(now) {
			next = now
		}
		timer.Reset(time.Until(next))
	}
}
