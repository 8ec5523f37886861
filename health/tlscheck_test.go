// tlscheck_test.go: the tls check against a real TLS server (crypto/tls) and a plain TCP one.

package health

import (
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// tlsServer completes handshakes with a self-signed certificate for
// db.example.test and records the server name each ClientHello carried.
type tlsServer struct {
	mu    sync.Mutex
	names []string
	ended []error // how each connection ended after the handshake (nil: clean close_notify/EOF)
}

func startTLS(t *testing.T) (*tlsServer, net.Listener) {
	t.Helper()
	cert, _ := testutil.SelfSignedTLS(t, "db.example.test")
	s := &tlsServer{}
	l := listen(t)
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		s.mu.Lock()
		s.names = append(s.names, h.ServerName)
		s.mu.Unlock()
		return nil, nil
	}}
	testutil.ServeConns(l, func(c net.Conn) {
		tc := tls.Server(c, conf)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			return
		}
		_, err := tc.Read(make([]byte, 1))
		s.mu.Lock()
		s.ended = append(s.ended, err)
		s.mu.Unlock()
	})
	return s, l
}

func TestTLSCheck(t *testing.T) {
	s, l := startTLS(t)
	addr := addrOf(l)

	r := check(t, Spec{Type: l4.CheckTLS, TLSServerName: "db.example.test"}, addr)
	wantOK(t, r)
	if r.FirstByte <= 0 {
		t.Errorf("no first-byte time (the ServerHello)")
	}
	wantOK(t, check(t, Spec{Type: l4.CheckTLS}, addr)) // no SNI, no verification
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		names, ended := append([]string(nil), s.names...), len(s.ended)
		s.mu.Unlock()
		if ended >= 2 || time.Now().After(deadline) {
			if len(names) != 2 || names[0] != "db.example.test" || names[1] != "" {
				t.Fatalf("server names seen %q, want [db.example.test \"\"]", names)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	for i, err := range s.ended {
		if err == nil || err.Error() != "EOF" {
			t.Errorf("connection %d ended with %v, want EOF after close_notify", i, err)
		}
	}
	s.mu.Unlock()

	// tls_verify: the self-signed certificate is not in the system's store.
	wantFail(t, check(t, Spec{Type: l4.CheckTLS, TLSServerName: "db.example.test", TLSVerify: true}, addr), "certificate not trusted")
}

// TestTLSCheckPlainServer: a server that speaks plain TCP fails the
// check, whether it answers with bytes that are no TLS record, waits
// silently for a request of its own protocol, or echoes the ClientHello.
func TestTLSCheckPlainServer(t *testing.T) {
	banner := startServer(t, []byte("220 ready, no TLS here\r\n"), false)
	wantFail(t, check(t, Spec{Type: l4.CheckTLS}, banner.addr()), "no TLS handshake: the server answered")
	quiet := startServer(t, nil, false)
	wantFail(t, check(t, Spec{Type: l4.CheckTLS, Timeout: 300 * time.Millisecond}, quiet.addr()), "timeout after 300ms waiting for the TLS handshake")
	wantFail(t, check(t, Spec{Type: l4.CheckTLS}, closedPort(t)), "connect refused")
	echo := listen(t) // echoes the ClientHello back: a handshake record, but no ServerHello
	testutil.ServeConns(echo, testutil.Echo)
	wantFail(t, check(t, Spec{Type: l4.CheckTLS}, addrOf(echo)), "TLS handshake failed: tls: received unexpected handshake message")
}
