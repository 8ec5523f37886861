package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
	"github.com/l4lb/l4lb/l4/reconcile"
)

// testDaemon answers like the daemon does for one VIP "pg" with one
// backend "db1"; the HTTP layer under test is the real one, on a real
// Unix socket.
type testDaemon struct {
	mu       sync.Mutex
	by       string
	override l4.Override
	rebal    reconcile.RebalanceOptions
}

func (d *testDaemon) Status() plane.Status {
	return plane.Status{VIPs: []plane.VIPStatus{{Name: "pg"}}}
}
func (d *testDaemon) ConfigTOML() []byte { return []byte("[global]\n") }
func (d *testDaemon) Reload(context.Context) (ReloadResult, error) {
	return ReloadResult{Error: "config invalid, running config kept", Problems: []string{"f.toml:3: vip \"pg\": bad"}}, nil
}
func (d *testDaemon) SetOverride(vip, backend string, o l4.Override, by string, force bool) (plane.OverrideResult, error) {
	if vip != "pg" {
		return plane.OverrideResult{}, fmt.Errorf("vip %q: %w", vip, reconcile.ErrNoVIP)
	}
	if backend != "db1" {
		return plane.OverrideResult{}, fmt.Errorf("vip %q: %w %q", vip, reconcile.ErrNoBackend, backend)
	}
	d.mu.Lock()
	d.by, d.override = by, o
	d.mu.Unlock()
	return plane.OverrideResult{VIP: vip, Backend: backend, Override: o.String(), By: by}, nil
}

func (d *testDaemon) Explain(vip string, client netip.AddrPort) (plane.Explanation, error) {
	if vip != "pg" {
		return plane.Explanation{}, fmt.Errorf("vip %q: %w", vip, reconcile.ErrNoVIP)
	}
	if !client.Addr().Is4() {
		return plane.Explanation{}, fmt.Errorf("%w: %s cannot reach VIP pg", plane.ErrBadClient, client.Addr())
	}
	return plane.Explanation{VIP: vip, Client: client.String(), Backend: &plane.BackendRef{ID: "db1"}}, nil
}

// Rebalance refuses rate 99 as if one ran already.
func (d *testDaemon) Rebalance(vip string, o reconcile.RebalanceOptions) (plane.RebalanceStatus, error) {
	if vip != "pg" {
		return plane.RebalanceStatus{}, fmt.Errorf("vip %q: %w", vip, reconcile.ErrNoVIP)
	}
	if o.Rate == 99 {
		return plane.RebalanceStatus{}, fmt.Errorf("vip %q: %w", vip, reconcile.ErrRebalanceRunning)
	}
	d.mu.Lock()
	d.rebal = o
	d.mu.Unlock()
	return plane.RebalanceStatus{VIP: vip, State: plane.RebalanceRunning, Rate: o.Rate, By: o.By}, nil
}

func (d *testDaemon) RebalanceStatus(vip string) (plane.RebalanceStatus, error) {
	if vip != "pg" {
		return plane.RebalanceStatus{}, fmt.Errorf("vip %q: %w", vip, reconcile.ErrNoVIP)
	}
	return plane.RebalanceStatus{VIP: vip, State: plane.RebalanceNone}, nil
}

func (d *testDaemon) StopRebalance(vip, by string) (plane.RebalanceStatus, error) {
	if vip != "pg" {
		return plane.RebalanceStatus{}, fmt.Errorf("vip %q: %w", vip, reconcile.ErrNoVIP)
	}
	return plane.RebalanceStatus{VIP: vip, State: plane.RebalanceStopped, Reason: "stopped by " + by}, nil
}

func serveTest(t *testing.T, d Daemon) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run", "admin.sock")
	s, err := Serve(path, d, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return path
}

func TestEndpointsAndErrors(t *testing.T) {
	testutil.RequirePriv(t, "the admin API admits root only")
	d := &testDaemon{}
	c := Client{Socket: serveTest(t, d)}
	ctx := context.Background()
	cases := []struct {
		name, method, path string
		body               any
		raw                string // sent as is when set
		status             int
		want               string // in the answer
	}{
		{"list", "GET", "/", nil, "", 200, `"/reload"`},
		{"status", "GET", "/status", nil, "", 200, `"name": "pg"`},
		{"config", "GET", "/config", nil, "", 200, "[global]"},
		{"drain", "POST", BackendPath("pg", "db1", "drain"), OverrideRequest{Reason: "kernel upgrade"}, "", 200, `"override": "drain"`},
		{"enable no body", "POST", BackendPath("pg", "db1", "enable"), nil, "", 200, `"override": "none"`},
		{"disable", "POST", BackendPath("pg", "db1", "disable"), nil, "", 200, `"override": "disable"`},
		{"reload refused", "POST", "/reload", nil, "", 422, `f.toml:3`},
		{"unknown path", "GET", "/nosuch", nil, "", 404, "no endpoint /nosuch"},
		{"unknown action", "POST", BackendPath("pg", "db1", "explode"), nil, "", 404, "no endpoint"},
		{"wrong method", "GET", "/reload", nil, "", 405, "use POST"},
		{"wrong method on an action", "GET", BackendPath("pg", "db1", "drain"), nil, "", 405, "use POST"},
		{"unknown VIP", "POST", BackendPath("mysql", "db1", "drain"), nil, "", 404, "no such VIP"},
		{"unknown backend", "POST", BackendPath("pg", "db9", "drain"), nil, "", 404, "no such backend"},
		{"not JSON", "POST", BackendPath("pg", "db1", "drain"), nil, "{reason", 400, "request body"},
		{"unknown field", "POST", BackendPath("pg", "db1", "drain"), nil, `{"reasn": "x"}`, 400, "unknown field"},
		{"two values", "POST", BackendPath("pg", "db1", "drain"), nil, `{} {}`, 400, "more than one"},
		{"control character", "POST", BackendPath("pg", "db1", "drain"), OverrideRequest{Reason: "a\x1b[2Jb"}, "", 400, "control character"},
		{"too long", "POST", BackendPath("pg", "db1", "drain"), OverrideRequest{Reason: strings.Repeat("x", 201)}, "", 400, "longer than"},
		{"operator control character", "POST", BackendPath("pg", "db1", "drain"), OverrideRequest{Operator: "a\nb"}, "", 400, "operator: control character"},
		{"too big", "POST", BackendPath("pg", "db1", "drain"), nil, `{"reason": "` + strings.Repeat("x", maxBody) + `"}`, 413, "over"},
		{"reload with a body", "POST", "/reload", nil, `{"force": true}`, 400, "unknown field"},
		{"explain", "GET", ExplainPath("pg", "198.18.0.50:40000"), nil, "", 200, `"client": "198.18.0.50:40000"`},
		{"explain without a port", "GET", ExplainPath("pg", "198.18.0.50"), nil, "", 200, `"id": "db1"`},
		{"explain ipv6", "GET", ExplainPath("pg", "[2001:db8::5]:1"), nil, "", 400, "cannot reach"},
		{"explain a bad client", "GET", ExplainPath("pg", "198.18.0.500"), nil, "", 400, "bad client address"},
		{"explain port 0", "GET", ExplainPath("pg", "198.18.0.50:0"), nil, "", 400, "port 0"},
		{"explain without a client", "GET", "/vips/pg/explain", nil, "", 400, "want one client"},
		{"explain two clients", "GET", "/vips/pg/explain?client=198.18.0.1&client=198.18.0.2", nil, "", 400, "want one client"},
		{"explain an unknown parameter", "GET", "/vips/pg/explain?client=198.18.0.1&proto=tcp", nil, "", 400, "unknown parameter"},
		{"explain an unknown VIP", "GET", ExplainPath("mysql", "198.18.0.50"), nil, "", 404, "no such VIP"},
		{"explain by POST", "POST", ExplainPath("pg", "198.18.0.50"), nil, "", 405, "use GET"},
		{"rebalance", "POST", RebalancePath("pg"), RebalanceRequest{Rate: 50}, "", 200, `"state": "running"`},
		{"rebalance no body", "POST", RebalancePath("pg"), nil, "", 200, `"state": "running"`},
		{"rebalance status", "GET", RebalancePath("pg"), nil, "", 200, `"state": "none"`},
		{"rebalance stop", "DELETE", RebalancePath("pg"), nil, "", 200, `"reason": "stopped by root"`},
		{"rebalance running", "POST", RebalancePath("pg"), RebalanceRequest{Rate: 99}, "", 409, "already running"},
		{"rebalance rate", "POST", RebalancePath("pg"), RebalanceRequest{Rate: 10001}, "", 400, "rate 10001 is out of range: a rebalance closes 1 to 10000 connections a second"},
		{"rebalance operator too long", "POST", RebalancePath("pg"), RebalanceRequest{Operator: strings.Repeat("x", 65)}, "", 400, "operator: longer than 64"},
		{"rebalance negative rate", "POST", RebalancePath("pg"), nil, `{"rate": -1}`, 400, "out of range"},
		{"rebalance unknown VIP", "GET", RebalancePath("mysql"), nil, "", 404, "no such VIP"},
		{"rebalance wrong method", "PUT", RebalancePath("pg"), nil, "", 405, "use DELETE, GET or POST"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			var err error
			if tc.raw != "" {
				body, err = rawPost(c.Socket, tc.path, tc.raw)
			} else {
				body, err = c.Do(ctx, tc.method, tc.path, tc.body, nil)
			}
			status := 200
			var se *StatusError
			if errors.As(err, &se) {
				status = se.Status
			} else if err != nil {
				t.Fatal(err)
			}
			if status != tc.status || !strings.Contains(string(body), tc.want) {
				t.Fatalf("%s %s: %d %s, want %d with %q", tc.method, tc.path, status, body, tc.status, tc.want)
			}
			if status >= 400 && (se == nil || se.ErrorBody.Error == "") {
				t.Fatalf("an error without a JSON message: %s", body)
			}
		})
	}
	if !strings.HasPrefix(d.by, "root") {
		t.Fatalf("override set by %q, want the peer's user name (root)", d.by)
	}
	if d.rebal.By != "root" || d.rebal.Rate != 0 {
		t.Fatalf("last rebalance asked with %+v, want rate 0 (the VIP's) by root", d.rebal)
	}
}

func TestOverrideRecordsWhoAndWhy(t *testing.T) {
	testutil.RequirePriv(t, "the admin API admits root only")
	d := &testDaemon{}
	c := Client{Socket: serveTest(t, d)}
	if _, err := c.Do(context.Background(), "POST", BackendPath("pg", "db1", "drain"), OverrideRequest{Reason: "kernel upgrade", Operator: "alice"}, nil); err != nil {
		t.Fatal(err)
	}
	if d.by != "root (operator alice): kernel upgrade" || d.override != l4.OverrideDrain {
		t.Fatalf("by %q override %v", d.by, d.override)
	}
}

// rawPost sends body as is.
func rawPost(sock, path, body string) ([]byte, error) {
	hc := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Post("http://l4lb"+path, "application/json", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		se := &StatusError{Status: resp.StatusCode}
		if json.Unmarshal(out, &se.ErrorBody) != nil {
			return out, fmt.Errorf("%d: not a JSON error: %s", resp.StatusCode, out)
		}
		return out, se
	}
	return out, nil
}

// dialAs connects to the socket at path from a thread whose user is uid
// (the rest of the process stays root; the thread is discarded
// afterwards). The kernel records the peer's credentials at connect.
func dialAs(t *testing.T, uid int, path string) (net.Conn, error) {
	t.Helper()
	var c net.Conn
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		// The raw syscall changes this thread only (Go's Setresuid would
		// change every thread of the process).
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			err = fmt.Errorf("setresuid: %w", e)
			return
		}
		var fd int
		if fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return
		}
		if err = unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
			unix.Close(fd)
			return
		}
		f := os.NewFile(uintptr(fd), "admin")
		c, err = net.FileConn(f)
		f.Close()
	}()
	<-done
	return c, err
}

// getAs sends one request over a connection made as uid.
func getAs(t *testing.T, uid int, path, method, endpoint string) ([]byte, error) {
	t.Helper()
	conn, err := dialAs(t, uid, path)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	hc := http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }}}
	req, _ := http.NewRequest(method, "http://l4lb"+endpoint, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		se := &StatusError{Status: resp.StatusCode}
		_ = json.Unmarshal(body, &se.ErrorBody)
		return body, se
	}
	return body, nil
}

func TestOnlyRootMayUseTheSocket(t *testing.T) {
	testutil.RequirePriv(t, "changing a thread's user needs root")
	const nobody = 65534
	d := &testDaemon{}
	top, err := os.MkdirTemp("", "l4lb-admin-") // t.TempDir's parents are 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	path := filepath.Join(top, "run", "admin.sock")
	s, err := Serve(path, d, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	// The directory and the socket are root's (0700, 0600): another user
	// cannot even connect.
	if _, err := getAs(t, nobody, path, "GET", "/status"); !errors.Is(err, unix.EACCES) {
		t.Fatalf("uid %d and the 0600 socket: %v, want permission denied", nobody, err)
	}
	// Someone loosened the modes: the API still refuses by the peer's
	// credentials, with 403 and a message.
	for _, p := range []string{filepath.Dir(path), path} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct{ method, path string }{{"GET", "/status"}, {"POST", BackendPath("pg", "db1", "drain")}, {"POST", "/reload"}} {
		body, err := getAs(t, nobody, path, e.method, e.path)
		var se *StatusError
		if !errors.As(err, &se) || se.Status != http.StatusForbidden || !strings.Contains(se.Error(), "root only") {
			t.Fatalf("uid %d %s %s: %v %s, want 403 root only", nobody, e.method, e.path, err, body)
		}
	}
	if d.override != l4.OverrideNone {
		t.Fatal("a refused client set an override")
	}
	// Root still gets in.
	if _, err := getAs(t, 0, path, "GET", "/status"); err != nil {
		t.Fatal(err)
	}
}

func TestServeRefusesWhatIsNotAStaleSocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Serve(file, &testDaemon{}, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Serve over a file: %v", err)
	}
	if data, _ := os.ReadFile(file); string(data) != "keep me" {
		t.Fatal("the file was touched")
	}
	live := filepath.Join(dir, "live.sock")
	s, err := Serve(live, &testDaemon{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Serve(live, &testDaemon{}, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "another l4lb") {
		t.Fatalf("Serve over a live socket: %v", err)
	}
}
