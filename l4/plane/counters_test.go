package plane

import (
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

// TestEveryCounterIsDeclared: each field of a data plane's status struct
// says where it shows (text tag), and each series has a help; a field
// added without them would be in the JSON only.
func TestEveryCounterIsDeclared(t *testing.T) {
	for _, s := range []any{&TCPStatus{}, &UDPStatus{}, &XDPVIPStatus{}} {
		typ := reflect.TypeOf(s).Elem()
		fields := 0
		for i := range typ.NumField() {
			if f := typ.Field(i); f.Anonymous {
				fields += f.Type.NumField()
			} else {
				fields++
			}
		}
		cs := Counters(s)
		if len(cs) != fields {
			t.Errorf("%s: %d fields, %d declared counters: give every field its text (and metric) tags", typ.Name(), fields, len(cs))
		}
		helped := map[string]bool{}
		for _, c := range cs {
			if c.Word == "" {
				t.Errorf("%s: a counter (metric %q) has no text word", typ.Name(), c.Metric)
			}
			helped[c.Metric] = helped[c.Metric] || c.Help != ""
		}
		for m, ok := range helped {
			if m != "" && !ok {
				t.Errorf("%s: series %s has no help", typ.Name(), m)
			}
		}
	}
}

func TestCounterLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    any
		all  bool
		want []string
	}{
		{"tcp, quiet lines hidden", &TCPStatus{IdleClosed: 3, LostWakeups: 1},
			false, []string{"  events: accept-errors 0  idle-closed 3  local-resource-errors 0  pipeless-copies 0  limit-waits 0",
				"  lost-wakeups 1 (moved on by the stall guard; expected 0: please report)"}},
		{"tcp proxy headers", &TCPStatus{ProxyMalformed: 2, Queued: 1},
			false, []string{"  events: accept-errors 0  idle-closed 0  local-resource-errors 0  pipeless-copies 0  limit-waits 0",
				"  proxy headers refused: untrusted 0  malformed 2  timeout 0",
				"  backends full: queued 1  queue-waits 0  queue-timeouts 0"}},
		{"xdp with sizes", &XDPVIPStatus{Packets: 7, Bytes: 3 << 20}, false,
			[]string{"  xdp: packets 7  bytes 3.0MiB  new-flows 0  drops 0  live-flows 0"}},
		{"a guard shown whole", &XDPGuardStatus{}, true, []string{"  xdp guards: acl-drops 0  syn-rate-drops 0"}},
		{"nil", (*UDPStatus)(nil), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CounterLines("  ", Counters(tc.s), tc.all)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestLoadCounters(t *testing.T) {
	var src struct {
		AcceptErrors atomic.Uint64
		Queued       atomic.Int64
		IdleClosed   uint64 // not an atomic: left to the plane
	}
	src.AcceptErrors.Store(7)
	src.Queued.Store(-2)
	src.IdleClosed = 9
	var dst TCPStatus
	missing := LoadCounters(&dst, &src)
	if dst.AcceptErrors != 7 || dst.Queued != -2 || dst.IdleClosed != 0 {
		t.Errorf("loaded %+v", dst)
	}
	if len(missing) != len(Counters(&dst))-2 || missing[0] != "IdleClosed" {
		t.Errorf("missing %v", missing)
	}
}
