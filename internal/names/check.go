// What `l4lb check` says of a config's names: whether each resolves now.

package names

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/resolve"
)

// Check looks up every name of cfg's named backends once, within
// timeout, and returns a warning for each that does not resolve now:
// `l4lb check` says which, and passes (run starts without them, and adds
// them when they resolve).
func Check(cfg *config.Config, timeout time.Duration) []config.Problem {
	type named struct {
		vip, key string
		line     int
		q        resolve.Query
	}
	var all []named
	for i := range cfg.VIPs {
		vc := &cfg.VIPs[i]
		for j := range vc.Backends {
			if b := &vc.Backends[j]; b.IsNamed() {
				key := fmt.Sprintf("vip[%d].backend[%d].address", i, j)
				if b.SRV != "" {
					key = fmt.Sprintf("vip[%d].backend[%d].srv", i, j)
				}
				all = append(all, named{vc.Name, key, b.Line, queryOf(vc, b)})
			}
		}
	}
	if len(all) == 0 {
		return nil
	}
	c, err := resolve.NewClient(resolve.Options{Servers: cfg.Global.Resolvers, Timeout: min(timeout, 2*time.Second)})
	if err != nil {
		return []config.Problem{{File: cfg.Path, Key: "global.resolvers", Msg: fmt.Sprintf("named backends cannot be looked up: %v", err)}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := map[resolve.Query]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range all {
		mu.Lock()
		_, asked := errs[n.q]
		errs[n.q] = nil
		mu.Unlock()
		if asked {
			continue
		}
		wg.Go(func() {
			_, err := c.Lookup(ctx, n.q)
			mu.Lock()
			errs[n.q] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	var out []config.Problem
	for _, n := range all {
		if err := errs[n.q]; err != nil {
			out = append(out, config.Problem{File: cfg.Path, Line: n.line, VIP: n.vip, Key: n.key,
				Msg: fmt.Sprintf("%s does not resolve now (%v): the backend is absent until it does", n.q, err)})
		}
	}
	return out
}
