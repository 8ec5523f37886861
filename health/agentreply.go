// agentreply.go: HAProxy's agent-check reply: parsed into words, applied to an agent's state.

package health

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxAgentWeight bounds a percentage an agent may give: ten times the
// configured weight.
const MaxAgentWeight = 1000

// maxAgentReply bounds the line an agent check reads.
const maxAgentReply = 1024

// AgentAdmin is the administrative state an agent asks for.
type AgentAdmin uint8

// Administrative states.
const (
	AgentReady AgentAdmin = iota // takes new flows (the zero value)
	AgentDrain                   // no new flows; established and pinned ones stay
	AgentMaint                   // no new flows, pinned ones move; established ones stay
)

func (a AgentAdmin) String() string {
	switch a {
	case AgentReady:
		return "ready"
	case AgentDrain:
		return "drain"
	case AgentMaint:
		return "maint"
	}
	return fmt.Sprintf("admin(%d)", uint8(a))
}

// AgentReply is one reply of an agent: the words it said. A word not
// said leaves that part of the state as it was.
type AgentReply struct {
	Weight    int // percent of the configured weight; -1 = not said
	MaxConn   int // -1 = not said; 0 = no cap
	Admin     AgentAdmin
	HasAdmin  bool
	Down      bool // down, fail or stopped
	HasOp     bool // up, down, fail or stopped said
	Comment   string
	Unknown   []string // words not understood (ignored)
	OpWord    string   // the operational word as said (down, fail, stopped, up)
	AdminWord string
}

// ErrAgentReply is wrapped by ParseAgentReply's errors.
var ErrAgentReply = errors.New("agent reply not understood")

// ParseAgentReply parses one line of an agent (HAProxy's agent-check
// protocol): words separated by spaces, tabs or commas, in any order,
// case-insensitive, then an optional "#" and a comment. Words: a
// percentage ("75%", the weight as a share of the configured one), a
// cap ("maxconn:30"; 0 = none), an administrative state (ready, drain,
// maint) and an operational one (up; down, fail and stopped, which
// take the backend out). Unknown words are listed and ignored; a line
// with none of the words above is an error, and so are two percentages,
// two states of one kind, or a value out of range.
func ParseAgentReply(line string) (AgentReply, error) {
	r := AgentReply{Weight: -1, MaxConn: -1}
	line = strings.TrimRight(line, "\r\n")
	if i := strings.IndexByte(line, '#'); i >= 0 {
		r.Comment = strings.TrimSpace(line[i+1:])
		line = line[:i]
	}
	words := strings.FieldsFunc(line, func(c rune) bool { return c == ' ' || c == '\t' || c == ',' })
	known := 0
	for _, w := range words {
		lw := strings.ToLower(w)
		var err error
		switch {
		case strings.HasSuffix(lw, "%"):
			err = r.setWeight(lw)
		case strings.HasPrefix(lw, "maxconn:"):
			err = r.setMaxConn(lw[len("maxconn:"):])
		case lw == "ready" || lw == "drain" || lw == "maint":
			err = r.setAdmin(lw)
		case lw == "up" || lw == "down" || lw == "fail" || lw == "stopped":
			err = r.setOp(lw)
		default:
			r.Unknown = append(r.Unknown, clipWord(w))
			continue
		}
		if err != nil {
			return AgentReply{}, fmt.Errorf("%w: %q: %v", ErrAgentReply, clipWord(w), err)
		}
		known++
	}
	if known == 0 {
		return AgentReply{}, fmt.Errorf("%w: %q", ErrAgentReply, clipWord(line))
	}
	return r, nil
}

func (r *AgentReply) setWeight(w string) error {
	if r.Weight >= 0 {
		return errors.New("a second percentage")
	}
	n, err := strconv.Atoi(w[:len(w)-1])
	if err != nil || n < 0 || n > MaxAgentWeight {
		return fmt.Errorf("want a percentage 0..%d", MaxAgentWeight)
	}
	r.Weight = n
	return nil
}

func (r *AgentReply) setMaxConn(v string) error {
	if r.MaxConn >= 0 {
		return errors.New("a second maxconn")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1<<24 {
		return fmt.Errorf("want maxconn:N with N 0..%d", 1<<24)
	}
	r.MaxConn = n
	return nil
}

func (r *AgentReply) setAdmin(w string) error {
	if r.HasAdmin {
		return errors.New("a second administrative state")
	}
	r.HasAdmin, r.AdminWord = true, w
	switch w {
	case "drain":
		r.Admin = AgentDrain
	case "maint":
		r.Admin = AgentMaint
	}
	return nil
}

func (r *AgentReply) setOp(w string) error {
	if r.HasOp {
		return errors.New("a second operational state")
	}
	r.HasOp, r.Down, r.OpWord = true, w != "up", w
	return nil
}

// clipWord shortens what a reason quotes of a reply.
func clipWord(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.ToValidUTF8(s, "?")
}

// AgentState is what an agent's replies ask for, in force until a
// later reply changes it: HAProxy keeps each part (weight, cap, states)
// as the last word about it said. The zero value asks for nothing
// (ready, up, full weight, no cap of its own).
type AgentState struct {
	// Replied: at least one reply was understood since the agent started.
	Replied bool
	Weight  int // percent of the configured weight; valid when WeightSet
	// WeightSet: a percentage was said.
	WeightSet bool
	MaxConn   int // the cap said (0 = none); valid when MaxConnSet
	// MaxConnSet: maxconn was said.
	MaxConnSet bool
	Admin      AgentAdmin
	Down       bool
	// Why is the word (and comment) that took the backend down.
	Why string
	// Reply is the last line the agent sent (clipped); Error why the
	// last check gave no usable reply (unreachable, silent, garbage):
	// the state stays as it was.
	Reply string
	Error string
}

// Apply returns s after reply r.
func (s AgentState) Apply(r AgentReply) AgentState {
	s.Replied = true
	if r.Weight >= 0 {
		s.Weight, s.WeightSet = r.Weight, true
	}
	if r.MaxConn >= 0 {
		s.MaxConn, s.MaxConnSet = r.MaxConn, true
	}
	if r.HasAdmin {
		s.Admin = r.Admin
	}
	if r.HasOp {
		s.Down, s.Why = r.Down, ""
		if r.Down {
			s.Why = "agent said " + r.OpWord
			if r.Comment != "" {
				s.Why += ": " + r.Comment
			}
		}
	}
	return s
}

// Admits reports whether the agent lets new flows go to the backend.
func (s AgentState) Admits() bool {
	return !s.Down && s.Admin == AgentReady && (!s.WeightSet || s.Weight > 0)
}

// Scale returns weight w scaled by the agent's percentage (at least 1
// when the percentage is not 0 and w is not).
func (s AgentState) Scale(w uint32) uint32 {
	if !s.WeightSet || w == 0 {
		return w
	}
	scaled := uint64(w) * uint64(s.Weight) / 100
	if scaled == 0 && s.Weight > 0 {
		scaled = 1
	}
	return uint32(min(scaled, 1<<31))
}

// String says the state as status shows it: "ready", "drain 50%",
// "down (agent said down: disk full) maxconn:30".
func (s AgentState) String() string {
	if !s.Replied {
		return "no reply yet"
	}
	var b strings.Builder
	if s.Down {
		b.WriteString("down")
	} else {
		b.WriteString("up")
	}
	b.WriteString(" " + s.Admin.String())
	if s.WeightSet {
		fmt.Fprintf(&b, " %d%%", s.Weight)
	}
	if s.MaxConnSet {
		fmt.Fprintf(&b, " maxconn:%d", s.MaxConn)
	}
	return b.String()
}
