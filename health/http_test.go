// http_test.go: the http check: status codes, WebSocket upgrade and its Close frame.

package health

import (
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

func TestHTTP(t *testing.T) {
	t.Parallel()
	ws := testutil.StartWebSocketServer(t, "127.0.0.1:0")
	redis := testutil.StartRedis(t, "127.0.0.1:0", "")
	cases := []struct {
		name string
		spec Spec
		addr bool // true: probe redis instead
		want string
	}{
		{"200", Spec{Path: "/healthz"}, false, ""},
		{"host header", Spec{Path: "/healthz", Host: "db.example"}, false, ""},
		{"status set", Spec{Path: "/status/204", Status: 204}, false, ""},
		{"503", Spec{Path: "/status/503"}, false, "unexpected status 503, want 200"},
		{"websocket", Spec{Path: "/ws", WebSocket: true}, false, ""},
		// Redis drops a client that sends "Host:" (it suspects an attack).
		{"redis", Spec{Path: "/"}, true, "connection closed by peer waiting for status line"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.spec.Type = l4.CheckHTTP
			addr := ws.Addr
			if c.addr {
				addr = redis.Addr
			}
			r := check(t, c.spec, addr)
			if c.want != "" {
				wantFail(t, r, c.want)
				return
			}
			wantOK(t, r)
			if r.FirstByte <= 0 {
				t.Error("no first byte time")
			}
		})
	}
	waitCount(t, "close frames", ws.CloseFrames.Load, 1)
	if n := ws.Resets.Load(); n != 0 {
		t.Errorf("%d websocket probes ended with an RST", n)
	}
}

// TestWebSocketRefused: an upgrade answered with 200 is not a WebSocket.
func TestWebSocketRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t, []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), false)
	wantFail(t, check(t, Spec{Type: l4.CheckHTTP, WebSocket: true}, s.addr()), "websocket upgrade refused: status 200, want 101")
	bad := startServer(t, []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: nope\r\n\r\n"), false)
	wantFail(t, check(t, Spec{Type: l4.CheckHTTP, WebSocket: true}, bad.addr()), `bad Sec-WebSocket-Accept "nope"`)
	notHTTP := startServer(t, []byte("-ERR unknown command\r\n"), false)
	wantFail(t, check(t, Spec{Type: l4.CheckHTTP}, notHTTP.addr()), `malformed status line "-ERR unknown command" (not HTTP?)`)
}

// waitCount waits until get() reaches n.
func waitCount(t *testing.T, what string, get func() int64, n int64) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for get() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d, want %d", what, get(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
