// wsserver.go: a minimal HTTP and WebSocket-upgrade server for health-check tests.

package testutil

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// wsGUID is RFC 6455's key suffix.
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// WebSocketServer answers:
//   - a WebSocket upgrade (any path) with 101 and the right
//     Sec-WebSocket-Accept, then answers a Close frame with a Close frame
//     and closes; other frames are ignored (no echo);
//   - GET /status/NNN with status NNN;
//   - any other GET with 200 "ok".
//
// It counts what clients did so that tests can check polite closes.
type WebSocketServer struct {
	Addr netip.AddrPort

	Upgrades    atomic.Int64 // 101s sent
	CloseFrames atomic.Int64 // Close frames received from clients
	Resets      atomic.Int64 // upgraded connections that ended in an RST

	srv   *http.Server
	conns sync.WaitGroup // hijacked connections being served
	mu    sync.Mutex
	open  map[net.Conn]struct{}
}

// StartWebSocketServer listens on addr ("127.0.0.1:0" for a free port)
// and stops on cleanup.
func StartWebSocketServer(t testing.TB, addr string) *WebSocketServer {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("websocket server: %v", err)
	}
	s := &WebSocketServer{
		Addr: l.Addr().(*net.TCPAddr).AddrPort(),
		open: map[net.Conn]struct{}{},
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	t.Cleanup(s.close)
	return s
}

// close stops the server and its hijacked connections and waits for them.
func (s *WebSocketServer) close() {
	_ = s.srv.Close()
	s.mu.Lock()
	for c := range s.open {
		_ = c.Close()
	}
	s.open = nil // track refuses connections hijacked from now on
	s.mu.Unlock()
	s.conns.Wait()
}

// ServeHTTP routes an upgrade, a status request or a plain GET.
func (s *WebSocketServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		s.upgrade(w, r)
		return
	}
	if code, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok {
		n, err := strconv.Atoi(code)
		if err != nil || n < 200 || n > 999 {
			http.Error(w, "bad status", http.StatusBadRequest)
			return
		}
		w.WriteHeader(n)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// upgrade answers 101 and serves frames until Close or EOF.
func (s *WebSocketServer) upgrade(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Sec-WebSocket-Key")
	if key == "" || r.Header.Get("Sec-WebSocket-Version") != "13" {
		http.Error(w, "bad websocket request", http.StatusBadRequest)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if !s.track(c) {
		_ = c.Close()
		return
	}
	defer s.untrack(c)
	sum := sha1.Sum([]byte(key + wsGUID))
	_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Accept: "+base64.StdEncoding.EncodeToString(sum[:])+"\r\n\r\n")
	s.Upgrades.Add(1)
	s.serveFrames(c, brw.Reader)
}

// track registers a hijacked conn unless the server is closing.
func (s *WebSocketServer) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		return false
	}
	s.open[c] = struct{}{}
	s.conns.Add(1)
	return true
}

func (s *WebSocketServer) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.open, c) // a no-op on the nil map after close
	s.mu.Unlock()
	_ = c.Close()
	s.conns.Done()
}

// serveFrames reads client frames; a Close frame is answered and ends the
// connection (server closes first, as RFC 6455 wants).
func (s *WebSocketServer) serveFrames(c net.Conn, br *bufio.Reader) {
	for {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		op, payload, err := readFrame(br)
		if err != nil {
			if errors.Is(err, syscall.ECONNRESET) {
				s.Resets.Add(1)
			}
			return
		}
		if op == 0x8 {
			s.CloseFrames.Add(1)
			_, _ = c.Write(append([]byte{0x88, byte(len(payload))}, payload...))
			return
		}
	}
}

// readFrame reads one masked client frame (payloads under 64 KiB).
func readFrame(br *bufio.Reader) (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(h[1] & 0x7f)
	if n == 126 {
		var ext [2]byte
		if _, err := io.ReadFull(br, ext[:]); err != nil {
			return 0, nil, err
		}
		n = int(ext[0])<<8 | int(ext[1])
	} else if n == 127 {
		return 0, nil, errors.New("frame too large for the test server")
	}
	var mask [4]byte
	if h[1]&0x80 != 0 {
		if _, err := io.ReadFull(br, mask[:]); err != nil {
			return 0, nil, err
		}
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(br, payload); err != nil {
		return 0, nil, err
	}
	for i := range payload {
		payload[i] ^= mask[i%4]
	}
	return h[0] & 0x0f, payload, nil
}
