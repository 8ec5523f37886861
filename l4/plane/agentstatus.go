// agentstatus.go: a backend's agent check (HAProxy agent-check) as status shows it.

package plane

// AgentStatus is what a backend's agent asks for now and what it last
// said: State is "no reply yet" or the operational and administrative
// states with the weight share and cap in force ("up drain 50%",
// "down ready maxconn:30"); Why the word that took the backend down;
// Reply the agent's last line; Error why the last agent check gave no
// usable reply (unreachable, silent, not understood), which changes
// nothing.
type AgentStatus struct {
	State string `json:"state"`
	Why   string `json:"why,omitempty"`
	Reply string `json:"reply,omitempty"`
	Error string `json:"error,omitempty"`
}

// Text is the agent's part of a status line: "agent up drain 50%", with
// the reason it is down and the last error.
func (a *AgentStatus) Text() string {
	if a == nil {
		return ""
	}
	s := "agent " + a.State
	if a.Why != "" {
		s += " (" + a.Why + ")"
	}
	if a.Error != "" {
		s += "; last agent check: " + a.Error
	}
	return s
}
