// Options, modes and sentinel errors of the loader.

package bpf

import (
	"errors"
	"fmt"

	"github.com/l4lb/l4lb/l4"
)

// Defaults for the zero fields of Options.
const (
	// DefaultConntrackSize holds about a million flows: with Maglev an
	// evicted flow usually rehashes to the same backend, but size the
	// table at twice the peak of concurrent flows (the LRU evicts in
	// batches before it is full). Each entry costs about 120 bytes of
	// kernel memory (key 40, value 16, hash and LRU links), so the
	// default takes about 120 MiB.
	DefaultConntrackSize = 1 << 20
	// DefaultMaxVIPs bounds VIP indices (vips, maglev, vip_stats).
	DefaultMaxVIPs = 512
	// DefaultMaxBackends bounds backend indices (backends, backend_stats).
	DefaultMaxBackends = 4096
	// DefaultACLSize bounds the networks of all access lists together
	// (the acl trie allocates per entry, so the bound costs nothing).
	DefaultACLSize = 1 << 16
	// DefaultSYNSources is how many source addresses the SYN rate guard
	// keeps a state for (an LRU of 16+8-byte entries, about 5 MiB).
	DefaultSYNSources = 1 << 16
)

// Options configure Load. The zero value loads with the defaults and
// without pinning.
type Options struct {
	// ConntrackSize is the conntrack LRU's capacity in flows
	// (default DefaultConntrackSize).
	ConntrackSize uint32
	// MaxVIPs bounds VIPEntry.Index: indices run from 0 to MaxVIPs-1
	// (default DefaultMaxVIPs).
	MaxVIPs uint32
	// MaxBackends bounds backend indices: 1 to MaxBackends-1, index 0
	// means "no backend" (default DefaultMaxBackends).
	MaxBackends uint32
	// ACLSize bounds the networks of every VIP's access list together
	// (default DefaultACLSize).
	ACLSize uint32
	// SYNSources is the capacity of the per-source SYN rate states
	// (default DefaultSYNSources); the least recently seen source makes
	// room.
	SYNSources uint32
	// PinPath, when set, is a directory on which maps and the XDP links are
	// pinned (under a subdirectory named by the layout version), so that a
	// restarted process adopts the maps (conntrack survives) and replaces
	// the program without detaching it. It must be on a bpffs that
	// outlives the process (one the host's mount namespace has), or an
	// empty or absent directory that Load makes into one (mount -t bpf)
	// when this process is in the host's mount namespace; see the package
	// comment, "Pinning".
	PinPath string
}

// withDefaults fills the zero fields and checks the rest.
func (o Options) withDefaults() (Options, error) {
	if o.ConntrackSize == 0 {
		o.ConntrackSize = DefaultConntrackSize
	}
	if o.MaxVIPs == 0 {
		o.MaxVIPs = DefaultMaxVIPs
	}
	if o.MaxBackends == 0 {
		o.MaxBackends = DefaultMaxBackends
	}
	if o.ACLSize == 0 {
		o.ACLSize = DefaultACLSize
	}
	if o.SYNSources == 0 {
		o.SYNSources = DefaultSYNSources
	}
	if o.MaxBackends < 2 {
		return o, fmt.Errorf("max backends %d: index 0 is reserved, need at least 2", o.MaxBackends)
	}
	return o, nil
}

// AttachMode says where in the receive path an XDP program runs: l4's
// type, named in the config ([xdp] attach) and declared there.
type AttachMode = l4.AttachMode

// The attach modes, as l4 declares them.
const (
	AttachDriver  = l4.AttachDriver
	AttachGeneric = l4.AttachGeneric
)

var (
	// ErrNotSupported wraps failures caused by a kernel or driver that
	// lacks a feature (XDP in the requested mode, BTF, map types).
	ErrNotSupported = errors.New("not supported")
	// ErrNotFound is returned for a VIP, flow or interface that does not
	// exist.
	ErrNotFound = errors.New("not found")
	// ErrPinMismatch is returned by Load when pinned maps of the same
	// layout version exist but differ in size (an Options change): call
	// Unpin on purpose, the conntrack table goes with it.
	ErrPinMismatch = errors.New("pinned maps do not match the options")
	// ErrForeignProgram is returned when an interface already runs an XDP
	// program that l4lb did not attach; it is never replaced.
	ErrForeignProgram = errors.New("another XDP program is attached")
)
