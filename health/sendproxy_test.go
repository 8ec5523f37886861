// sendproxy_test.go: checks start with the PROXY header, against a real nginx that requires it.

package health

import (
	"regexp"
	"strings"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
)

// TestChecksSendProxyHeader (D18): against nginx with listen ...
// proxy_protocol, a check without the header fails and nginx logs a
// broken header; with ProxyHeader 1 or 2 every check type passes, and
// the header names the prober's own address, so nginx logs the
// balancer's host as the client.
func TestChecksSendProxyHeader(t *testing.T) {
	t.Parallel()
	ng := testutil.StartNginxIn(t, nil, "127.0.0.1:0", true)
	get := []byte("GET / HTTP/1.0\r\n\r\n")
	for _, v := range []l4.ProxyVersion{l4.ProxyV1, l4.ProxyV2} {
		for _, spec := range []Spec{
			{Type: l4.CheckHTTP},
			{Type: l4.CheckSendExpect, Send: get, Expect: []byte("HTTP/1.1 200")},
			{Type: l4.CheckTCP},
		} {
			spec.ProxyHeader, spec.Timeout = v, 2*DefaultTimeout
			if r := check(t, spec, ng.Addr); !r.OK {
				t.Errorf("%s check with a v%d header: %s\nnginx: %s", spec.Type, v, r.Reason, ng.ErrorLog())
			}
		}
	}
	if n := strings.Count(ng.ErrorLog(), "broken header"); n != 0 {
		t.Errorf("nginx logged %d broken headers for checks that sent one:\n%s", n, ng.ErrorLog())
	}
	// Four requests (http and send_expect, v1 and v2), each with the
	// probe's own address in the header.
	if got := regexp.MustCompile(`(?m)^127\.0\.0\.1 proxy=127\.0\.0\.1:\d+ status=200$`).FindAllString(ng.AccessLog(), -1); len(got) != 4 {
		t.Errorf("access log: %d requests with the prober's address, want 4:\n%s", len(got), ng.AccessLog())
	}

	// Without the header (HAProxy's default check against such a server):
	// the check fails and nginx logs an error for it.
	r := check(t, Spec{Type: l4.CheckHTTP, Timeout: 2 * DefaultTimeout}, ng.Addr)
	if r.OK {
		t.Fatal("an http check without the PROXY header passed against a server that requires it")
	}
	if !strings.Contains(ng.ErrorLog(), "broken header") {
		t.Errorf("nginx logged no broken header for a check without one:\n%s", ng.ErrorLog())
	}
}
