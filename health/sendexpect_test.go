// sendexpect_test.go: send_expect against a line-echo server.

package health

import (
	"bufio"
	"net"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// startEcho serves "ECHO <line>" for every line received.
func startEcho(t *testing.T) net.Listener {
	t.Helper()
	l := listen(t)
	testutil.ServeConns(l, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("ECHO " + line))
		}
	})
	return l
}

func TestSendExpect(t *testing.T) {
	addr := addrOf(startEcho(t))
	cases := []struct {
		name string
		spec Spec
		want string // "" = pass
	}{
		{"prefix", Spec{Send: []byte("ping\n"), Expect: []byte("ECHO ping")}, ""},
		{"regex", Spec{Send: []byte("status 42\n"), ExpectRegex: `^ECHO status \d+\n`}, ""},
		{"send only", Spec{Send: []byte("x\n")}, ""},
		{"prefix mismatch", Spec{Send: []byte("ping\n"), Expect: []byte("PONG")}, `reply "ECHO ping\n" does not start with "PONG"`},
		{"regex mismatch", Spec{Send: []byte("a\n"), ExpectRegex: `^OK`}, "waiting for reply matching ^OK"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.spec.Type = l4.CheckSendExpect
			c.spec.Timeout = 300e6
			r := check(t, c.spec, addr)
			if c.want == "" {
				wantOK(t, r)
				if (len(c.spec.Expect) > 0 || c.spec.ExpectRegex != "") && r.FirstByte <= 0 {
					t.Errorf("no first byte time")
				}
				return
			}
			wantFail(t, r, c.want)
		})
	}
}

func TestSendExpectPeerCloses(t *testing.T) {
	s := startServer(t, []byte("BYE"), false) // greets, then waits for our close
	r := check(t, Spec{Type: l4.CheckSendExpect, Expect: []byte("BYEBYE"), Timeout: 200e6}, s.addr())
	wantFail(t, r, `timeout after 200ms waiting for expected reply; got "BYE" so far`)
}
