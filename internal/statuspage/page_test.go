package statuspage

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/l4lb/l4lb/internal/testutil"
	"github.com/l4lb/l4lb/l4/plane"
)

// serve runs the page's handlers on loopback over the status in st.
func serve(t *testing.T, st *atomic.Pointer[plane.Status]) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	if err := Register(mux, func() plane.Status { return *st.Load() }); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, method, url string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// The page, its script and style are served at / and /status with their
// types and the policy that forbids inline script and other origins;
// status.json is the status as given; nothing answers a method that could
// change state; and the page names no asset from elsewhere.
func TestPageHandlers(t *testing.T) {
	var st atomic.Pointer[plane.Status]
	st.Store(&plane.Status{VIPs: []plane.VIPStatus{{Name: "web", Protocol: "tcp", Backends: []plane.BackendStatus{{ID: "be0", Health: "up"}}}}})
	srv := serve(t, &st)
	for path, ctype := range map[string]string{"/": "text/html", "/status": "text/html", "/status.js": "text/javascript", "/status.css": "text/css", JSONPath: "application/json"} {
		resp, body := get(t, http.MethodGet, srv.URL+path)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) || body == "" {
			t.Errorf("GET %s: %d %q, %d bytes", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
		if p := resp.Header.Get("Content-Security-Policy"); !strings.Contains(p, "script-src 'self'") || !strings.Contains(p, "default-src 'none'") {
			t.Errorf("GET %s: policy %q", path, p)
		}
	}
	_, body := get(t, http.MethodGet, srv.URL+JSONPath)
	var got plane.Status
	if err := json.Unmarshal([]byte(body), &got); err != nil || len(got.VIPs) != 1 || got.VIPs[0].Backends[0].ID != "be0" {
		t.Errorf("status.json: %v %+v", err, got)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		for _, path := range []string{"/", "/status", JSONPath} {
			if resp, _ := get(t, m, srv.URL+path); resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405", m, path, resp.StatusCode)
			}
		}
	}
	_, page := get(t, http.MethodGet, srv.URL+"/")
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 3 {
		t.Fatalf("page refers to %d assets: %q", len(refs), refs)
	}
	for _, r := range refs {
		if u := r[1]; strings.Contains(u, "//") || strings.HasPrefix(u, "/") && u != "/" || strings.Contains(u, ":") && u != "data:," {
			t.Errorf("page refers to %q: not a relative asset of its own", u)
		}
	}
	if strings.Contains(page, "<script>") || regexp.MustCompile(`\son[a-z]+=`).MatchString(page) {
		t.Error("page holds inline script, which its policy refuses")
	}
}

// hostile is a status whose every free text is markup that would run
// if the page wrote it as HTML (names cannot hold it in a config, but the
// page must not count on that; reasons and check errors can).
func hostile() *plane.Status {
	name := `<script>window.__l4lbInjected=1</script>`
	img := `<img src=x onerror="window.__l4lbInjected=2">`
	return &plane.Status{
		Process: plane.ProcessStatus{Version: "v-test", PID: 42, LastReload: &plane.ReloadStatus{Time: time.Now(), OK: false, Error: img}},
		VIPs: []plane.VIPStatus{{
			Name: img, Listen: "198.18.2.10:80", Protocol: "tcp", Algorithm: "round_robin", Eligible: 2, Active: 3, Accepted: 10,
			Backends: []plane.BackendStatus{
				{ID: name, Address: "198.18.1.11:80", Health: "up", Weight: 100, EffectiveWeight: 100, LiveFlows: 2, Flows: 6, LastCheck: img},
				{ID: "be1", Address: "198.18.1.12:80", Health: "up", Weight: 100, Override: "drain", OverrideBy: "root: " + img, Reason: name, OverrideSince: time.Now()},
				{ID: "be2", Address: "198.18.1.13:80", Health: "down", Weight: 100, LastCheck: "connect: connection refused"},
				{ID: "be3", Address: "198.18.1.14:80", Health: "up", Weight: 100, EffectiveWeight: 100, Backup: true},
			},
		}},
	}
}

// In a real headless Chromium: the page loads with no console error
// (nor a refused or failed load), shows every backend with the state
// its row is coloured by, writes every hostile text as text (none runs,
// none becomes an element), and redraws in place when the status
// changes (no reload: a value the test left in the window survives).
func TestPageInChromium(t *testing.T) {
	var st atomic.Pointer[plane.Status]
	st.Store(hostile())
	srv := serve(t, &st)
	b := testutil.NewBrowser(t, nil, 1280, 800)
	b.Open(t, srv.URL+"/status?refresh=1")
	b.WaitTrue(t, 20*time.Second, "four backend rows", `return document.querySelectorAll("tr[data-backend]").length === 4`)

	var states []string
	b.Eval(t, &states, `return Array.from(document.querySelectorAll("tr[data-backend]"), (r) => r.dataset.state)`)
	if strings.Join(states, " ") != "up draining down backup" {
		t.Errorf("backend states %q, want up draining down backup", states)
	}
	var bg map[string]string
	b.Eval(t, &bg, `const o = {}; for (const r of document.querySelectorAll("tr[data-backend]")) o[r.dataset.state] = getComputedStyle(r).backgroundColor; return o`)
	if bg["draining"] == bg["up"] || bg["down"] == bg["up"] || bg["backup"] == bg["up"] || bg["down"] == bg["draining"] {
		t.Errorf("row colours by state %v: down, draining and backup must stand out", bg)
	}

	var texts struct {
		Injected    any      `json:"injected"`
		Names       []string `json:"names"`
		VIP         string   `json:"vip"`
		Override    string   `json:"override"`
		Imgs, Bolds int
		Scripts     int
	}
	b.Eval(t, &texts, `return {
		injected: window.__l4lbInjected === undefined ? null : window.__l4lbInjected,
		names: Array.from(document.querySelectorAll("tr[data-backend] td.name"), (c) => c.textContent),
		vip: document.querySelector("section.vip h2").firstChild.textContent,
		override: document.querySelectorAll("td.override")[1].textContent,
		Imgs: document.querySelectorAll("img").length,
		Bolds: document.querySelectorAll("main b").length,
		Scripts: document.querySelectorAll("script").length}`)
	h := hostile()
	if texts.Injected != nil || texts.Imgs != 0 || texts.Bolds != 0 || texts.Scripts != 1 {
		t.Errorf("hostile text became markup: injected %v, %d img, %d b, %d script elements", texts.Injected, texts.Imgs, texts.Bolds, texts.Scripts)
	}
	if texts.Names[0] != h.VIPs[0].Backends[0].ID || texts.VIP != h.VIPs[0].Name || !strings.Contains(texts.Override, h.VIPs[0].Backends[1].OverrideBy) {
		t.Errorf("page shows %q / %q / %q, want the names and reason as text", texts.Names, texts.VIP, texts.Override)
	}

	b.Eval(t, nil, `window.__l4lbMarker = 7; return null`)
	next := hostile()
	next.VIPs[0].Backends[2].Health = "up"
	next.VIPs[0].Backends[1].Override = ""
	st.Store(next)
	b.WaitTrue(t, 10*time.Second, "be1 and be2 up after the status changed",
		`const s = Array.from(document.querySelectorAll("tr[data-backend]"), (r) => r.dataset.state).join(" "); return s === "up up up backup"`)
	var marker int
	b.Eval(t, &marker, `return window.__l4lbMarker`)
	if marker != 7 {
		t.Errorf("the page reloaded instead of redrawing in place (marker %d)", marker)
	}
	if errs := b.Errors(t); errs != "" {
		t.Errorf("browser errors:\n%s", errs)
	}
}

// everything is a status with every optional part the page draws: the
// XDP program, BGP, an xdp VIP, a UDP VIP, a VIP with SNI routes and
// named backends, a replica's lag, agents that drain and take a backend
// down, a mode change, a stopping process.
func everything() *plane.Status {
	lag := 1.5
	now := time.Now()
	be := func(id string) plane.BackendStatus {
		return plane.BackendStatus{ID: id, Address: "198.18.1.11:80", Health: "up", Weight: 100, EffectiveWeight: 100, Since: now}
	}
	replica := be("replica")
	replica.ReplicaLag = plane.ReplicaLag{Seconds: &lag}
	degraded := be("slow")
	degraded.Degraded, degraded.DegradedSince = "3 of 4 connections: no reply for 5s", now
	trial := be("trial")
	trial.Health, trial.Trial = "unknown", true
	agentDrain, agentDown := be("r0"), be("r1")
	agentDrain.Agent = &plane.AgentStatus{State: "up drain 50%", Reply: "drain\n", Error: "timeout after 1s waiting for the agent's reply"}
	agentDown.Agent = &plane.AgentStatus{State: "down ready", Why: "agent said down: disk full"}
	return &plane.Status{
		Process:  plane.ProcessStatus{Version: "v1", PID: 1, Started: now, LastReload: &plane.ReloadStatus{Time: now, OK: true}},
		Stopping: true,
		XDP:      &plane.XDPStatus{Interface: "veth0", Attach: "driver", LiveFlows: 3, Counters: map[string]uint64{"tx": 9, "drop_no_neigh": 2}},
		BGP: &plane.BGPStatus{ASN: 65001, Announced: []string{"198.18.0.10/32"}, Peers: []plane.BGPPeerStatus{
			{Address: "198.18.0.254", State: "established", Up: true}, {Address: "198.18.0.253", State: "active"}}},
		VIPs: []plane.VIPStatus{
			{Name: "x", Listen: "198.18.0.10:80", Protocol: "tcp", Algorithm: "maglev", Eligible: 1, XDP: &plane.XDPVIPStatus{Packets: 5}, Backends: []plane.BackendStatus{be("a")}},
			{Name: "u", Listen: "198.18.0.10:53", Protocol: "udp", Algorithm: "random", Eligible: 1, UDP: &plane.UDPStatus{}, Serving: "backups", Backends: []plane.BackendStatus{trial, {ID: "b", Health: "up", Backup: true}}},
			{Name: "pg", Listen: "198.18.0.10:5432", Protocol: "tcp", Algorithm: "least_conn", TCP: &plane.TCPStatus{}, Backends: []plane.BackendStatus{replica, degraded},
				SNI:   &plane.SNIStatus{Routes: []plane.RouteStatus{{Name: "reports", Databases: []string{"reports"}, Routed: 4, Eligible: 1, Backends: []plane.BackendStatus{agentDrain, agentDown}}}},
				Names: []plane.NameStatus{{Backend: "db", Lookup: "db.example.test:5432", Addresses: []string{"198.18.1.11:5432"}, AnswerAge: 3, Error: "no such host", FailingFor: 30, Errors: 2}}},
			{Name: "pg", Listen: "198.18.0.10:5432", Protocol: "tcp", Draining: true, Eligible: 0, TCP: &plane.TCPStatus{},
				ModeChange: &plane.ModeChangeStatus{From: "proxy", To: "xdp", Since: now, Until: now.Add(time.Minute)}},
		},
	}
}

// Every part of a full status draws without an error (a script error
// would show in the page's error line, not the console), each in its
// place: the routes' and names' tables, the XDP and BGP lines, the
// degraded, trial and backup rows, and the VIP titles' colours.
func TestPageDrawsEverything(t *testing.T) {
	var st atomic.Pointer[plane.Status]
	st.Store(everything())
	srv := serve(t, &st)
	b := testutil.NewBrowser(t, nil, 1280, 800)
	b.Open(t, srv.URL+"/")
	b.WaitTrue(t, 20*time.Second, "the VIPs or an error", `return document.querySelectorAll("section.vip").length === 4 || !document.getElementById("error").hidden`)
	var got struct {
		Error, Plane, Process string
		States                []string
		Classes               []string
		Tables                int
		Agent                 string
	}
	b.Eval(t, &got, `const e = document.getElementById("error"); return {
		Error: e.hidden ? "" : e.textContent,
		Plane: document.getElementById("plane").textContent,
		Process: document.getElementById("process").textContent,
		States: Array.from(document.querySelectorAll("tr[data-backend]"), (r) => r.dataset.backend + "=" + r.dataset.state),
		Classes: Array.from(document.querySelectorAll("section.vip"), (s) => s.className),
		Tables: document.querySelectorAll("table.names").length,
		Agent: document.querySelector("tr[data-backend=r0]").textContent}`)
	if got.Error != "" {
		t.Fatalf("the page failed to draw: %s", got.Error)
	}
	for _, want := range []string{"veth0 (driver), 3 live flows, 2 packets dropped", "198.18.0.254 established", "198.18.0.253 active", "last reload: applied"} {
		if !strings.Contains(got.Plane, want) {
			t.Errorf("plane line %q lacks %q", got.Plane, want)
		}
	}
	if !strings.Contains(got.Process, "stopping") {
		t.Errorf("process line %q does not say stopping", got.Process)
	}
	if s := strings.Join(got.States, " "); s != "a=up trial=unknown b=backup replica=up slow=degraded r0=draining r1=down" {
		t.Errorf("rows %s", s)
	}
	if c := strings.Join(got.Classes, ","); c != "vip,vip vip-backups,vip vip-none,vip vip-draining" {
		t.Errorf("VIP classes %s", c)
	}
	if !strings.Contains(got.Agent, "agent up drain 50%, last agent check: timeout after 1s") {
		t.Errorf("agent row %q", got.Agent)
	}
	if got.Tables != 1 {
		t.Errorf("%d tables of names, want 1", got.Tables)
	}
	if errs := b.Errors(t); errs != "" {
		t.Errorf("browser errors:\n%s", errs)
	}
}
