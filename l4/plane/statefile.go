// The state file's part of status.

package plane

import "time"

// StateFileStatus is what [global] state_file holds and did.
type StateFileStatus struct {
	Path string `json:"path"`
	// Written is the last write; Error the last write's failure (empty:
	// it succeeded).
	Written time.Time `json:"written,omitzero"`
	Error   string    `json:"error,omitempty"`
	// Restored says what the start took from the file: "" nothing (none
	// was there), else how many changes and backend states; Refused why
	// the file was not used (corrupt, another host's, another schema).
	Restored string `json:"restored,omitempty"`
	Refused  string `json:"refused,omitempty"`
}
