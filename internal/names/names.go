// The names a config looks up, their watchers and last good answers, and
// the expansion of a VIP's named backends into one backend per address.

package names

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/l4lb/l4lb/config"
	"github.com/l4lb/l4lb/internal/resolve"
	"github.com/l4lb/l4lb/l4"
	"github.com/l4lb/l4lb/l4/plane"
)

// FirstAnswerWait bounds how long Watch's wait waits for the first answers
// of names it has not looked up before, so that a VIP starts with its
// backends when DNS answers, and starts anyway (without them) when not.
const FirstAnswerWait = 3 * time.Second

// Names holds every name the running config looks up. Its map and
// settings change under its mu; each name's answer under the name's own
// lock, which the watcher goroutines take (never mu).
type Names struct {
	log  *zap.Logger
	poke chan struct{} // capacity 1: some name has a new answer to apply

	mu      sync.Mutex
	names   map[resolve.Query]*dnsName
	looker  resolve.Looker
	servers []netip.AddrPort
	bounds  resolve.Bounds
}

// dnsName is one name: its watcher and what it last answered.
type dnsName struct {
	q      resolve.Query
	w      *resolve.Watcher
	errors atomic.Uint64 // failed or empty lookups, for metrics

	mu       sync.Mutex
	good     []resolve.Target // the last good answer; nil: none yet
	goodAt   time.Time        // when a lookup last gave a good answer
	changed  bool             // good changed since the runtime last expanded it
	err      error            // the last lookup's error while failing
	errSince time.Time        // first failure of the current run of failures
}

// New makes an empty set of names; Watch gives it a config's. It logs as
// log's "dns".
func New(log *zap.Logger) *Names {
	return &Names{log: log.Named("dns"), poke: make(chan struct{}, 1), names: map[resolve.Query]*dnsName{}}
}

// Changed receives a value when some name has a new answer (pokes
// coalesce): TakeChanged says which VIPs it concerns.
func (d *Names) Changed() <-chan struct{} { return d.poke }

// queryOf is what named backend b of VIP vc looks up. An xdp VIP keeps
// only addresses of its own family (it forwards IPv4 to IPv4).
func queryOf(vc *config.VIP, b *config.Backend) resolve.Query {
	q := resolve.Query{Name: b.Host, Port: b.Port}
	if b.SRV != "" {
		q = resolve.Query{Name: b.SRV, SRV: true}
	}
	if vc.Mode == l4.ModeXDP {
		q.Family = resolve.IPv6
		if vc.Listen.Addr().Is4() {
			q.Family = resolve.IPv4
		}
	}
	return q
}

// wanted lists the queries of every named backend of cfg.
func wanted(cfg *config.Config) map[resolve.Query]bool {
	out := map[resolve.Query]bool{}
	if cfg == nil {
		return out
	}
	for i := range cfg.VIPs {
		vc := &cfg.VIPs[i]
		for j := range vc.Backends {
			if vc.Backends[j].IsNamed() {
				out[queryOf(vc, &vc.Backends[j])] = true
			}
		}
	}
	return out
}

// Watch starts watching the names of cfg not watched yet (all of them
// again when the resolvers or bounds changed, keeping their answers) and
// returns what waits a little for the first answers of new ones: the
// caller runs it without its own locks, so that status and the admin API
// answer while DNS is slow.
func (d *Names) Watch(cfg *config.Config) (wait func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want := wanted(cfg)
	if len(want) == 0 {
		return func() {}
	}
	g := cfg.Global
	bounds := resolve.Bounds{Min: g.ResolveMin, Max: g.ResolveMax}
	_, noClient := d.looker.(failingLooker) // resolv.conf may be readable by now
	if d.looker == nil || noClient || bounds != d.bounds || !slices.Equal(g.Resolvers, d.servers) {
		d.setResolvers(g.Resolvers, bounds)
	}
	var fresh []*dnsName
	for q := range want {
		if _, ok := d.names[q]; !ok {
			n := &dnsName{q: q}
			d.names[q] = n
			d.watch(n)
			fresh = append(fresh, n)
		}
	}
	firsts := make([]<-chan struct{}, len(fresh))
	for i, n := range fresh {
		firsts[i] = n.w.First()
	}
	log := d.log
	return func() {
		deadline := time.NewTimer(FirstAnswerWait)
		defer deadline.Stop()
		for _, first := range firsts {
			select {
			case <-first:
			case <-deadline.C:
				log.Warn("backend names not answered yet: their backends join when they are", zap.Duration("waited", FirstAnswerWait))
				return
			}
		}
	}
}

// setResolvers makes the client for servers (resolv.conf when empty) and
// restarts the watchers with it.
func (d *Names) setResolvers(servers []netip.AddrPort, b resolve.Bounds) {
	d.servers, d.bounds = slices.Clone(servers), b
	c, err := resolve.NewClient(resolve.Options{Servers: servers})
	if err != nil {
		d.log.Error("no DNS resolver: named backends cannot be looked up", zap.Error(err))
		d.looker = failingLooker{err}
	} else {
		d.looker = c
		d.log.Info("resolvers", zap.Strings("servers", c.Servers()), zap.Duration("resolve_min", b.Min), zap.Duration("resolve_max", b.Max))
	}
	for _, n := range d.names {
		n.w.Stop()
		d.watch(n)
	}
}

// failingLooker stands in for a client that could not be made: every
// lookup fails with why, which status shows.
type failingLooker struct{ err error }

func (f failingLooker) Lookup(context.Context, resolve.Query) (resolve.Answer, error) {
	return resolve.Answer{}, f.err
}

func (d *Names) watch(n *dnsName) {
	n.w = resolve.Watch(d.looker, n.q, d.bounds, func(res resolve.Result) { d.onResult(n, res) })
}

// Prune stops watching names that cfg does not use.
func (d *Names) Prune(cfg *config.Config) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want := wanted(cfg)
	for q, n := range d.names {
		if !want[q] {
			n.w.Stop()
			delete(d.names, q)
		}
	}
}

// onResult records a lookup's result. A failed or empty answer keeps the
// last good one; a new good answer is marked for the runtime to apply.
// Logged once per change of state, not per lookup.
func (d *Names) onResult(n *dnsName, res resolve.Result) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name := zap.Stringer("name", n.q)
	if res.Err != nil {
		n.errors.Add(1)
		// Logged when lookups start failing, and when they go from
		// failing to answering empty or back; not per retry (a timeout's
		// text differs every time: it names the local port).
		if n.err == nil || errors.Is(n.err, resolve.ErrNoRecords) != errors.Is(res.Err, resolve.ErrNoRecords) {
			if n.err == nil {
				n.errSince = res.At
			}
			if n.good == nil {
				d.log.Warn("backend name does not resolve: its backends are absent until it does", name, zap.Error(res.Err), zap.Duration("retry_in", res.Next))
			} else {
				d.log.Warn("backend name lookup failed: keeping the last good answer", name, zap.Error(res.Err),
					zap.Strings("addresses", targetStrings(n.good)), zap.Duration("answer_age", res.At.Sub(n.goodAt)), zap.Duration("retry_in", res.Next))
			}
		}
		n.err = res.Err
		return
	}
	if n.err != nil {
		d.log.Info("backend name resolves again", name, zap.Duration("failed_for", res.At.Sub(n.errSince)))
		n.err = nil
	}
	n.goodAt = res.At
	if n.good != nil && slices.Equal(n.good, res.Answer.Targets) {
		return
	}
	d.log.Info("backend name answer changed", name, zap.Strings("addresses", targetStrings(res.Answer.Targets)),
		zap.Strings("before", targetStrings(n.good)), zap.Duration("ttl", res.Answer.TTL), zap.Duration("next_lookup", res.Next))
	n.good, n.changed = res.Answer.Targets, true
	select {
	case d.poke <- struct{}{}:
	default:
	}
}

func targetStrings(ts []resolve.Target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Addr.String()
	}
	return out
}

// answer returns a name's last good answer (nil: none yet).
func (d *Names) answer(q resolve.Query) []resolve.Target {
	d.mu.Lock()
	n, ok := d.names[q]
	d.mu.Unlock()
	if !ok {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.good
}

// Expand returns vc with each named backend replaced by one backend per
// address of its name's last good answer (none before the first). An
// expanded backend's identity is the named backend's identity and its
// address ("pg-a.db.internal:5432@198.18.1.11:5432"): a later answer
// that keeps the address keeps the backend, its health and its counts.
// Of SRV targets, those of the lowest priority are primaries and the
// others backups (RFC 2782: higher priorities only when the lower are
// unreachable); the file's weight applies to each (SRV weights are not
// used). An address already in the VIP is skipped. vc itself is returned
// when it has no named backend.
func (d *Names) Expand(vc *config.VIP) *config.VIP {
	if !slices.ContainsFunc(vc.Backends, config.Backend.IsNamed) {
		return vc
	}
	out := *vc
	out.Backends = make([]config.Backend, 0, len(vc.Backends))
	seen := map[netip.AddrPort]bool{}
	for _, b := range vc.Backends {
		if !b.IsNamed() {
			seen[b.Address] = true
		}
	}
	for i, b := range vc.Backends {
		if !b.IsNamed() {
			out.Backends = append(out.Backends, b)
			continue
		}
		ts := d.answer(queryOf(vc, &vc.Backends[i]))
		for _, t := range ts {
			if seen[t.Addr] {
				continue
			}
			seen[t.Addr] = true
			e := b
			e.Host, e.Port, e.SRV = "", 0, ""
			e.Name, e.Address = b.ID()+"@"+t.Addr.String(), t.Addr
			e.Backup = b.Backup || t.Priority > ts[0].Priority
			out.Backends = append(out.Backends, e)
		}
	}
	if out.Algorithm == l4.Maglev && out.MaglevTableSize < 100*len(out.Backends) {
		// Load checked the table against one backend per name; the
		// answers may hold many more addresses.
		d.log.Warn("maglev_table_size is too small for the addresses the names resolve to: backend shares drift from the weights",
			zap.String("vip", out.Name), zap.Int("maglev_table_size", out.MaglevTableSize),
			zap.Int("backends", len(out.Backends)), zap.Int("want_at_least", 100*len(out.Backends)))
	}
	return &out
}

// Status describes the names of the named backends of vc.
func (d *Names) Status(vc *config.VIP, now time.Time) []plane.NameStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []plane.NameStatus
	for i := range vc.Backends {
		b := &vc.Backends[i]
		if !b.IsNamed() {
			continue
		}
		ns := plane.NameStatus{Backend: b.ID(), Lookup: b.Lookup(), Addresses: []string{}}
		if n, ok := d.names[queryOf(vc, b)]; ok {
			n.mu.Lock()
			ns.Addresses = targetStrings(n.good)
			if !n.goodAt.IsZero() {
				ns.AnswerAge = now.Sub(n.goodAt).Seconds()
			}
			if n.err != nil {
				ns.Error, ns.FailingFor = n.err.Error(), now.Sub(n.errSince).Seconds()
			}
			n.mu.Unlock()
			ns.Errors = n.errors.Load()
		}
		out = append(out, ns)
	}
	return out
}

// TakeChanged returns which VIPs use a name whose answer changed since
// the last call (nil: no name's did).
func (d *Names) TakeChanged() func(vc *config.VIP) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	changed := map[resolve.Query]bool{}
	for q, n := range d.names {
		n.mu.Lock()
		if n.changed {
			changed[q], n.changed = true, false
		}
		n.mu.Unlock()
	}
	if len(changed) == 0 {
		return nil
	}
	return func(vc *config.VIP) bool {
		for i := range vc.Backends {
			if vc.Backends[i].IsNamed() && changed[queryOf(vc, &vc.Backends[i])] {
				return true
			}
		}
		return false
	}
}

// Stop stops watching every name.
func (d *Names) Stop() {
	d.mu.Lock()
	names := d.names
	d.names = map[resolve.Query]*dnsName{}
	d.mu.Unlock()
	for _, n := range names {
		n.w.Stop()
	}
}
