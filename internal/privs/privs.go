package privs

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"kernel.org/pub/linux/libs/security/libcap/cap"
)

// Sets are a thread's capability sets, as names such as "cap_net_admin".
type Sets struct {
	Effective []string `json:"effective"`
	Permitted []string `json:"permitted"`
	Bounding  []string `json:"bounding"`
}

// Read returns the capability sets of the process (its main thread; after
// Drop every thread has the same).
func Read() (Sets, error) {
	return ReadStatus("/proc/self/status")
}

// ReadStatus parses CapEff, CapPrm and CapBnd of a /proc/.../status file
// (of any process or thread).
func ReadStatus(path string) (Sets, error) {
	f, err := os.Open(path)
	if err != nil {
		return Sets{}, fmt.Errorf("capabilities: %w", err)
	}
	defer f.Close()
	var s Sets
	fields := map[string]*[]string{"CapEff": &s.Effective, "CapPrm": &s.Permitted, "CapBnd": &s.Bounding}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		dst, want := fields[key]
		if !ok || !want {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(val), 16, 64)
		if err != nil {
			return Sets{}, fmt.Errorf("capabilities: %s %q: %w", key, val, err)
		}
		*dst = Names(mask)
	}
	return s, sc.Err()
}

// Names lists the capabilities in a mask as the kernel numbers them.
func Names(mask uint64) []string {
	out := []string{}
	for v := cap.Value(0); v < 64; v++ {
		if mask&(1<<v) != 0 {
			out = append(out, v.String())
		}
	}
	return out
}

// Drop keeps only keep in the effective and permitted sets of every
// thread, empties the inheritable and ambient sets, and removes every
// other capability from the bounding set, so that no later exec (an
// upgrade's new binary, running as root) can gain one back. Capabilities
// in keep that the process does not hold stay absent. It returns what it
// kept.
func Drop(keep []cap.Value) ([]cap.Value, error) {
	cur := cap.GetProc()
	var kept []cap.Value
	for _, v := range keep {
		if on, err := cur.GetFlag(cap.Permitted, v); err == nil && on {
			kept = append(kept, v)
		}
	}
	var drop []cap.Value
	for v := cap.Value(0); v < cap.MaxBits(); v++ {
		if in, err := cap.GetBound(v); err == nil && in && !slices.Contains(kept, v) {
			drop = append(drop, v)
		}
	}
	// The bounding set first: dropping from it needs CAP_SETPCAP, which
	// the new permitted set no longer has.
	if err := cap.DropBound(drop...); err != nil {
		return nil, fmt.Errorf("drop %d capabilities from the bounding set (needs cap_setpcap): %w", len(drop), err)
	}
	if err := cap.ResetAmbient(); err != nil {
		return nil, fmt.Errorf("clear the ambient capabilities: %w", err)
	}
	next := cap.NewSet()
	for _, f := range []cap.Flag{cap.Permitted, cap.Effective} {
		if err := next.SetFlag(f, true, kept...); err != nil {
			return nil, fmt.Errorf("capabilities %v: %w", kept, err)
		}
	}
	if err := next.SetProc(); err != nil {
		return nil, fmt.Errorf("set capabilities %v: %w", kept, err)
	}
	return kept, nil
}
