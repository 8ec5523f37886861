package proxy

import (
	"slices"
	"testing"

	"github.com/l4lb/l4lb/l4/plane"
)

// TestStatusCountersComeFromStats: every counter of the TCP and UDP status
// is an atomic of the service's stats of the same name, but for the few
// the planes fill themselves: a counter added to the status without one
// would read 0 forever.
func TestStatusCountersComeFromStats(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dst, src any
		own      []string
	}{
		{"tcp", &plane.TCPStatus{}, &ServiceStats{}, []string{"Queued"}},
		{"udp", &plane.UDPStatus{}, &UDPStats{}, []string{"QueueDropped", "ReplyQueueDropped"}},
	} {
		if missing := plane.LoadCounters(tc.dst, tc.src); !slices.Equal(missing, tc.own) {
			t.Errorf("%s: status fields without a stats atomic of their name: %v, want %v (filled by the plane)", tc.name, missing, tc.own)
		}
	}
}
