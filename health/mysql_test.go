// mysql_test.go: the mysql check against fake greeting servers and a real MariaDB server.

package health

import (
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// packet frames a MySQL packet with sequence number 0.
func packet(payload []byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), 0}, payload...)
}

// greetingV10 is a minimal protocol-10 handshake packet.
func greetingV10() []byte {
	p := []byte{10}
	p = append(p, "8.0.36-fake\x00"...)
	p = append(p, 1, 0, 0, 0)             // connection id
	p = append(p, "abcdefgh\x00"...)      // auth data part 1 + filler
	p = append(p, 0xff, 0xf7, 0x21, 2, 0) // capabilities, charset, status
	return append(p, make([]byte, 13)...) // the rest, zeroed
}

// TestMySQLGreetingFake checks the greeting parser against crafted
// servers, and that the probe closes with a FIN although the greeting
// arrived unanswered.
func TestMySQLGreetingFake(t *testing.T) {
	t.Parallel()
	good := startServer(t, packet(greetingV10()), false)
	r := check(t, Spec{Type: l4.CheckMySQL}, good.addr())
	wantOK(t, r)
	if r.FirstByte <= 0 {
		t.Error("no first byte time")
	}
	if k := good.waitCloses(t, 1)[0]; k != closedFIN {
		t.Errorf("probe ended the connection with %s, want fin", k)
	}
	blocked := append([]byte{0xff, 0x69, 0x04}, "Host '127.0.0.1' is blocked because of many connection errors"...)
	cases := []struct {
		name     string
		greeting []byte
		want     string
	}{
		{"error packet", packet(blocked), "server refused: error 1129: Host '127.0.0.1' is blocked"},
		{"protocol 9", packet(append([]byte{9}, "3.23\x00"...)), "greeting protocol version 9, want 10"},
		{"http", []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), `reply "HTTP" is not a MySQL greeting`},
		{"short", packet(greetingV10())[:10], "timeout after 200ms reading greeting"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := startServer(t, c.greeting, false)
			wantFail(t, check(t, Spec{Type: l4.CheckMySQL, Timeout: 200e6}, s.addr()), c.want)
		})
	}
}

// TestMySQL runs the greeting and the login checks against MariaDB.
func TestMySQL(t *testing.T) {
	t.Parallel()
	m := testutil.StartMySQL(t, testutil.MySQLOptions{User: "probe", Password: "pw"})
	login := func(role l4.DBRole) Spec {
		return Spec{Type: l4.CheckMySQL, User: "probe", Password: "pw", Role: role}
	}
	r := check(t, Spec{Type: l4.CheckMySQL}, m.Addr)
	wantOK(t, r)
	wantOK(t, check(t, login(l4.RoleAny), m.Addr))
	wantOK(t, check(t, login(l4.RolePrimary), m.Addr))
	wantFail(t, check(t, login(l4.RoleReplica), m.Addr), "role primary, want replica")

	m.Exec(t, "SET GLOBAL read_only = 1")
	wantOK(t, check(t, login(l4.RoleReplica), m.Addr))
	wantFail(t, check(t, login(l4.RolePrimary), m.Addr), "role replica, want primary")

	bad := login(l4.RoleAny)
	bad.Password = "wrong"
	wantFail(t, check(t, bad, m.Addr), "logging in: error 1045: Access denied for user 'probe'@'127.0.0.1'")

	m.Stop()
	wantFail(t, check(t, Spec{Type: l4.CheckMySQL}, m.Addr), "connect refused")
	wantFail(t, check(t, login(l4.RoleAny), m.Addr), "connect refused")
}
