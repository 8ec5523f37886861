package bfd

import (
	"testing"
	"time"
)

// upFSM is a session driven to state st by the packets the RFC's diagram
// takes, at t0.
func fsmIn(t *testing.T, st State, t0 time.Time) fsm {
	t.Helper()
	f := newFSM(11, 100*time.Millisecond, 3)
	peer := func(s State) *Packet {
		return &Packet{State: s, DetectMult: 3, MyDiscr: 22, YourDiscr: 11, DesiredMinTx: 100000, RequiredMinRx: 100000}
	}
	switch st {
	case StateInit:
		f.receive(t0, peer(StateDown))
	case StateUp:
		f.receive(t0, peer(StateDown))
		f.receive(t0, peer(StateUp))
	case StateAdminDown:
		f.adminDown()
	}
	if f.state != st {
		t.Fatalf("could not reach %v: in %v", st, f.state)
	}
	return f
}

// TestFSMTransitions is RFC 5880 section 6.2's diagram, every arrow and
// every loop, with the diagnostic section 6.8.6 and 6.8.4 set.
func TestFSMTransitions(t *testing.T) {
	const timer = State(255) // the detection timer instead of a packet
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		from, event, to State
		diag            Diag
	}{
		{StateDown, StateDown, StateInit, DiagNone},
		{StateDown, StateInit, StateUp, DiagNone},
		{StateDown, StateUp, StateDown, DiagNone},
		{StateDown, StateAdminDown, StateDown, DiagNone},
		{StateDown, timer, StateDown, DiagNone},
		{StateInit, StateDown, StateInit, DiagNone},
		{StateInit, StateInit, StateUp, DiagNone},
		{StateInit, StateUp, StateUp, DiagNone},
		{StateInit, StateAdminDown, StateDown, DiagNeighborDown},
		{StateInit, timer, StateDown, DiagTimeExpired},
		{StateUp, StateInit, StateUp, DiagNone},
		{StateUp, StateUp, StateUp, DiagNone},
		{StateUp, StateDown, StateDown, DiagNeighborDown},
		{StateUp, StateAdminDown, StateDown, DiagNeighborDown},
		{StateUp, timer, StateDown, DiagTimeExpired},
		// A session this end stopped ignores everything (section 6.8.6).
		{StateAdminDown, StateDown, StateAdminDown, DiagAdminDown},
		{StateAdminDown, StateUp, StateAdminDown, DiagAdminDown},
		{StateAdminDown, timer, StateAdminDown, DiagAdminDown},
	} {
		f := fsmIn(t, c.from, t0)
		var o outcome
		if c.event == timer {
			o = f.expire(t0.Add(time.Hour))
		} else {
			your := uint32(11)
			if c.event == StateDown || c.event == StateAdminDown {
				your = 0
			}
			o = f.receive(t0.Add(time.Millisecond), &Packet{State: c.event, DetectMult: 3, MyDiscr: 22, YourDiscr: your, DesiredMinTx: 100000, RequiredMinRx: 100000})
		}
		name := c.event.String()
		if c.event == timer {
			name = "timer"
		}
		if f.state != c.to || f.diag != c.diag {
			t.Errorf("%v + %s: %v diag %v, want %v diag %v", c.from, name, f.state, f.diag, c.to, c.diag)
		}
		if o.changed != (c.from != c.to) || (o.changed && (o.from != c.from || !o.send)) {
			t.Errorf("%v + %s: outcome %+v", c.from, name, o)
		}
	}
}

func TestFSMDetectionTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := fsmIn(t, StateUp, t0)
	if d := f.detectTime(); d != 300*time.Millisecond {
		t.Fatalf("detection time %v, want 3 x 100ms", d)
	}
	if o := f.expire(t0.Add(299 * time.Millisecond)); o.changed || f.state != StateUp {
		t.Fatalf("expired before the detection time: %v", f.state)
	}
	if o := f.expire(t0.Add(300 * time.Millisecond)); !o.changed || f.state != StateDown || f.remoteDiscr != 0 {
		t.Fatalf("not down at the detection time: %v, remote discr %d", f.state, f.remoteDiscr)
	}
	if f.detectTime() != 0 {
		t.Fatalf("detection timer still armed after expiry")
	}
	// The larger of this end's RequiredMinRx and the remote's
	// DesiredMinTx, times the remote's multiplier.
	f = newFSM(1, 100*time.Millisecond, 3)
	f.receive(t0, &Packet{State: StateDown, DetectMult: 5, MyDiscr: 2, DesiredMinTx: 1000000, RequiredMinRx: 50000})
	if d := f.detectTime(); d != 5*time.Second {
		t.Fatalf("detection time %v, want 5 x 1s", d)
	}
}

func TestFSMTransmitInterval(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := newFSM(1, 100*time.Millisecond, 3)
	if f.txInterval() != time.Second || f.packet().DesiredMinTx != 1000000 {
		t.Fatalf("not up: interval %v, want the slow 1s (section 6.8.3)", f.txInterval())
	}
	f = fsmIn(t, StateUp, t0)
	if f.txInterval() != 100*time.Millisecond {
		t.Fatalf("up: interval %v", f.txInterval())
	}
	f.receive(t0, &Packet{State: StateUp, DetectMult: 3, MyDiscr: 22, YourDiscr: 11, DesiredMinTx: 100000, RequiredMinRx: 250000})
	if f.txInterval() != 250*time.Millisecond {
		t.Fatalf("remote wants 250ms: interval %v", f.txInterval())
	}
	f.receive(t0, &Packet{State: StateUp, DetectMult: 3, MyDiscr: 22, YourDiscr: 11, DesiredMinTx: 100000, RequiredMinRx: 0})
	if f.mayTransmit() {
		t.Fatal("remote RequiredMinRx 0: periodic packets must stop (section 6.8.7)")
	}
}

func TestFSMPollFinal(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := fsmIn(t, StateUp, t0)
	// Going Up lowered DesiredMinTx from 1s: a Poll Sequence runs.
	if p := f.packet(); !p.Poll || p.Final || p.State != StateUp || p.DesiredMinTx != 100000 || p.RequiredMinRx != 100000 || p.YourDiscr != 22 || p.MyDiscr != 11 {
		t.Fatalf("first packet when up: %+v", p)
	}
	// A Poll from the remote is answered at once with F, never with P too.
	o := f.receive(t0, &Packet{State: StateUp, Poll: true, DetectMult: 3, MyDiscr: 22, YourDiscr: 11, DesiredMinTx: 100000, RequiredMinRx: 100000})
	if !o.send {
		t.Fatal("a Poll must be answered at once")
	}
	if p := f.packet(); !p.Final || p.Poll {
		t.Fatalf("answer to a poll: %+v", p)
	}
	if p := f.packet(); p.Final || !p.Poll {
		t.Fatalf("after the answer: %+v, want our own poll going on", p)
	}
	// The remote's Final ends our Poll Sequence.
	f.receive(t0, &Packet{State: StateUp, Final: true, DetectMult: 3, MyDiscr: 22, YourDiscr: 11, DesiredMinTx: 100000, RequiredMinRx: 100000})
	if p := f.packet(); p.Poll || p.Final {
		t.Fatalf("after the remote's final: %+v", p)
	}
}

func TestFSMRefusesAuthAndRemembersRemote(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := newFSM(1, 100*time.Millisecond, 3)
	if o := f.receive(t0, &Packet{State: StateDown, Auth: true, DetectMult: 3, MyDiscr: 9}); !o.dropped || f.remoteDiscr != 0 {
		t.Fatalf("a packet with the A bit must be discarded without authentication: %+v", o)
	}
	f.receive(t0, &Packet{State: StateDown, DetectMult: 3, MyDiscr: 9})
	if p := f.packet(); p.YourDiscr != 9 || p.State != StateInit {
		t.Fatalf("after the remote's Down: %+v", p)
	}
}

func TestChangeFailure(t *testing.T) {
	for _, c := range []struct {
		ch   Change
		want bool
	}{
		{Change{From: StateUp, To: StateDown, Diag: DiagTimeExpired, RemoteState: StateDown}, true},
		{Change{From: StateUp, To: StateDown, Diag: DiagNeighborDown, RemoteState: StateDown}, true},
		{Change{From: StateUp, To: StateDown, Diag: DiagNeighborDown, RemoteState: StateAdminDown}, false},
		{Change{From: StateInit, To: StateDown, Diag: DiagTimeExpired}, false},
		{Change{From: StateDown, To: StateInit}, false},
	} {
		if got := c.ch.Failure(); got != c.want {
			t.Errorf("%+v: failure %v, want %v", c.ch, got, c.want)
		}
	}
}

func TestJitter(t *testing.T) {
	d := 100 * time.Millisecond
	for range 2000 {
		if j := jitter(d, 3); j < 75*time.Millisecond || j >= d {
			t.Fatalf("jitter %v outside 75..100%% of %v", j, d)
		}
		if j := jitter(d, 1); j < 75*time.Millisecond || j >= 90*time.Millisecond {
			t.Fatalf("multiplier 1: jitter %v outside 75..90%% of %v", j, d)
		}
	}
}
