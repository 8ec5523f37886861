// A session's state machine and timer arithmetic (RFC 5880 sections 6.8.1
// to 6.8.7): pure, driven by the packets and the clock the session gives it.

package bfd

import "time"

// SlowTxInterval is the least DesiredMinTxInterval a session advertises
// while it is not Up (RFC 5880 section 6.8.3: at least one second).
const SlowTxInterval = time.Second

// fsm is one session's state variables (RFC 5880 section 6.8.1) and its
// timers' inputs. Its methods never block, allocate or read the clock.
type fsm struct {
	// Configured: the interval this end wants to send and receive at
	// while Up, and its detect multiplier.
	interval time.Duration
	mult     uint8

	state       State
	remoteState State
	localDiscr  uint32
	remoteDiscr uint32
	diag        Diag
	// remoteMinRx is bfd.RemoteMinRxInterval; remoteMinTx and remoteMult
	// are the remote's advertised DesiredMinTx and DetectMult, which make
	// the Detection Time (section 6.8.4). remoteMult 0: no packet since
	// the last expiry, so no detection timer runs.
	remoteMinRx time.Duration
	remoteMinTx time.Duration
	remoteMult  uint8
	poll        bool // a Poll Sequence is under way (section 6.5)
	final       bool // the next packet answers a Poll with F
	lastRx      time.Time
}

func newFSM(localDiscr uint32, interval time.Duration, mult uint8) fsm {
	return fsm{interval: interval, mult: mult, state: StateDown, remoteState: StateDown,
		localDiscr: localDiscr, remoteMinRx: time.Microsecond}
}

// outcome is what a packet or a timer did to the session.
type outcome struct {
	changed bool  // the state changed (from -> fsm.state)
	from    State // the state before
	send    bool  // send a packet now (a Final, or a new state)
	dropped bool  // the packet was discarded
}

// desiredMinTx is bfd.DesiredMinTxInterval: the configured interval while
// Up, at least SlowTxInterval otherwise (section 6.8.3).
func (f *fsm) desiredMinTx() time.Duration {
	if f.state == StateUp {
		return f.interval
	}
	return max(f.interval, SlowTxInterval)
}

// txInterval is the interval between periodic packets before jitter: the
// larger of what this end wants and what the remote can receive (section
// 6.8.7).
func (f *fsm) txInterval() time.Duration { return max(f.desiredMinTx(), f.remoteMinRx) }

// detectTime is the Detection Time in asynchronous mode (section 6.8.4):
// the remote's multiplier times the larger of this end's RequiredMinRx
// and the remote's DesiredMinTx; 0 while no packet arms the timer.
func (f *fsm) detectTime() time.Duration {
	if f.remoteMult == 0 {
		return 0
	}
	return time.Duration(f.remoteMult) * max(f.interval, f.remoteMinTx)
}

// mayTransmit: periodic transmission stops while the remote has asked for
// no packets (RemoteMinRxInterval 0, section 6.8.7).
func (f *fsm) mayTransmit() bool { return f.remoteMinRx != 0 }

func (f *fsm) setState(s State, d Diag, o *outcome) {
	if s == f.state {
		return
	}
	o.changed, o.from, o.send = true, f.state, true
	f.state, f.diag = s, d
	// Section 6.8.3: DesiredMinTx changes with Up; a change while Up is
	// announced by a Poll Sequence. Going Up lowers it from the slow
	// rate: start one, so the remote learns the new rate from a packet
	// it must answer.
	if s == StateUp && f.interval != SlowTxInterval {
		f.poll = true
	}
	if s != StateUp {
		f.poll = false
	}
}

// receive applies a decoded packet at now (section 6.8.6, after the
// checks Decode did and the session was found).
func (f *fsm) receive(now time.Time, p *Packet) outcome {
	var o outcome
	if p.Auth { // no authentication configured: section 6.8.6
		o.dropped = true
		return o
	}
	f.remoteDiscr = p.MyDiscr
	f.remoteState = p.State
	f.remoteMinRx = time.Duration(p.RequiredMinRx) * time.Microsecond
	f.remoteMinTx = time.Duration(p.DesiredMinTx) * time.Microsecond
	f.remoteMult = p.DetectMult
	f.lastRx = now
	if p.Final && f.poll {
		f.poll = false
	}
	if f.state == StateAdminDown {
		o.dropped = true
		return o
	}
	switch {
	case p.State == StateAdminDown:
		if f.state != StateDown {
			f.setState(StateDown, DiagNeighborDown, &o)
		}
	case f.state == StateDown:
		switch p.State {
		case StateDown:
			f.setState(StateInit, DiagNone, &o)
		case StateInit:
			f.setState(StateUp, DiagNone, &o)
		}
	case f.state == StateInit:
		if p.State == StateInit || p.State == StateUp {
			f.setState(StateUp, DiagNone, &o)
		}
	default: // Up
		if p.State == StateDown {
			f.setState(StateDown, DiagNeighborDown, &o)
		}
	}
	if p.Poll {
		f.final, o.send = true, true
	}
	return o
}

// expire runs when the detection timer may have fired at now: if a
// Detection Time passed without a packet, the remote is forgotten
// (RemoteDiscr 0, section 6.8.1) and an Init or Up session goes Down with
// diagnostic 1 (section 6.8.4).
func (f *fsm) expire(now time.Time) outcome {
	var o outcome
	d := f.detectTime()
	if d == 0 || now.Sub(f.lastRx) < d {
		return o
	}
	f.remoteDiscr = 0
	f.remoteMult = 0
	f.remoteState = StateDown
	if f.state == StateInit || f.state == StateUp {
		f.setState(StateDown, DiagTimeExpired, &o)
	}
	return o
}

// adminDown stops the session (section 6.8.16): it sends AdminDown with
// diagnostic 7 from now on and ignores what it receives.
func (f *fsm) adminDown() outcome {
	var o outcome
	f.setState(StateAdminDown, DiagAdminDown, &o)
	return o
}

// packet is the next Control packet (section 6.8.7); it clears the
// pending Final. P and F are never both set.
func (f *fsm) packet() Packet {
	p := Packet{
		Diag:          f.diag,
		State:         f.state,
		Final:         f.final,
		Poll:          f.poll && !f.final,
		DetectMult:    f.mult,
		Length:        PacketLen,
		MyDiscr:       f.localDiscr,
		YourDiscr:     f.remoteDiscr,
		DesiredMinTx:  uint32(f.desiredMinTx() / time.Microsecond),
		RequiredMinRx: uint32(f.interval / time.Microsecond),
	}
	f.final = false
	return p
}
