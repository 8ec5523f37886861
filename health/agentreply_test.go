// agentreply_test.go: the agent-check reply parser and how replies add up to a state.

package health

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseAgentReply(t *testing.T) {
	cases := []struct {
		line string
		want AgentReply // Weight/MaxConn -1 unless set
		err  string
	}{
		{"75%\n", AgentReply{Weight: 75, MaxConn: -1}, ""},
		{"up 100%", AgentReply{Weight: 100, MaxConn: -1, HasOp: true, OpWord: "up"}, ""},
		{"DRAIN,maxconn:30\r\n", AgentReply{Weight: -1, MaxConn: 30, HasAdmin: true, Admin: AgentDrain, AdminWord: "drain"}, ""},
		{"maint\t0%", AgentReply{Weight: 0, MaxConn: -1, HasAdmin: true, Admin: AgentMaint, AdminWord: "maint"}, ""},
		{"ready up", AgentReply{Weight: -1, MaxConn: -1, HasAdmin: true, AdminWord: "ready", HasOp: true, OpWord: "up"}, ""},
		{"down #disk full", AgentReply{Weight: -1, MaxConn: -1, HasOp: true, Down: true, OpWord: "down", Comment: "disk full"}, ""},
		{"stopped", AgentReply{Weight: -1, MaxConn: -1, HasOp: true, Down: true, OpWord: "stopped"}, ""},
		{"fail 50% hello", AgentReply{Weight: 50, MaxConn: -1, HasOp: true, Down: true, OpWord: "fail", Unknown: []string{"hello"}}, ""},
		{"", AgentReply{}, "agent reply not understood"},
		{"HTTP/1.1 400 Bad Request", AgentReply{}, `agent reply not understood: "HTTP/1.1 400 Bad Request"`},
		{"#only a comment", AgentReply{}, "agent reply not understood"},
		{"x%", AgentReply{}, `"x%": want a percentage 0..1000`},
		{"1001%", AgentReply{}, `want a percentage 0..1000`},
		{"-5%", AgentReply{}, `want a percentage`},
		{"50% 60%", AgentReply{}, "a second percentage"},
		{"maxconn:", AgentReply{}, "want maxconn:N"},
		{"maxconn:-1", AgentReply{}, "want maxconn:N"},
		{"drain ready", AgentReply{}, "a second administrative state"},
		{"up down", AgentReply{}, "a second operational state"},
	}
	for _, c := range cases {
		got, err := ParseAgentReply(c.line)
		if c.err != "" {
			if err == nil || !errors.Is(err, ErrAgentReply) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want one containing %q", c.line, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.line, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", c.line, got, c.want)
		}
	}
}

// TestAgentStateApply: each part of the state is the last word said
// about it (HAProxy's agent-check); other replies leave it alone.
func TestAgentStateApply(t *testing.T) {
	var s AgentState
	if !s.Admits() || s.Scale(10) != 10 || s.String() != "no reply yet" {
		t.Fatalf("zero state %+v: admits %v scale %d %q", s, s.Admits(), s.Scale(10), s)
	}
	steps := []struct {
		line   string
		admits bool
		scale  uint32 // of weight 10
		str    string
	}{
		{"50%", true, 5, "up ready 50%"},
		{"drain", false, 5, "up drain 50%"},
		{"maxconn:3", false, 5, "up drain 50% maxconn:3"},
		{"ready", true, 5, "up ready 50% maxconn:3"},
		{"1%", true, 1, "up ready 1% maxconn:3"}, // never rounds a weight to 0
		{"down # disk full", false, 1, "down ready 1% maxconn:3"},
		{"200%", false, 20, "down ready 200% maxconn:3"},
		{"up", true, 20, "up ready 200% maxconn:3"},
		{"0%", false, 0, "up ready 0% maxconn:3"},
		{"maint 100% maxconn:0", false, 10, "up maint 100% maxconn:0"},
		{"ready", true, 10, "up ready 100% maxconn:0"},
	}
	for _, st := range steps {
		r, err := ParseAgentReply(st.line)
		if err != nil {
			t.Fatalf("%q: %v", st.line, err)
		}
		s = s.Apply(r)
		if s.Admits() != st.admits || s.Scale(10) != st.scale || s.String() != st.str {
			t.Fatalf("after %q: admits %v scale %d %q; want %v %d %q", st.line, s.Admits(), s.Scale(10), s, st.admits, st.scale, st.str)
		}
		if strings.HasPrefix(st.line, "down") && s.Why != "agent said down: disk full" {
			t.Fatalf("why %q", s.Why)
		}
	}
}

// render writes r back as a line in one canonical order.
func render(r AgentReply) string {
	var w []string
	if r.Weight >= 0 {
		w = append(w, fmt.Sprintf("%d%%", r.Weight))
	}
	if r.MaxConn >= 0 {
		w = append(w, fmt.Sprintf("maxconn:%d", r.MaxConn))
	}
	if r.HasAdmin {
		w = append(w, r.AdminWord)
	}
	if r.HasOp {
		w = append(w, r.OpWord)
	}
	return strings.Join(w, " ")
}

// FuzzAgentReply: any line either parses or fails with ErrAgentReply;
// a parsed one has values in range and at least one known word, says
// the same when written back in canonical form, and applying it twice
// is applying it once.
func FuzzAgentReply(f *testing.F) {
	for _, s := range []string{"75%\n", "up 100%", "drain,maxconn:30", "down #bye", "maint\t0%", "garbage", "", "#", "50% 60%", "READY", "maxconn:16777216", "1000%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseAgentReply(line)
		if err != nil {
			if !errors.Is(err, ErrAgentReply) {
				t.Fatalf("%q: error %v does not wrap ErrAgentReply", line, err)
			}
			return
		}
		if r.Weight < -1 || r.Weight > MaxAgentWeight || r.MaxConn < -1 || r.MaxConn > 1<<24 || r.Admin > AgentMaint {
			t.Fatalf("%q: out of range %+v", line, r)
		}
		if r.Weight < 0 && r.MaxConn < 0 && !r.HasAdmin && !r.HasOp {
			t.Fatalf("%q: parsed without a known word", line)
		}
		if r.Down && !r.HasOp {
			t.Fatalf("%q: down without an operational word", line)
		}
		again, err := ParseAgentReply(render(r))
		if err != nil {
			t.Fatalf("%q: canonical %q does not parse: %v", line, render(r), err)
		}
		r.Comment, r.Unknown = "", nil
		if !reflect.DeepEqual(again, r) {
			t.Fatalf("%q: canonical %q parses to %+v, want %+v", line, render(r), again, r)
		}
		var s AgentState
		once := s.Apply(r)
		if twice := once.Apply(r); twice != once {
			t.Fatalf("%q: applying twice %+v != once %+v", line, twice, once)
		}
		if once.Admits() && (once.Down || once.Admin != AgentReady) {
			t.Fatalf("%q: admits in %+v", line, once)
		}
	})
}
