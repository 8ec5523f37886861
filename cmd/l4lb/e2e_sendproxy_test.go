// Health checks to a backend that requires the PROXY header: they send it, as the VIP's traffic does.

package main

import (
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/l4lb/l4lb/internal/testutil"
)

var checkSendProxyConfig = newConf(`log_format = "json"`).vip("pp", ":81", `proxy_protocol = "v2"`).
	health(`type = "http"`, `path = "/who"`, `interval = "500ms"`, `timeout = "400ms"`, `rise = 1`, `fall = 1`).named("nginx", 0, 8080).String()

// TestHealthChecksSendProxyHeader (D18): nginx listens with
// proxy_protocol. By default the checks of a VIP that sends the header
// send it too (HAProxy's checks do the same when the server uses
// send-proxy), so nginx is up and serves; with send_proxy = false the
// same check fails and nginx logs a broken header for it. Before, the
// checks never sent one: the backend was down from its first check.
func TestHealthChecksSendProxyHeader(t *testing.T) {
	tp := testutil.NewTopology(t, 1)
	addIPv6(t, tp) // startNginx listens on both families
	startNginx(t, tp, 0, 1)
	lb := startLB(t, tp, checkSendProxyConfig)
	if c := waitChange(t, lb, "nginx", "up"); !strings.HasPrefix(c.Reason, "first check passed") {
		t.Fatalf("nginx up: %+v", c)
	}
	body, local := httpGet(t, tp, netip.AddrPortFrom(tp.VIP, 81), "/who")
	wantClient(t, body, local)

	lb.writeConfig(t, strings.Replace(lb.currentConfig(t), "rise = 1", "rise = 1\n  send_proxy = false", 1))
	lb.signal(t, syscall.SIGHUP)
	lb.waitLog(t, "reload applied")
	if c := waitChange(t, lb, "nginx", "down"); !strings.Contains(c.Reason, "connection closed by peer") {
		t.Errorf("nginx down without the header: reason %q", c.Reason)
	}
}
