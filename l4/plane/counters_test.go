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

// sampleStatus is a status struct of the test's own, so that the rules of
// CounterLines are tested apart from the planes' real counters (which
// change as counters are added; TestGoldenOutputs pins those).
type sampleStatus struct {
	Always  uint64 `text:"events/always,always"`
	Second  uint64 `text:"events/second,always"`
	Sized   uint64 `text:"events/sized,always,bytes"`
	Alone   uint64 `text:"(alone)/alone" note:"(a note)"`
	Refused uint64 `metric:"refused_total{reason=a}" text:"refused/a"`
	Other   int64  `metric:"refused_total{reason=b}" text:"refused/b"`
}

func TestCounterLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    any
		all  bool
		want []string
	}{
		{"all zero: the always line only", &sampleStatus{}, false,
			[]string{"  events: always 0  second 0  sized 0B"}},
		{"a quiet line shows when one of its values is not 0", &sampleStatus{Other: -1, Sized: 3 << 20}, false,
			[]string{"  events: always 0  second 0  sized 3.0MiB", "  refused: a 0  b -1"}},
		{"a line in parentheses prints no label, a note follows its value", &sampleStatus{Alone: 2}, false,
			[]string{"  events: always 0  second 0  sized 0B", "  alone 2 (a note)"}},
		{"all: every line", &sampleStatus{}, true,
			[]string{"  events: always 0  second 0  sized 0B", "  alone 0 (a note)", "  refused: a 0  b 0"}},
		{"nil", (*UDPStatus)(nil), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CounterLines("  ", Counters(tc.s), tc.all)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	cs := Counters(&sampleStatus{Refused: 4})
	if c := cs[4]; c.Metric != "refused_total" || c.Label != "reason" || c.LabelValue != "a" || c.Value != 4 || c.Gauge {
		t.Errorf("a split series: %+v", c)
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
