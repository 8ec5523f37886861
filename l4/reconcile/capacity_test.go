package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

func TestShortfall(t *testing.T) {
	tcp := flowUnits{"connection", "max_conns"}
	for _, tc := range []struct {
		name   string
		rows   []capRow
		moving int64
		want   string
	}{
		{"room", []capRow{{"db1", 100, 90, 40}}, 60, ""},
		{"caps", []capRow{{"db1", 100, 90, 80}}, 60, "leaves db1 (max_conns 100, 80 live) to take 60 live connections: 20 of room"},
		{"one uncapped: peaks count", []capRow{{"a", 100, 10, 5}, {"b", 0, 20, 20}}, 6, "leaves a (peak 10, 5 live), b (peak 20, 20 live) to take 6 live connections: 5 of room"},
		{"over a lowered cap: no room, not less", []capRow{{"a", 10, 0, 12}, {"b", 10, 0, 9}}, 2, "leaves a (max_conns 10, 12 live), b (max_conns 10, 9 live) to take 2 live connections: 1 of room"},
		{"nothing moves", []capRow{{"a", 1, 1, 1}}, 0, ""},
		{"one", []capRow{{"a", 0, 0, 0}}, 1, "leaves a (peak 0, 0 live) to take 1 live connection: 0 of room"},
		{"many", []capRow{{"a", 0, 0, 0}, {"b", 0, 0, 0}, {"c", 0, 0, 0}, {"d", 0, 0, 0}, {"e", 0, 0, 0}, {"f", 0, 0, 0}}, 1, "and 2 more to take"},
	} {
		if got := shortfall(tc.rows, tc.moving, tcp); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestReloadCapacity: the warnings of check --diff from a running
// status and the next file, for a read pool left with no eligible
// backend and a VIP whose removed backend's flows do not fit.
func TestReloadCapacity(t *testing.T) {
	next, err := config.Parse("next.toml", []byte(`
[[vip]]
name = "pg-ro"
listen = "198.18.2.10:5433"
capacity_guard = true
  [vip.health]
  type = "postgres"
  user = "l4lb"
  role = "replica"
  [[vip.backend]]
  name = "r1"
  address = "198.18.1.11:5432"
  weight = 0
  [[vip.backend]]
  name = "r2"
  address = "198.18.1.12:5432"

[[vip]]
name = "pg-rw"
listen = "198.18.2.10:5432"
capacity_guard = true
  [[vip.backend]]
  name = "db1"
  address = "198.18.1.11:5432"
  max_conns = 100
  [[vip.backend]]
  name = "db3"
  address = "198.18.1.13:5432"
  max_conns = 10
`))
	if err != nil {
		t.Fatal(err)
	}
	st := &plane.Status{VIPs: []plane.VIPStatus{
		{Name: "pg-ro", Eligible: 1, Backends: []plane.BackendStatus{
			{ID: "r1", Address: "198.18.1.11:5432", Weight: 100, Health: "up", LiveFlows: 3},
			{ID: "r2", Address: "198.18.1.12:5432", Weight: 100, Health: "down"},
		}},
		{Name: "pg-rw", Eligible: 2, Backends: []plane.BackendStatus{
			{ID: "db1", Address: "198.18.1.11:5432", Weight: 100, Health: "up", LiveFlows: 80, PeakFlows: 90, MaxFlows: 100},
			{ID: "db2", Address: "198.18.1.12:5432", Weight: 100, Health: "up", LiveFlows: 60, PeakFlows: 70, MaxFlows: 100},
		}},
	}}
	var got []string
	for _, p := range ReloadCapacity(st, next) {
		got = append(got, p.String())
	}
	want := []string{
		`next.toml:2: vip "pg-ro": the reload leaves VIP pg-ro (a read pool: role replica) with no eligible backend`,
		`next.toml:18: vip "pg-rw": the reload removes db2 (60 live): leaves db1 (max_conns 100, 80 live), db3 (max_conns 10, 0 live) to take 60 live connections: 30 of room`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ReloadCapacity:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// countingPlane counts live flows itself, as the XDP plane does from its
// conntrack (plane.LiveCounter).
type countingPlane struct {
	*fakePlane
	live map[l4.BackendID]int64
}

func (p *countingPlane) LiveFlows(b *l4.Backend) int64 { return p.live[b.ID] }

// TestGuardCountsThePlanesFlows: on a plane that counts live flows
// itself (xdp), the guard moves its count, not the backend's own (0
// there), and a forced drain reports it.
func TestGuardCountsThePlanesFlows(t *testing.T) {
	rt := New(zaptest.NewLogger(t), Options{})
	rt.openPlane = func(key l4.VIPKey, vc *config.VIP, v *vip) (plane.Plane, func(*config.VIP) error, error) {
		return &countingPlane{&fakePlane{}, map[l4.BackendID]int64{"a": 5, "b": 1}}, func(*config.VIP) error { return nil }, nil
	}
	defer rt.Shutdown(context.Background())
	guarded := strings.Replace(fakeVIP, "idle_timeout =", "capacity_guard = true\nidle_timeout =", 1)
	apply(t, rt, fmt.Sprintf(guarded, "1m", fakeBackendB))
	v := rt.vipNamed("v")
	v.mu.Lock()
	v.backends["b"].b.NotePeak(3)
	v.mu.Unlock()

	_, err := rt.SetOverride("v", "a", l4.OverrideDrain, "t", false)
	const want = "refused: drain a leaves b (peak 3, 1 live) to take 5 live connections: 2 of room; --force to drain anyway"
	if !errors.Is(err, ErrRefused) || err.Error() != want {
		t.Fatalf("drain of a: %v, want %q", err, want)
	}
	res, err := rt.SetOverride("v", "a", l4.OverrideDrain, "t", true)
	if err != nil || res.LiveFlows != 5 || !strings.HasPrefix(res.Forced, "drain a leaves b") {
		t.Fatalf("forced drain: %+v %v", res, err)
	}
	// b is the last eligible backend now.
	if _, err := rt.SetOverride("v", "b", l4.OverrideDisable, "t", false); err == nil || !strings.Contains(err.Error(), "leaves VIP v with no eligible backend") {
		t.Fatalf("disable of the last eligible backend: %v", err)
	}

	// Without capacity_guard (the default) nothing is refused.
	apply(t, rt, fmt.Sprintf(fakeVIP, "1m", fakeBackendB))
	if _, err := rt.SetOverride("v", "b", l4.OverrideDisable, "t", false); err != nil {
		t.Fatalf("disable of the last eligible backend without capacity_guard: %v", err)
	}
}

// samplingPlane fills the live flows into status itself, as the XDP
// plane does from its conntrack read (which notes the backends' peaks
// only after it counted).
type samplingPlane struct{ *countingPlane }

func (p *samplingPlane) FillStatus(s *plane.VIPStatus) {
	for i := range s.Backends {
		s.Backends[i].LiveFlows = p.live[l4.BackendID(s.Backends[i].ID)]
	}
}

// TestStatusPeakNotBelowLive: a status never shows a backend with more
// live flows than its peak_flows, though the plane's count is newer than
// the peak it read first (an xdp flow counted between the two reads:
// peak_flows was absent beside live_flows 1).
func TestStatusPeakNotBelowLive(t *testing.T) {
	rt := New(zaptest.NewLogger(t), Options{})
	rt.openPlane = func(key l4.VIPKey, vc *config.VIP, v *vip) (plane.Plane, func(*config.VIP) error, error) {
		return &samplingPlane{&countingPlane{&fakePlane{}, map[l4.BackendID]int64{"a": 2}}}, func(*config.VIP) error { return nil }, nil
	}
	defer rt.Shutdown(context.Background())
	apply(t, rt, fmt.Sprintf(fakeVIP, "1m", fakeBackendB))
	v := rt.vipNamed("v")
	v.mu.Lock()
	v.backends["b"].b.NotePeak(3)
	v.mu.Unlock()

	got := map[string][2]int64{}
	for _, b := range rt.Status().VIPs[0].Backends {
		got[b.ID] = [2]int64{b.LiveFlows, b.PeakFlows}
	}
	if want := map[string][2]int64{"a": {2, 2}, "b": {0, 3}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("live and peak flows: %v, want %v", got, want)
	}
}
