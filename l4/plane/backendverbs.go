// The answer of the run-time backend verbs: `l4lb backend add|set|remove`.

package plane

// BackendChangeResult says what a run-time backend change did.
type BackendChangeResult struct {
	VIP     string `json:"vip"`
	Backend string `json:"backend"` // the backend's identity: its name, or its address
	Address string `json:"address,omitempty"`
	// Change is what is in force now, as status shows it ("added",
	// "weight 7 (file 100)", "removed", "as in the file").
	Change string `json:"change"`
	By     string `json:"by"`
	// Unchanged: the backend was already so; nothing was done.
	Unchanged bool `json:"unchanged,omitempty"`
	// A remove: the backend's live flows when its drain began, how long
	// the drain waited, and the flows still open when it was removed
	// (they end as a reload's removal ends them).
	DrainedFrom int64   `json:"drained_from,omitempty"`
	Waited      float64 `json:"waited_seconds,omitempty"`
	LeftFlows   int64   `json:"left_flows,omitempty"`
	// Forced: the drain before the removal went past the capacity guard.
	Forced string `json:"forced,omitempty"`
}
