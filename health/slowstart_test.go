// slowstart_test.go: the slow-start weight ramp.

package health

import (
	"testing"
	"time"
)

func TestSlowStartWeight(t *testing.T) {
	up := time.Unix(1_000_000, 0)
	const win = 100 * time.Second
	cases := []struct {
		name    string
		weight  uint32
		elapsed time.Duration
		window  time.Duration
		want    uint32
	}{
		{"no window", 100, 0, 0, 100},
		{"start", 100, 0, win, 10},
		{"clock stepped back", 100, -time.Second, win, 10},
		{"quarter", 100, 25 * time.Second, win, 32},
		{"half", 100, 50 * time.Second, win, 55},
		{"almost", 100, 99 * time.Second, win, 99},
		{"end", 100, win, win, 100},
		{"after", 100, time.Hour, win, 100},
		{"weight 1 floor is 1", 1, 0, win, 1},
		{"weight 5 floor is 1", 5, 0, win, 1},
		{"drain stays 0", 0, 10 * time.Second, win, 0},
		{"max weight", 1 << 31, 50 * time.Second, win, 1<<31/10 + (1<<31-1<<31/10)/2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := SlowStartWeight(c.weight, up, up.Add(c.elapsed), c.window); got != c.want {
				t.Fatalf("SlowStartWeight(%d, +%v, %v) = %d, want %d", c.weight, c.elapsed, c.window, got, c.want)
			}
		})
	}
	if got := SlowStartWeight(100, time.Time{}, up, win); got != 100 {
		t.Fatalf("zero upSince gave %d, want full weight", got)
	}
}

// TestSlowStartMonotonic: the ramp never goes down and stays within bounds.
func TestSlowStartMonotonic(t *testing.T) {
	up := time.Unix(1_000_000, 0)
	for _, w := range []uint32{1, 2, 7, 100, 1000, 1<<32 - 1} {
		prev := uint32(0)
		for ms := 0; ms <= 10_000; ms += 37 {
			got := SlowStartWeight(w, up, up.Add(time.Duration(ms)*time.Millisecond), 10*time.Second)
			if got < prev || got < 1 || got > w {
				t.Fatalf("weight %d at %dms: %d (previous %d)", w, ms, got, prev)
			}
			prev = got
		}
		if end := SlowStartWeight(w, up, up.Add(10*time.Second), 10*time.Second); end != w {
			t.Fatalf("weight %d ends at %d", w, end)
		}
	}
}
