// A real headless Chromium for tests of web pages, driven through
// chromedriver's WebDriver HTTP API (Debian's chromium and
// chromium-driver): plain HTTP and JSON from net/http, no client library.

package testutil

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Browser is one WebDriver session of a headless Chromium that the test
// started (in a namespace, or in the test's own when ns is nil).
type Browser struct {
	session string // http://127.0.0.1:PORT/session/ID
	hc      *http.Client
}

// BrowserLog is one line of the browser's console or of its own
// complaints (a failed load, a refused script): level SEVERE for errors.
type BrowserLog struct {
	Level   string `json:"level"`
	Source  string `json:"source"`
	Message string `json:"message"`
}

// NewBrowser starts chromedriver and a headless Chromium of width x
// height pixels in ns (nil: here), and ends both when the test ends. The
// test fails when either is missing under L4LB_REQUIRE_PRIV=1 (skips
// otherwise).
func NewBrowser(t testing.TB, ns *Netns, width, height int) *Browser {
	t.Helper()
	RequireTool(t, "chromium", "chromedriver")
	profile := t.TempDir() // before the driver: removed after its cleanup has ended Chromium
	b := &Browser{hc: &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{DialContext: browserDial(ns)}}}
	base, logFile := startDriver(t, ns, b.hc)
	var created struct {
		SessionID string `json:"sessionId"`
	}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"args": []string{
			"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
			"--disable-extensions", "--disable-background-networking", "--disable-component-update",
			fmt.Sprintf("--window-size=%d,%d", width, height), "--user-data-dir=" + profile,
		}},
		"goog:loggingPrefs": map[string]string{"browser": "ALL"}, // console and load errors, for Logs
	}}}
	if err := b.call(http.MethodPost, base+"/session", caps, &created); err != nil {
		out, _ := os.ReadFile(logFile)
		t.Fatalf("chromedriver new session: %v\n%s", err, out)
	}
	b.session = base + "/session/" + created.SessionID
	t.Cleanup(func() { _ = b.call(http.MethodDelete, b.session, nil, nil) })
	return b
}

// startDriver runs chromedriver on a free port of 127.0.0.1 in ns (nil:
// here) until the test ends, waits until it answers through hc, and
// returns its base URL and the file it logs to.
func startDriver(t testing.TB, ns *Netns, hc *http.Client) (base, logFile string) {
	t.Helper()
	port := freePort(t, ns)
	args := []string{"chromedriver", "--port=" + strconv.Itoa(port), "--allowed-ips=127.0.0.1"}
	cmd := exec.Command(args[0], args[1:]...)
	if ns != nil {
		cmd = ns.Command(args...)
	}
	logFile = filepath.Join(t.TempDir(), "chromedriver.log")
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close() // the process has its own descriptor
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Chromium joins its group: the cleanup ends them together
	if err := cmd.Start(); err != nil {
		t.Fatalf("chromedriver: %v", err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL) // the group this test made: chromedriver and its Chromium
		_ = cmd.Wait()
	})
	base = fmt.Sprintf("http://127.0.0.1:%d", port)
	Eventually(t, 30*time.Second, "chromedriver to answer", func() bool {
		resp, err := hc.Get(base + "/status")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	return base, logFile
}

// browserDial dials from namespace ns (nil: from here).
func browserDial(ns *Netns) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	if ns == nil {
		return d.DialContext
	}
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = ns.Do(func() (err error) {
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// freePort is a TCP port free on 127.0.0.1 in ns now.
func freePort(t testing.TB, ns *Netns) int {
	t.Helper()
	var port int
	listen := func() error {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		port = ln.Addr().(*net.TCPAddr).Port
		return ln.Close()
	}
	if ns != nil {
		ns.MustDo(t, listen)
	} else if err := listen(); err != nil {
		t.Fatal(err)
	}
	return port
}

// call sends one WebDriver command (in, if not nil, as JSON) and decodes
// its value into out (if not nil).
func (b *Browser) call(method, url string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return fmt.Errorf("%s %s: HTTP %d: %.300s", method, url, resp.StatusCode, data)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d: %.500s", method, url, resp.StatusCode, env.Value)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(env.Value, out)
}

// Open loads url and waits for its load event.
func (b *Browser) Open(t testing.TB, url string) {
	t.Helper()
	if err := b.call(http.MethodPost, b.session+"/url", map[string]string{"url": url}, nil); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
}

// Eval runs script (a function body: `return ...`) in the page with args
// and decodes what it returns into out (if not nil).
func (b *Browser) Eval(t testing.TB, out any, script string, args ...any) {
	t.Helper()
	if args == nil {
		args = []any{}
	}
	if err := b.call(http.MethodPost, b.session+"/execute/sync", map[string]any{"script": script, "args": args}, out); err != nil {
		t.Fatalf("script %.80q: %v", script, err)
	}
}

// WaitTrue waits up to d until script returns true, and fails the test
// with what (and the script's last value) when it never does.
func (b *Browser) WaitTrue(t testing.TB, d time.Duration, what, script string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var ok bool
		b.Eval(t, &ok, script, args...)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed %s within %v", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Screenshot is a PNG of the window as it shows the page now.
func (b *Browser) Screenshot(t testing.TB) []byte {
	t.Helper()
	var s string
	if err := b.call(http.MethodGet, b.session+"/screenshot", nil, &s); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	png, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	return png
}

// Logs returns (and clears) what the browser logged since the last call:
// console messages, failed loads, refused content.
func (b *Browser) Logs(t testing.TB) []BrowserLog {
	t.Helper()
	var logs []BrowserLog
	if err := b.call(http.MethodPost, b.session+"/se/log", map[string]string{"type": "browser"}, &logs); err != nil {
		t.Fatalf("browser log: %v", err)
	}
	return logs
}

// Errors are the SEVERE lines of Logs, one a line ("" when none).
func (b *Browser) Errors(t testing.TB) string {
	t.Helper()
	var out []string
	for _, l := range b.Logs(t) {
		if l.Level == "SEVERE" {
			out = append(out, l.Source+": "+l.Message)
		}
	}
	return strings.Join(out, "\n")
}
