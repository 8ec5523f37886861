// postgres_test.go: the postgres check against a real primary and a streaming replica.

package health

import (
	"strings"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

func TestPostgres(t *testing.T) {
	t.Parallel()
	p := testutil.StartPostgres(t, testutil.PostgresOptions{User: "probe", Password: "pw'1"})
	login := func(role l4.DBRole) Spec {
		return Spec{Type: l4.CheckPostgres, User: "probe", Password: "pw'1", Role: role}
	}

	t.Run("plain and polite", func(t *testing.T) {
		for range 5 {
			r := check(t, Spec{Type: l4.CheckPostgres}, p.Addr)
			wantOK(t, r)
			if r.FirstByte <= 0 {
				t.Error("no first byte time")
			}
			wantOK(t, check(t, Spec{Type: l4.CheckTCP}, p.Addr))
			wantOK(t, check(t, login(l4.RoleAny), p.Addr))
		}
		// Neither zero-byte connects, nor SSLRequest-then-EOF, nor a login
		// ended with Terminate may leave a trace in the server log.
		for _, bad := range []string{"incomplete startup packet", "could not receive data", "reset by peer", "unexpected EOF"} {
			if strings.Contains(p.Log(), bad) {
				t.Errorf("server log has %q:\n%s", bad, p.Log())
			}
		}
	})

	t.Run("login failures", func(t *testing.T) {
		wantFail(t, check(t, login(l4.RoleReplica), p.Addr), "role primary, want replica")
		bad := login(l4.RoleAny)
		bad.Password = "wrong"
		wantFail(t, check(t, bad, p.Addr), `logging in: password authentication failed for user "probe" (SQLSTATE 28P01)`)
		bad = login(l4.RoleAny)
		bad.Database = "nope"
		wantFail(t, check(t, bad, p.Addr), `database "nope" does not exist (SQLSTATE 3D000)`)
	})

	t.Run("replica and promote", func(t *testing.T) {
		r := p.StartReplica(t)
		wantOK(t, check(t, Spec{Type: l4.CheckPostgres}, r.Addr))
		wantOK(t, check(t, login(l4.RolePrimary), p.Addr))
		wantOK(t, check(t, login(l4.RoleReplica), r.Addr))
		wantFail(t, check(t, login(l4.RolePrimary), r.Addr), "role replica, want primary")
		r.Promote(t)
		wantOK(t, check(t, login(l4.RolePrimary), r.Addr))
		wantFail(t, check(t, login(l4.RoleReplica), r.Addr), "role primary, want replica")
	})

	t.Run("sslmode disable", func(t *testing.T) {
		s := login(l4.RolePrimary)
		s.PostgresSSLMode = "disable"
		wantOK(t, check(t, s, p.Addr))
	})

	t.Run("wrong protocol", func(t *testing.T) {
		redis := testutil.StartRedis(t, "127.0.0.1:0", "")
		web := startServer(t, []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), false)
		// Redis waits for the end of an inline command that never comes.
		wantFail(t, check(t, Spec{Type: l4.CheckPostgres, Timeout: 200e6}, redis.Addr), "timeout after 200ms waiting for SSLRequest reply")
		wantFail(t, check(t, Spec{Type: l4.CheckPostgres}, web.addr()), "unexpected reply 'H' to SSLRequest (not PostgreSQL?)")
		// PostgreSQL drops a startup packet of absurd length without a word.
		wantFail(t, check(t, Spec{Type: l4.CheckRedis}, p.Addr), "connection closed by peer waiting for PING reply")
		wantFail(t, check(t, Spec{Type: l4.CheckMySQL, Timeout: 200e6}, p.Addr), "timeout after 200ms waiting for greeting")
	})

	t.Run("stopped", func(t *testing.T) {
		p.Stop(t)
		wantFail(t, check(t, Spec{Type: l4.CheckPostgres}, p.Addr), "connect refused")
		wantFail(t, check(t, login(l4.RoleAny), p.Addr), "connect refused")
	})
}
