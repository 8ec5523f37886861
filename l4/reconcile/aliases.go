// Wire types moved to l4/plane, named here while their importers move.

package reconcile

import "github.com/l4lb/l4lb/l4/plane"

type (
	Status           = plane.Status
	BGPStatus        = plane.BGPStatus
	BGPPeerStatus    = plane.BGPPeerStatus
	ProcessStatus    = plane.ProcessStatus
	CapabilityStatus = plane.CapabilityStatus
	ReloadStatus     = plane.ReloadStatus
	WorkerStatus     = plane.WorkerStatus
	PipeStatus       = plane.PipeStatus
	XDPStatus        = plane.XDPStatus
	VIPStatus        = plane.VIPStatus
	BackendStatus    = plane.BackendStatus
	TCPStatus        = plane.TCPStatus
	UDPStatus        = plane.UDPStatus
	XDPVIPStatus     = plane.XDPVIPStatus
	XDPGuardStatus   = plane.XDPGuardStatus
	SNIStatus        = plane.SNIStatus
	RouteStatus      = plane.RouteStatus
	NameStatus       = plane.NameStatus
	Explanation      = plane.Explanation
	BackendRef       = plane.BackendRef
	Pin              = plane.Pin
	Pick             = plane.Pick
	HashPath         = plane.HashPath
	MaglevPath       = plane.MaglevPath
	RingPath         = plane.RingPath
	Candidate        = plane.Candidate
	OverrideResult   = plane.OverrideResult
	RebalanceStatus  = plane.RebalanceStatus
	RebalanceBackend = plane.RebalanceBackend
)

// Rebalance states.
const (
	RebalanceNone    = plane.RebalanceNone
	RebalanceRunning = plane.RebalanceRunning
	RebalanceDone    = plane.RebalanceDone
	RebalanceStopped = plane.RebalanceStopped
)

var (
	ErrCannotRebalance = plane.ErrCannotRebalance
	ErrBadClient       = plane.ErrBadClient
	ParseClient        = plane.ParseClient
)
