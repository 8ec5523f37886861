// The live status page of a running daemon, in a real headless Chromium
// in the client namespace: what it shows, and a drain seen within one
// refresh.

package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
)

// statusPageShot is the screenshot docs/operations.md shows; the test
// rewrites it with L4LB_SCREENSHOT_UPDATE=1.
const statusPageShot = "../../docs/img/status-page.png"

// TestStatusPageInChromium: the page on the metrics listener loads in
// Chromium with no console error and shows each backend in its state (up,
// down: no server, backup); `l4lb drain` turns a backend's row to
// draining within one refresh of the page (at most two reads after the
// drain returned: one may have been on its way); the page takes no
// asset from elsewhere and logs no error all along. It takes the
// screenshot of the docs.
func TestStatusPageInChromium(t *testing.T) {
	tp := testutil.NewTopology(t, 4)
	for i, ports := range [][]int{{7000, 7001}, {7000, 7001}, nil, {7000}} {
		for _, port := range ports {
			var ln net.Listener
			tp.Backends[i].MustDo(t, func() (err error) {
				ln, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", tp.BackendIP(i), port))
				return err
			})
			t.Cleanup(func() { ln.Close() })
			testutil.ServeConns(ln, testutil.NamedEcho(fmt.Sprintf("be%d", i)))
		}
	}
	check := []string{`type = "tcp"`, `interval = "200ms"`, `timeout = "100ms"`, `fall = 2`}
	lb := startLB(t, tp, newConf(`metrics_listen = "198.18.0.1:9370"`).
		vip("web", ":80", `algorithm = "round_robin"`).health(check...).backends(3, 7000).named("spare", 3, 7000, `backup = true`).
		vip("api", ":81", `algorithm = "least_conn"`).health(check...).backends(2, 7001).String())
	lb.waitHealth(t, "web", "be2", "down")
	lb.waitHealth(t, "web", "be1", "up")
	lb.waitHealth(t, "api", "be1", "up")

	b := testutil.NewBrowser(t, tp.Client, 1400, 720)
	b.Open(t, "http://198.18.0.1:9370/") // refreshes every 2 s
	b.WaitTrue(t, 30*time.Second, "the backends of both VIPs", `return document.querySelectorAll("tr[data-backend]").length === 6`)
	for id, want := range map[string]string{"be0": "up", "be1": "up", "be2": "down", "spare": "backup"} {
		var got string
		b.Eval(t, &got, `const r = document.querySelector('tr[data-vip="web"][data-backend="' + arguments[0] + '"]'); return r ? r.dataset.state : "absent"`, id)
		if got != want {
			t.Errorf("web/%s shows %q, want %q", id, got, want)
		}
	}

	for range 6 { // traffic for the flows, bytes and rates columns
		for _, port := range []int{80, 81} {
			c := mustDialVIP(t, tp, port)
			if err := c.echo("hello status page"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The page counts its redraws on #updated; an observer notes the
	// count of the first redraw that shows be1 draining, as it happens.
	b.Eval(t, nil, `window.__seenAt = null;
		const up = document.getElementById("updated");
		new MutationObserver(() => {
			const r = document.querySelector('tr[data-vip="web"][data-backend="be1"]');
			if (window.__seenAt === null && r && r.dataset.state === "draining") window.__seenAt = Number(up.dataset.refreshes);
		}).observe(up, {attributes: true});
		return null`)
	lb.verb(t, "drain", "--reason", "<b>kernel upgrade</b>", "web", "be1")
	var before int
	b.Eval(t, &before, `return Number(document.getElementById("updated").dataset.refreshes)`)
	b.WaitTrue(t, 20*time.Second, "web/be1 draining", `return window.__seenAt !== null`)
	var seenAt int
	b.Eval(t, &seenAt, `return window.__seenAt`)
	if seenAt-before > 2 {
		t.Errorf("the drain showed %d refreshes after it returned, want within one (two reads at most)", seenAt-before)
	}
	var override string
	b.Eval(t, &override, `return document.querySelector('tr[data-vip="web"][data-backend="be1"] td.override').textContent`)
	if !bytes.Contains([]byte(override), []byte("<b>kernel upgrade</b>")) {
		t.Errorf("be1's override cell %q, want the reason as text", override)
	}
	// Traffic over two refreshes, for the rates: a message on each held
	// connection and a new connection to each VIP every 100 ms, for 3 s.
	for range 30 {
		for _, port := range []int{80, 81} {
			c := mustDialVIP(t, tp, port)
			if err := c.echo("hello status page"); err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
		time.Sleep(100 * time.Millisecond)
	}
	shot := b.Screenshot(t)
	if !bytes.HasPrefix(shot, []byte("\x89PNG\r\n\x1a\n")) || len(shot) < 24 || binary.BigEndian.Uint32(shot[16:20]) != 1400 {
		t.Fatalf("screenshot is not a 1400-pixel-wide PNG (%d bytes)", len(shot))
	}
	if os.Getenv("L4LB_SCREENSHOT_UPDATE") == "1" {
		if err := os.WriteFile(filepath.FromSlash(statusPageShot), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if errs := b.Errors(t); errs != "" {
		t.Errorf("browser errors:\n%s", errs)
	}
}
