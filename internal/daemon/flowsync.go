// Flow sync's life in the daemon: started with the VIPs, restarted by a
// reload that changes [flow_sync], stopped on exit.

package daemon

import (
	"fmt"
	"reflect"
	"sync"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/flowsync"
	"github.com/l4lb/l4lb/l4/plane"
)

// flowSync holds the running syncer (nil without [flow_sync]). Its
// methods are nil-safe.
type flowSync struct {
	log   *zap.Logger
	table func() plane.FlowTable

	mu   sync.Mutex
	conf *config.FlowSync
	s    *flowsync.Syncer
}

// apply starts, restarts or stops the syncer for conf.
func (f *flowSync) apply(conf *config.FlowSync) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if reflect.DeepEqual(conf, f.conf) {
		return nil
	}
	if f.s != nil {
		f.s.Close()
		f.s = nil
	}
	f.conf = nil
	if conf == nil {
		return nil
	}
	s, err := flowsync.Start(flowsync.Options{Listen: conf.Listen, Peers: conf.Peers, Key: []byte(conf.Key), Interval: conf.Interval,
		MaxRate: conf.MaxRate, MaxEntries: conf.MaxEntries, Table: f.table, Log: f.log})
	if err != nil {
		return fmt.Errorf("flow_sync: %w", err)
	}
	f.s, f.conf = s, conf
	return nil
}

func (f *flowSync) close() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s.Close()
	f.s, f.conf = nil, nil
}

func (f *flowSync) status() *plane.FlowSyncStatus {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s.Status()
}
