package proxy

import (
	"testing"
	"time"
)

func TestRateLogAllowsOnePerInterval(t *testing.T) {
	r := rateLog{every: 50 * time.Millisecond}
	if !r.allow() || r.allow() || r.allow() {
		t.Fatal("want the first line only within the interval")
	}
	time.Sleep(60 * time.Millisecond)
	if !r.allow() {
		t.Fatal("no line allowed after the interval")
	}
}
