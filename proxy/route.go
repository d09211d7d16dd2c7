package proxy

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/routing"
)

// topoView is one immutable topology with what the proxy derives from it.
type topoView struct {
	t *routing.Topology
	// live lists the shard indexes that own at least one slot, ascending:
	// the shards a broadcast (DBSIZE, KEYS, FLUSHALL, SCAN) visits.
	live []int
}

func newTopoView(t *routing.Topology) *topoView {
	owns := make([]bool, len(t.Addrs))
	for slot := 0; slot < routing.NumSlots; slot++ {
		if i := t.Shard(uint16(slot)); i >= 0 {
			owns[i] = true
		}
	}
	v := &topoView{t: t}
	for i, ok := range owns {
		if ok {
			v.live = append(v.live, i)
		}
	}
	return v
}

// router holds the shard map shared by all event loops. Loops read it
// without locks (an atomic pointer to an immutable view); a MOVED reply or
// a refresh replaces the view.
type router struct {
	cluster bool // the map comes from a real cluster: refresh it, follow MOVED/ASK
	log     *slog.Logger
	metrics *metrics.Set // nil: not measuring
	// dialTimeout and login are how a refresh connects to a node
	// (Config.DialTimeout, Config.login).
	dialTimeout time.Duration
	login       respconn.Options
	// refreshed is called after a refresh replaced the map (nil: nothing).
	refreshed func()
	view      atomic.Pointer[topoView]
	nudge     chan struct{}
	pinNext   atomic.Uint64
	stop      context.CancelFunc
	done      chan struct{}

	// unreachable holds the shard addresses whose last dial failed: no
	// client takes one as its home shard (keyless commands) until a dial
	// to it succeeds again (any client's keyed command still tries it).
	// Read when a client connects or after a new failure, written on dial
	// failures and successes.
	mu          sync.Mutex
	unreachable map[string]bool
	downs       atomic.Uint64 // markDown calls: clients re-check their home shard when it moves
}

func (r *router) load() *topoView { return r.view.Load() }

// markDown records a failed dial to addr (see unreachable).
func (r *router) markDown(addr string) {
	r.mu.Lock()
	if r.unreachable == nil {
		r.unreachable = map[string]bool{}
	}
	r.unreachable[addr] = true
	r.mu.Unlock()
	r.downs.Add(1)
}

// rehome returns home, or another live shard when home is marked down.
func (r *router) rehome(v *topoView, home int) int {
	if home < 0 || home >= len(v.t.Addrs) {
		return home
	}
	r.mu.Lock()
	down := r.unreachable[v.t.Addrs[home]]
	r.mu.Unlock()
	if !down {
		return home
	}
	if h := r.pickHome(v, home); h >= 0 {
		return h
	}
	return home
}

// markUp records a successful dial to addr.
func (r *router) markUp(addr string) {
	r.mu.Lock()
	delete(r.unreachable, addr)
	r.mu.Unlock()
}

// pickHome returns a home shard for a client (keyless commands go there):
// the live shards in turn, skipping those marked down, unless all are;
// except, if >= 0, is skipped too. -1 when the map has no live shard.
func (r *router) pickHome(v *topoView, except int) int {
	if len(v.live) == 0 {
		return -1
	}
	start := int(r.pinNext.Add(1) % uint64(len(v.live)))
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range v.live {
		sh := v.live[(start+i)%len(v.live)]
		if sh != except && !r.unreachable[v.t.Addrs[sh]] {
			return sh
		}
	}
	return v.live[start]
}

// moved applies a MOVED redirect to the map (copy on write) and asks for a
// refresh, since one moved slot usually means more.
func (r *router) moved(slot uint16, addr string) {
	for {
		old := r.view.Load()
		if old.t.Shard(slot) >= 0 && old.t.Addrs[old.t.Shard(slot)] == addr {
			break
		}
		if r.view.CompareAndSwap(old, newTopoView(old.t.WithSlot(slot, addr))) {
			r.log.Info("slot moved", "slot", slot, "to", addr)
			if m := r.metrics; m != nil {
				m.TopologyEvent(metrics.TopologySlotMoved)
			}
			break
		}
	}
	r.requestRefresh()
}

// requestRefresh asks the refresher for a new map soon (never blocks).
func (r *router) requestRefresh() {
	if !r.cluster {
		return
	}
	select {
	case r.nudge <- struct{}{}:
	default:
	}
}

// run refreshes the map from the cluster every interval, and soon after a
// nudge, until ctx ends.
func (r *router) run(ctx context.Context, seed string, every time.Duration) {
	defer close(r.done)
	periodic(ctx, every, r.nudge, func() { r.refresh(ctx, seed) })
}

// periodic calls fn every interval, and 100 ms after a nudge (so that a
// burst of nudges costs one call), until ctx ends. The background checks
// (topology refresh, auth check) run on it.
func periodic(ctx context.Context, every time.Duration, nudge <-chan struct{}, fn func()) {
	periodicNow(ctx, every, nudge, nil, fn)
}

// periodicNow is periodic that also calls fn at once after a signal on
// now (nil: never).
func periodicNow(ctx context.Context, every time.Duration, nudge, now <-chan struct{}, fn func()) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-now:
		case <-nudge:
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		fn()
	}
}

// refresh fetches the map from the seed or, failing that, any known node.
func (r *router) refresh(ctx context.Context, seed string) {
	old := r.view.Load()
	addrs := append([]string{seed}, old.t.Addrs...)
	var lastErr error
	for _, a := range addrs {
		t, err := routing.FetchCluster(ctx, a, r.dialTimeout, r.login)
		if err != nil {
			lastErr = err
			continue
		}
		for {
			cur := r.view.Load()
			next := newTopoView(t.Rebase(cur.t))
			if r.view.CompareAndSwap(cur, next) {
				if r.refreshed != nil {
					r.refreshed()
				}
				r.countChanges(cur, next)
				return
			}
		}
	}
	r.log.Warn("cluster topology refresh failed", "err", lastErr)
}

// countChanges counts what a refresh changed in the map, from old to next
// (Set.TopologyEvent): slots with another owner, by address (a MOVED
// already applied is not counted again), and masters that joined or left.
func (r *router) countChanges(old, next *topoView) {
	m := r.metrics
	if m == nil {
		return
	}
	owner := func(v *topoView, slot uint16) string {
		if i := v.t.Shard(slot); i >= 0 {
			return v.t.Addrs[i]
		}
		return ""
	}
	for slot := 0; slot < routing.NumSlots; slot++ {
		if owner(old, uint16(slot)) != owner(next, uint16(slot)) {
			m.TopologyEvent(metrics.TopologySlotsReassigned)
			break
		}
	}
	masters := func(v *topoView) []string {
		var out []string
		for _, i := range v.live {
			out = append(out, v.t.Addrs[i])
		}
		slices.Sort(out)
		return out
	}
	if !slices.Equal(masters(old), masters(next)) {
		m.TopologyEvent(metrics.TopologyMastersChanged)
	}
}
