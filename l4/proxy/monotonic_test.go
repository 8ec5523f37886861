package proxy

import (
	"testing"
	"time"
)

// TestUnderPressureUsesLoopClock: the pause after a local-resource
// failure is measured on the loops' monotonic clock only. Moving that
// clock (and nothing else) ends the pause; a wall clock stepped back
// (simulated: no real time passes) must not make it last. With the wall
// clock in the comparison, the last two rows fail.
func TestUnderPressureUsesLoopClock(t *testing.T) {
	s := &TCPService{}
	l := &loop{clock: int64(time.Hour)}
	if s.underPressure(l) {
		t.Fatal("under pressure before any failure")
	}
	s.notePressure(l)
	for _, tc := range []struct {
		after time.Duration
		want  bool
	}{
		{0, true},
		{pressureFor / 2, true},
		{pressureFor, false},
		{time.Hour, false},
	} {
		l.clock = int64(time.Hour + tc.after)
		if got := s.underPressure(l); got != tc.want {
			t.Errorf("%v after the failure on the loop clock: under pressure %v, want %v", tc.after, got, tc.want)
		}
	}
}

// TestHandoverAgeIgnoresWallClock: a connection handed over in an upgrade
// keeps its age by the host's monotonic clock, whatever the wall clock
// says (here: Started an hour in the future, as after a step back); only
// a state from an older process without it falls back to the wall clock.
func TestHandoverAgeIgnoresWallClock(t *testing.T) {
	const age = 5 * time.Second
	st := ConnState{Started: time.Now().Add(time.Hour).Round(0), StartedMono: hostMono() - int64(age)}
	if got := time.Duration(acceptAge(st)); got < age || got > age+time.Second {
		t.Fatalf("age %v, want about %v (the wall clock must not count)", got, age)
	}
	old := ConnState{Started: time.Now().Add(-age).Round(0)}
	if got := time.Duration(acceptAge(old)); got < age || got > age+time.Second {
		t.Fatalf("age from an older process %v, want about %v", got, age)
	}
}
