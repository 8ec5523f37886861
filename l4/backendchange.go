// BackendChange: an operator's run-time change to a VIP's backends
// (`l4lb backend add|set|remove`), an override on top of the file.

package l4

import "time"

// BackendChange is one run-time change to one backend of a VIP, kept on
// top of the config file: a backend added, a file backend's weight or
// max_conns set, or a file backend removed. It lasts until a reload
// changes that backend in the file, or the operator resets it; the state
// file keeps it across a restart.
type BackendChange struct {
	VIP string `json:"vip"` // the VIP's name
	// Backend is the backend's identity (its name, else its address).
	Backend string `json:"backend"`
	// Added: a backend the file does not have, with Address, Name,
	// Backup and (when set) Weight and MaxConns. Removed: a file backend
	// taken out. Neither: a file backend with Weight and/or MaxConns set.
	Added   bool   `json:"added,omitempty"`
	Removed bool   `json:"removed,omitempty"`
	Address string `json:"address,omitempty"`
	Name    string `json:"name,omitempty"`
	Backup  bool   `json:"backup,omitempty"`
	// Weight and MaxConns are the values set; nil: the file's (or, for
	// an added backend, the default).
	Weight   *int `json:"weight,omitempty"`
	MaxConns *int `json:"max_conns,omitempty"`
	// File is the backend as the file had it when the change was made
	// (its keys as TOML; "" for an added backend): a reload or a restart
	// whose file has it otherwise drops the change.
	File string `json:"file,omitempty"`
	// By is who made the change (the operator and the peer's uid), Since
	// when.
	By    string    `json:"by"`
	Since time.Time `json:"since"`
}

// Same reports whether c and o change the same backend of the same VIP:
// a file backend (removed or set) or one added at run time, which may
// take the identity of a file backend removed.
func (c *BackendChange) Same(o *BackendChange) bool {
	return c.VIP == o.VIP && c.Backend == o.Backend && c.Added == o.Added
}
