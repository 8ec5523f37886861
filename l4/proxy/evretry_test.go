package proxy

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/l4lb/l4lb/l4"
)

// resetAtAccept resets every connection as it is accepted, reading
// nothing (a server whose process dies between accept and its first read).
func resetAtAccept(c *net.TCPConn) { c.SetLinger(0); c.Close() }

// resetAfterRead reads the client's first bytes and then resets (a server
// that crashed on a request before answering it).
func resetAfterRead(c *net.TCPConn) {
	var b [1]byte
	_, _ = c.Read(b[:])
	c.SetLinger(0)
	c.Close()
}

// TestRetryOnEarlyReset: connections to a backend that accepts and then
// resets before sending a byte are retried on the other backend, by
// retry_on_reset: "unsent" while no client byte was written to the one
// that reset (the client speaks after a pause), "unanswered" also after
// they were (the client speaks at once, the backend read its bytes):
// every client gets its echo back, and the early resets are counted.
// Without the policy that fits, some clients see the reset.
func TestRetryOnEarlyReset(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend func(*net.TCPConn)
		pause   time.Duration // before the client's first byte
		policy  l4.RetryOnReset
		allOK   bool
	}{
		{"unsent/reset-at-accept", resetAtAccept, 100 * time.Millisecond, l4.RetryResetUnsent, true},
		{"unanswered/reset-at-accept", resetAtAccept, 100 * time.Millisecond, l4.RetryResetUnanswered, true},
		{"off/reset-at-accept", resetAtAccept, 100 * time.Millisecond, l4.RetryResetOff, false},
		{"unanswered/reset-after-read", resetAfterRead, 0, l4.RetryResetUnanswered, true},
		{"unsent/reset-after-read", resetAfterRead, 0, l4.RetryResetUnsent, false},
		{"off/reset-after-read", resetAfterRead, 0, l4.RetryResetOff, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := startServer(t, tc.backend)
			good := startServer(t, echoHandler)
			ts := newService(t, Settings{Retries: 2, RetryOnReset: tc.policy}, bad, good)
			const conns = 16
			failed := 0
			for i := range conns {
				msg := fmt.Sprintf("hello %d", i)
				got := make([]byte, len(msg))
				c, err := net.DialTimeout("tcp4", ts.addr.String(), 2*time.Second) // a reset may come before the dial returns
				if err == nil {
					c.SetDeadline(time.Now().Add(waitBound))
					time.Sleep(tc.pause)
					if _, err = c.Write([]byte(msg)); err == nil {
						_, err = io.ReadFull(c, got)
					}
					c.Close()
				}
				if err != nil || string(got) != msg {
					failed++
				}
			}
			early := ts.Stats.EarlyResetRetries.Load()
			if tc.allOK && (failed > 0 || early == 0) {
				t.Fatalf("%d of %d clients failed, %d early resets retried; want none failed", failed, conns, early)
			}
			if !tc.allOK && (failed == 0 || early != 0) {
				t.Fatalf("%d of %d clients failed, %d early resets retried; want some failed and none retried", failed, conns, early)
			}
			if tc.allOK && ts.Stats.Retries.Load() < early {
				t.Fatalf("retries %d < early resets %d: each early reset is a retry", ts.Stats.Retries.Load(), early)
			}
			t.Logf("%d of %d failed, %d early resets retried", failed, conns, early)
		})
	}
}
