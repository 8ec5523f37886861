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
