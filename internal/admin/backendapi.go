package admin

// The wire types of the run-time backend verbs (`l4lb backend add|set|remove`).

import "net/url"

// BackendAddRequest is POST /vips/{vip}/backends's body.
type BackendAddRequest struct {
	// Address is ip:port, checked as the file's address is.
	Address string `json:"address"`
	Name    string `json:"name,omitempty"`
	// Weight and MaxConns: absent, the file's defaults (100, no cap).
	Weight   *int `json:"weight,omitempty"`
	MaxConns *int `json:"max_conns,omitempty"`
	Backup   bool `json:"backup,omitempty"`
	// Operator: as in OverrideRequest.
	Operator string `json:"operator,omitempty"`
}

// BackendSetRequest is POST /vips/{vip}/backends/{backend}/set's body:
// Weight and/or MaxConns, or Reset alone (the file's values again).
type BackendSetRequest struct {
	Weight   *int   `json:"weight,omitempty"`
	MaxConns *int   `json:"max_conns,omitempty"`
	Reset    bool   `json:"reset,omitempty"`
	Operator string `json:"operator,omitempty"`
}

// BackendRemoveRequest is POST /vips/{vip}/backends/{backend}/remove's
// body.
type BackendRemoveRequest struct {
	// Timeout bounds the drain before the removal (a Go duration; empty:
	// 30s; "0s": remove at once).
	Timeout string `json:"timeout,omitempty"`
	// Force: drain past the capacity guard, as drain's force.
	Force    bool   `json:"force,omitempty"`
	Operator string `json:"operator,omitempty"`
}

// BackendsPath is the path that adds a backend to vip.
func BackendsPath(vip string) string {
	return "/vips/" + url.PathEscape(vip) + "/backends"
}
