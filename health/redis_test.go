// redis_test.go: the redis check against a real redis-server, with and without AUTH.

package health

import (
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

func TestRedisNoAuth(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t, "127.0.0.1:0", "")
	res := check(t, Spec{Type: l4.CheckRedis}, r.Addr)
	wantOK(t, res)
	if res.FirstByte <= 0 {
		t.Error("no first byte time")
	}
	wantFail(t, check(t, Spec{Type: l4.CheckRedis, Password: "x"}, r.Addr),
		"AUTH refused: ERR AUTH <password> called without any password configured")
}

func TestRedisAuth(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t, "127.0.0.1:0", "s3cret pass")
	if got := r.Do(t, "ACL", "SETUSER", "probe", "on", ">probe pw", "+@connection"); got != "+OK" {
		t.Fatalf("ACL SETUSER: %s", got)
	}
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{"password", Spec{Password: "s3cret pass"}, ""},
		{"acl user", Spec{User: "probe", Password: "probe pw"}, ""},
		{"no auth", Spec{}, "PING refused: NOAUTH Authentication required"},
		{"wrong password", Spec{Password: "nope"}, "AUTH refused: WRONGPASS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.spec.Type = l4.CheckRedis
			res := check(t, c.spec, r.Addr)
			if c.want == "" {
				wantOK(t, res)
				return
			}
			wantFail(t, res, c.want)
		})
	}
}

// TestRedisWrongServer: a redis check against an HTTP server.
func TestRedisWrongServer(t *testing.T) {
	t.Parallel()
	ws := testutil.StartWebSocketServer(t, "127.0.0.1:0")
	wantFail(t, check(t, Spec{Type: l4.CheckRedis}, ws.Addr), `unexpected reply "HTTP/1.1 400 Bad Request" to PING (not Redis?)`)
}
