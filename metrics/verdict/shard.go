package verdict

import (
	"time"

	"github.com/respmeter/respmeter/metrics/split"
)

// SyncShards starts a view (Config.NewView) for each shard the proxy
// routes to that has none yet: at start the --shards or the --cluster
// map's masters, later the masters a topology refresh brings. A view whose
// metrics cannot be registered is logged once and kept without probe and
// poller. Views of shards that left the map keep running. Without routing
// it does nothing.
func (a *Analyzer) SyncShards() {
	a.mu.Lock()
	addrs := a.shardAddrs
	a.mu.Unlock()
	if addrs == nil || a.cfg.NewView == nil {
		return
	}
	for _, addr := range addrs() {
		if a.shardView(addr) != nil {
			continue
		}
		v, err := a.cfg.NewView(addr)
		if err != nil {
			a.log.Warn("no engine probe and poll for this shard", "shard", addr, "err", err)
			v = &View{Addr: addr}
		}
		a.mu.Lock()
		a.shards = append(a.shards, v)
		a.mu.Unlock()
	}
}

// shardView returns the view of the shard at addr, nil when there is none.
func (a *Analyzer) shardView(addr string) *View {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, v := range a.shards {
		if v.Addr == addr {
			return v
		}
	}
	return nil
}

// Shards returns the per-shard views (nil without routing), in the order
// their shards appeared, in a slice the caller may keep.
func (a *Analyzer) Shards() []*View {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.shards[:len(a.shards):len(a.shards)]
}

// ShardLatest returns the verdict of v's latest interval (a shard's); ok
// is false before the first.
func (a *Analyzer) ShardLatest(v *View) (split.Verdict, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v.last == nil {
		return split.Verdict{}, false
	}
	return v.last.Verdict, true
}

// ShardRecords returns v's latest interval and latest with requests to
// it (nil before each).
func (a *Analyzer) ShardRecords(v *View) (last, busy *Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return v.last, v.busy
}

// ShardLasts returns every shard's latest interval (nil before its
// first), in the order of Shards, read at one moment.
func (a *Analyzer) ShardLasts() (views []*View, last []*Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, v := range a.shards {
		views = append(views, v)
		last = append(last, v.last)
	}
	return views, last
}

// ShardSum returns a copy of v's sums since start.
func (a *Analyzer) ShardSum(v *View) Sum {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := v.sum
	s.culprits = nil
	return s
}

// ProbeBase returns v's probe baseline (0 before one).
func (a *Analyzer) ProbeBase(v *View) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return v.probeBase
}

// shardVerdicts computes, under routing, each shard's verdict of the
// interval whose overall evidence is in (all its interval): the shard's
// requests and upstream, the clients' think time shared out by the
// shard's part of the requests, the proxy's loop wait (taken from a
// shard's path only up to the least room any shard's path has above its
// floor: split.Interval.LoopPathCap), the engine's mean execution of the
// commands the clients sent weighted by its own calls of each (that
// shard's mix) and the shard's witnesses and probe. It returns the
// request-weighted mean of the shards' execution for the overall verdict;
// ok is false without routing or when a shard with requests had no
// execution figures.
func (a *Analyzer) shardVerdicts(now time.Time, in Input, all split.Interval) (mean time.Duration, ok bool) {
	views := a.Shards()
	if len(views) == 0 {
		return 0, false
	}
	var weighted float64
	var requests int64
	ok = true
	ivs := make([]split.Interval, len(views))
	var room time.Duration
	capped := false
	for i, v := range views {
		sin := in
		sin.Shard = v.Addr
		sin.LoopWaitKnown = false
		sin.ProxyHostKnown = false
		sin.EngineMean = nil
		shardReq := split.FromShard(in.Prev, in.Cur, v.Addr).Requests
		a.engineInput(v, &sin, shardReq, true)
		iv := Build(sin)
		ivs[i] = iv
		if iv.Requests > 0 {
			r := max(iv.Verdict().Network-iv.RTTFloor, 0) // no loop wait yet: the path's room
			if !capped || r < room {
				room, capped = r, true
			}
		}
	}
	for i, v := range views {
		iv := ivs[i]
		iv.LoopWait, iv.LoopWaitKnown = all.LoopWait, all.LoopWaitKnown
		iv.LoopPathCap, iv.LoopPathCapped = room, capped
		rec := &Record{End: now, Interval: iv, Verdict: iv.Verdict()}
		a.learnPath(v, rec)
		a.mu.Lock()
		v.last = rec
		if iv.Requests > 0 {
			v.busy = rec
			v.sum.Add(rec)
		}
		a.mu.Unlock()
		if iv.Requests <= 0 {
			continue
		}
		if iv.EngineMean <= 0 {
			ok = false
			continue
		}
		weighted += float64(iv.EngineMean) * float64(iv.Requests)
		requests += iv.Requests
	}
	if !ok || requests == 0 {
		return 0, false
	}
	return time.Duration(weighted / float64(requests)), true
}

// EngineMeans returns the engine's mean execution time per command label
// since the Poller's first poll (INFO commandstats); under routing the
// shards' pollers' figures together (their time over their calls); empty
// when the Pollers are off or have not polled twice.
func (a *Analyzer) EngineMeans() map[string]time.Duration {
	type sum struct {
		calls int64
		time  time.Duration
	}
	sums := map[string]sum{}
	for _, v := range append([]*View{a.cfg.Engine}, a.Shards()...) {
		if v == nil || v.Poller == nil {
			continue
		}
		for _, c := range v.Poller.Stats().Commands {
			s := sums[c.Command]
			s.calls += c.Calls
			s.time += c.Time
			sums[c.Command] = s
		}
	}
	means := make(map[string]time.Duration, len(sums))
	for cmd, s := range sums {
		if s.calls > 0 {
			means[cmd] = s.time / time.Duration(s.calls)
		}
	}
	return means
}
