// tracker_test.go: table tests of the rise/fall state machine and passive marks.

package health

import (
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// step is one input to a tracker: an active result ('+' ok, '-' fail), a
// passive failure ('p') or success ('s'), or an expiry check ('e'), at an
// offset from t0.
type step struct {
	in   byte
	at   time.Duration
	want l4.Health
}

const (
	U = l4.HealthUnknown
	H = l4.HealthUp
	D = l4.HealthDown
)

// seq builds steps from a string of inputs and the states after each,
// one second apart.
func seq(inputs string, states ...l4.Health) []step {
	s := make([]step, len(inputs))
	for i := range inputs {
		s[i] = step{inputs[i], time.Duration(i) * time.Second, states[i]}
	}
	return s
}

func TestTracker(t *testing.T) {
	cfg := TrackerConfig{Rise: 2, Fall: 3, MaxFails: 2, FailTimeout: 10 * time.Second}
	cases := []struct {
		name  string
		cfg   TrackerConfig
		steps []step
	}{
		{"first success decides up", cfg, seq("+", H)},
		{"first failure decides down", cfg, seq("-", D)},
		{"down needs rise", cfg, seq("-++", D, D, H)},
		{"up needs fall", cfg, seq("+---", H, H, H, D)},
		{"fall run reset by success", cfg, seq("+--+--", H, H, H, H, H, H)},
		{"rise run reset by failure", cfg, seq("-+-++", D, D, D, D, H)},
		{"rise 1 fall 1 flaps", TrackerConfig{Rise: 1, Fall: 1}, seq("+-+-", H, D, H, D)},
		{"passive max_fails marks down at once", cfg, seq("+pp", H, H, D)},
		{"passive from unknown", cfg, seq("pp", U, D)},
		{"passive does not add to fall", cfg, seq("+p--", H, H, H, H)},
		{"passive down needs rise", cfg, seq("+pp++", H, H, D, D, H)},
		{"passive resets rise run", cfg, seq("-+p+", D, D, D, D)},
		{"passive off", TrackerConfig{Rise: 2, Fall: 3}, seq("+pppp", H, H, H, H, H)},
		{"expire puts on trial, a success brings it up", cfg, []step{
			{'p', 0, U}, {'p', time.Second, D}, {'e', 5 * time.Second, D}, {'e', 11 * time.Second, U}, {'s', 12 * time.Second, H}}},
		{"on trial, one failure takes it down again", cfg, []step{
			{'p', 0, U}, {'p', time.Second, D}, {'e', 11 * time.Second, U}, {'p', 12 * time.Second, D}, {'e', 21 * time.Second, D}, {'e', 22 * time.Second, U}}},
		{"a success off trial changes nothing", cfg, []step{{'s', 0, U}, {'+', 0, H}, {'s', 0, H}}},
		{"expire ignores active down", cfg, []step{{'-', 0, D}, {'e', time.Hour, D}}},
		{"passive window slides", cfg, []step{
			{'+', 0, H}, {'p', 0, H}, {'p', 11 * time.Second, H}, {'p', 15 * time.Second, D}}},
	}
	t0 := time.Unix(1_000_000, 0)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := NewTracker(c.cfg)
			for i, s := range c.steps {
				before := tr.State()
				got := apply(tr, s, t0)
				if got.Old != before || got.New != s.want || tr.State() != s.want {
					t.Fatalf("step %d (%c at %v): %v -> %v, want %v -> %v", i, s.in, s.at, got.Old, got.New, before, s.want)
				}
			}
		})
	}
}

func apply(tr *Tracker, s step, t0 time.Time) Transition {
	switch s.in {
	case '+':
		return tr.Observe(true)
	case '-':
		return tr.Observe(false)
	case 'p':
		return tr.PassiveFailure(t0.Add(s.at))
	case 's':
		return tr.PassiveOK()
	}
	return tr.Expire(t0.Add(s.at))
}

func TestTrackerCounts(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	tr := NewTracker(TrackerConfig{Rise: 2, Fall: 3, MaxFails: 3, FailTimeout: 10 * time.Second})
	tr.Observe(true)
	tr.Observe(true)
	if ok, fail := tr.Runs(); ok != 2 || fail != 0 {
		t.Fatalf("runs %d/%d, want 2/0", ok, fail)
	}
	tr.PassiveFailure(t0)
	tr.PassiveFailure(t0.Add(time.Second))
	if n := tr.PassiveFails(t0.Add(2 * time.Second)); n != 2 {
		t.Fatalf("passive fails %d, want 2", n)
	}
	if n := tr.PassiveFails(t0.Add(10500 * time.Millisecond)); n != 1 {
		t.Fatalf("passive fails after the first left the window: %d, want 1", n)
	}
	if ok, _ := tr.Runs(); ok != 0 {
		t.Fatalf("passive failure kept the success run at %d", ok)
	}
	tr.PassiveFailure(t0.Add(2 * time.Second))
	if !tr.PassiveDown() {
		t.Fatal("three passive failures within the window did not mark down")
	}
	tr.Reconfigure(TrackerConfig{Rise: 1, Fall: 1, MaxFails: 3, FailTimeout: time.Second})
	if tr.State() != D {
		t.Fatal("reconfigure changed the state")
	}
	if tr.Observe(true); tr.State() != H {
		t.Fatal("rise 1 after reconfigure did not bring it up")
	}
}

// TestTrackerStartDown: a tracker started down (its target was down in
// the previous process) needs Rise successes, not the first; one that has
// seen a result already is left as it is.
func TestTrackerStartDown(t *testing.T) {
	tr := NewTracker(TrackerConfig{Rise: 3, Fall: 2})
	tr.StartDown()
	for i, want := range []l4.Health{D, D, H} {
		if tr.Observe(true); tr.State() != want {
			t.Fatalf("success %d: %v, want %v", i+1, tr.State(), want)
		}
	}
	seen := NewTracker(TrackerConfig{Rise: 3, Fall: 2})
	seen.Observe(true)
	if seen.StartDown(); seen.State() != H {
		t.Fatalf("StartDown after a result: %v, want it left up", seen.State())
	}
}
