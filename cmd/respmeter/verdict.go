package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/metrics"
	engstats "github.com/respmeter/respmeter/metrics/engine"
	"github.com/respmeter/respmeter/metrics/split"
)

// verdictRecord is the verdict of one interval with what it was computed
// from.
type verdictRecord struct {
	End      time.Time
	Interval split.Interval
	Verdict  split.Verdict
}

// analyzer computes, every interval, where the time of the proxied requests
// went (metrics/split): from two cumulative Snapshots of the Set, the
// Poller's engine means and the proxy's requests in flight, integrated over
// time (Little's law's L; see inFlightArea). It runs on a goroutine of its
// own (run) and only reads Snapshots and atomics: nothing of it is on the
// proxy's hot path.
//
// run is called once; the other methods may be called from any goroutine.
type analyzer struct {
	set *metrics.Set
	log *slog.Logger
	// inFlightArea is the area under the proxy's requests in flight since
	// it started, in request·nanoseconds (proxy.Proxy.InFlightArea; nil:
	// L unknown). It is integrated exactly from the moments the proxy's
	// loops count requests in and out (metrics.InFlight), not sampled: a
	// sampler reads the count when the process wakes, and a busy process
	// wakes mostly when a request or reply arrives (measured with the
	// sampler this replaced, at 100 Hz on a thread of its own: L/λW 0.62
	// for one client pausing 3 ms between GETs). The interval's L is the
	// difference of two reads over the interval's length. The count spans
	// a request from the loop's count-in (after parsing its batch, t_in
	// before) to after the reply's write (t_out before), so L exceeds λW
	// by λ × (write − parse time): measured ~17 µs per request under -race
	// on a loaded 2-core machine, 10% of a 170 µs GET, 2% of 1 ms.
	inFlightArea func() int64
	// loopLag hands each of the proxy's loops a task that reports how
	// long it waited to run (proxy.Proxy.LoopLag); nil: loop wait unknown.
	loopLag func(record func(time.Duration)) int
	// eng is the upstream's probe and poller without routing; under
	// --route slots or pinned it is empty (nil probe and poller), and
	// shards holds a view per shard instead.
	eng      *engineView
	interval time.Duration
	// probeEvery and pollEvery are the configured intervals, for /stats.
	probeEvery, pollEvery time.Duration

	started time.Time

	// shardAddrs, under --route slots or pinned, returns the shards the
	// proxy routes to (proxy.Proxy.ShardAddrs), and newView starts the
	// probe and poller of one (newEngineView); nil without routing.
	// syncShards calls them.
	shardAddrs func() []string
	newView    func(addr string) (*engineView, error)

	mu   sync.Mutex
	last *verdictRecord // the latest interval; nil before the first
	busy *verdictRecord // the latest interval with requests
	// shards are the per-shard views under routing, in the order their
	// shards appeared (the --shards order; a --cluster map's masters, then
	// masters that joined later); append-only.
	shards []*engineView
	// Engine wait since start, per command label: the sum over intervals
	// of the interval's mean wait (and run-queue wait) times the label's
	// requests in it, in seconds·requests; waitN the requests counted.
	// Request-weighted witnesses since start: wUtil, wDemand, wRunQ sums
	// of the interval's values times its requests, over wN requests.
	wait, runq                map[string]float64
	waitN                     map[string]int64
	wUtil, wDemand, wRunQ, wN float64
	// wPreempt sums, weighted likewise, the run-queue wait the verdict
	// took out of the engine's execution time (split.Interval.Verdict).
	wPreempt float64
	wHost    bool
	// lagSum, lagN: the loop-timing tasks' waits in the current interval
	// (sampleLoops); allLagSum, allLagN since start.
	lagSum, allLagSum time.Duration
	lagN, allLagN     int64
}

// engineView is one engine's side connections — the PING probe and the
// engine poller, each on a connection of its own to that engine — and what
// the analyzer keeps about them: without routing the upstream's
// (analyzer.eng), under --route slots or pinned one per shard
// (analyzer.shards), whose verdict it then computes per interval next to
// the overall one.
// engineLabel is the engine label of the view's verdict gauges: the
// poller's (engstats.Poller.Engine), or "" with the poller off.
func (v *engineView) engineLabel() string {
	if v.poller == nil {
		return ""
	}
	return v.poller.Engine()
}

type engineView struct {
	// addr is the engine's address, its shard label.
	addr   string
	poller *engstats.Poller // nil when --engine-poll is 0
	probe  *engstats.Probe  // nil when --probe-interval is 0
	// witPrev is the Poller's WitnessTotal at the previous interval's end
	// (witPrevOK); only run's goroutine uses them.
	witPrev   engstats.Witness
	witPrevOK bool

	// The fields below are guarded by analyzer.mu.

	// probeBase is the probe's unloaded baseline: the lowest median round
	// trip of an interval without requests (to this engine) and with at
	// least minProbeWindow PINGs; 0 before.
	probeBase time.Duration
	// last and busy are a shard's verdicts (routed only): of the latest
	// interval (nil before the first) and of the latest with requests to
	// it; sums add up its intervals with requests.
	last, busy *verdictRecord
	sums       shardSums
}

// pollerOf returns v's poller, nil when v or its poller is nil.
func (v *engineView) pollerOf() *engstats.Poller {
	if v == nil {
		return nil
	}
	return v.poller
}

// probeOf returns v's probe, nil when v or its probe is nil.
func (v *engineView) probeOf() *engstats.Probe {
	if v == nil {
		return nil
	}
	return v.probe
}

// shardSums are one shard's verdicts summed over the intervals with
// requests to it since start, weighted by those requests, in seconds·
// requests: Upstream over all of them (n requests), the split of upstream
// over those in which the engine's execution was known (nEngine
// requests), the engine waits over those that also had the thread's
// witnesses (nWait requests).
type shardSums struct {
	n, nEngine, nWait                    int64
	upstream, upEngine, exec, wait, runq float64
}

// add adds rec, an interval's verdict of the shard, to the sums.
func (s *shardSums) add(rec *verdictRecord) {
	n := rec.Interval.Requests
	if n <= 0 {
		return
	}
	s.n += n
	s.upstream += rec.Interval.Upstream.Seconds()
	v := rec.Verdict
	if !v.EngineKnown {
		return
	}
	r := float64(n)
	s.nEngine += n
	s.upEngine += rec.Interval.Upstream.Seconds()
	s.exec += v.Exec.Seconds() * r
	if v.WaitKnown {
		s.nWait += n
		s.wait += v.EngineWait.Seconds() * r
		s.runq += v.RunQueueWait.Seconds() * r
	}
}

// minProbeWindow is the fewest PINGs whose median may set the probe's
// unloaded baseline or an interval's probe wait.
const minProbeWindow = 5

// run computes a verdict every a.interval until ctx is done.
func (a *analyzer) run(ctx context.Context) {
	tick := time.NewTicker(a.interval)
	defer tick.Stop()
	prev, start := a.set.Sums(), time.Now() // counts and sums only: no histogram copies
	prevArea := a.area()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		a.syncShards()
		now := time.Now()
		cur := a.set.Sums()
		area := a.area()
		iv := split.FromSnapshots(prev, cur)
		iv.Length = now.Sub(start)
		if p := a.eng.pollerOf(); p != nil {
			iv.EngineMean = engineMean(prev, cur, func(cmd string, n int64) (time.Duration, int64, bool) {
				mean, _, ok := p.EngineMean(cmd)
				return mean, n, ok
			})
		}
		if a.inFlightArea != nil && iv.Length > 0 {
			iv.InFlight = float64(area-prevArea) / float64(iv.Length)
		}
		if a.eng != nil {
			a.addWitnesses(a.eng, &iv, prev, cur)
		}
		a.mu.Lock()
		lagSum, lagN := a.lagSum, a.lagN
		a.lagSum, a.lagN = 0, 0
		a.mu.Unlock()
		if lagN > 0 {
			iv.LoopWait, iv.LoopWaitKnown = lagSum/time.Duration(lagN), true
		}
		if mean, ok := a.shardVerdicts(now, prev, cur, iv); ok {
			iv.EngineMean = mean
		}
		rec := &verdictRecord{End: now, Interval: iv, Verdict: iv.Verdict()}
		a.account(prev, cur, iv, rec.Verdict)
		a.log.Debug("verdict", "interval", iv.Length, "requests", iv.Requests, "in_flight", iv.InFlight,
			"engine_mean", iv.EngineMean, "verdict", rec.Verdict.String())
		a.mu.Lock()
		a.last = rec
		if iv.Requests > 0 {
			a.busy = rec
		}
		a.mu.Unlock()
		prev, start, prevArea = cur, now, area
	}
}

// loopLagSamples is how many timing tasks sampleLoops hands each loop per
// verdict interval, and loopLagMin the shortest period between two: with
// the default 1 s interval, one every 50 ms. Each sample wakes a thread and
// every loop; on a 2-core VM one every 10 ms cost 7 % of a core with no
// traffic and 1.1-1.2x the proxy's CPU per operation under memtier at
// pipeline 16 (BENCHMARKS.md "Issue 12"), for a mean that 20 samples per
// loop and interval already give.
const (
	loopLagSamples = 20
	loopLagMin     = 10 * time.Millisecond
)

// loopLagPeriod returns the time between two loop-timing samples for a
// verdict interval: interval/loopLagSamples, at least loopLagMin.
func loopLagPeriod(interval time.Duration) time.Duration {
	return max(interval/loopLagSamples, loopLagMin)
}

// sampleLoops hands the proxy's loops a timing task every
// loopLagPeriod(a.interval) until ctx is done; each task adds its wait to the interval's loop-wait
// sums. The times must not depend on the proxy's activity: a Go timer
// fires at the process's next wake-up, which a request or a reply causes,
// when the loop is busy with it, and would find the loops busier than they
// are. So the sampler sleeps in clock_nanosleep(CLOCK_MONOTONIC) on a
// thread of its own, which the kernel wakes on time whatever the proxy
// does (its cost: one thread woken 20 times a second at the default
// interval, and a task per loop each time).
func (a *analyzer) sampleLoops(ctx context.Context) {
	if a.loopLag == nil {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	record := func(d time.Duration) {
		a.mu.Lock()
		a.lagSum += d
		a.lagN++
		a.allLagSum += d
		a.allLagN++
		a.mu.Unlock()
	}
	ts := unix.NsecToTimespec(int64(loopLagPeriod(a.interval)))
	for ctx.Err() == nil {
		if err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, 0, &ts, nil); err != nil && err != unix.EINTR {
			return // unreachable on Linux: the arguments are valid
		}
		a.loopLag(record)
	}
}

// syncShards starts a view (newView) for each shard the proxy routes to
// that has none yet: at start the --shards or the --cluster map's masters,
// later the masters a topology refresh brings. A view whose metrics cannot
// be registered is logged once and kept without probe and poller. Views of
// shards that left the map keep running (their probe then counts errors
// if the engine is gone). Without routing it does nothing.
func (a *analyzer) syncShards() {
	if a.shardAddrs == nil || a.newView == nil {
		return
	}
	for _, addr := range a.shardAddrs() {
		if a.shardView(addr) != nil {
			continue
		}
		v, err := a.newView(addr)
		if err != nil {
			// Its metrics are taken (cannot happen: one view per
			// address): keep a view without probe and poller, so that
			// the error is logged once.
			a.log.Warn("no engine probe and poll for this shard", "shard", addr, "err", err)
			v = &engineView{addr: addr}
		}
		a.mu.Lock()
		a.shards = append(a.shards, v)
		a.mu.Unlock()
	}
}

// shardView returns the view of the shard at addr, nil when there is none.
func (a *analyzer) shardView(addr string) *engineView {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, v := range a.shards {
		if v.addr == addr {
			return v
		}
	}
	return nil
}

// shardViews returns the per-shard views (nil without routing), in a
// slice the caller may keep: the views themselves are shared.
func (a *analyzer) shardViews() []*engineView {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.shards[:len(a.shards):len(a.shards)]
}

// shardVerdicts computes, under routing, each shard's verdict of the
// interval between the snapshots prev and cur (all holds the interval's
// overall sums): the shard's requests and upstream (split.FromShard), the clients' think
// time shared out by the shard's part of the requests, the proxy's loop
// wait (taken from a shard's path only up to the least room any shard's
// path has above its floor: split.Interval.LoopPathCap), the engine's mean execution of the commands the clients sent
// weighted by its own calls of each (shardEngineMean: that shard's mix)
// and the shard's witnesses and probe (addWitnesses). It returns the
// request-weighted mean of the shards' execution for the overall verdict;
// ok is false without routing or when a shard with requests had no
// execution figures (the overall path then holds all of upstream, as
// without a poller).
func (a *analyzer) shardVerdicts(now time.Time, prev, cur *metrics.Snapshot, all split.Interval) (mean time.Duration, ok bool) {
	views := a.shardViews()
	if len(views) == 0 {
		return 0, false
	}
	var weighted float64
	var requests int64
	ok = true
	ivs := make([]split.Interval, len(views))
	// The loop wait a reply waits unread is the same whichever shard sent
	// it (the same loops read them all): it comes out of each shard's
	// path only up to the least any shard with requests has above its
	// floor, so that a shard's own delay stays in its path.
	var room time.Duration
	capped := false
	for i, v := range views {
		iv := split.FromShard(prev, cur, v.addr)
		iv.Length = all.Length
		if all.Requests > 0 && iv.Requests > 0 {
			iv.Think = time.Duration(float64(all.Think) * float64(iv.Requests) / float64(all.Requests))
		}
		if v.poller != nil {
			iv.EngineMean = shardEngineMean(prev, cur, v.poller)
		}
		a.addWitnesses(v, &iv, prev, cur)
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
		rec := &verdictRecord{End: now, Interval: iv, Verdict: iv.Verdict()}
		a.mu.Lock()
		v.last = rec
		if iv.Requests > 0 {
			v.busy = rec
			v.sums.add(rec)
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

// area returns inFlightArea(), 0 when it is nil.
func (a *analyzer) area() int64 {
	if a.inFlightArea == nil {
		return 0
	}
	return a.inFlightArea()
}

// addWitnesses fills in iv the engine thread's witnesses (the sum of the
// polls that ended within the interval, else the latest poll's; only from
// an engine that reports its command thread's CPU), the probe's wait (this interval's median PING round
// trip minus the unloaded baseline) and the network floor: the smaller of
// the upstream sockets' mean TCP_INFO RTT between prev and cur and the
// probe's unloaded baseline. The baseline is the lowest median of an
// interval without requests (and with at least minProbeWindow PINGs); until
// there is one, neither the probe wait nor the floor is known: the kernel's
// RTT alone is no floor, since a delayed ACK rides on the engine's reply
// and so holds the engine's time (measured: ~20 ms on loopback for a
// saturated engine answering in 20 ms).
func (a *analyzer) addWitnesses(v *engineView, iv *split.Interval, prev, cur *metrics.Snapshot) {
	if v.poller != nil {
		// The one-thread model holds where the engine reports its command
		// thread's CPU (Redis 7, Valkey); Dragonfly's INFO has the
		// process's only, spread over a thread per core.
		w, ok := v.poller.Witness()
		// The polls that ended within this interval, when there were any:
		// the witnesses then cover (about) the interval itself.
		if tot, tok := v.poller.WitnessTotal(); tok {
			if d := tot.Since(v.witPrev); v.witPrevOK && d.Interval > 0 && d.Commands > 0 {
				w = d
			}
			v.witPrev, v.witPrevOK = tot, true
		}
		if ok && w.Commands > 0 && w.Interval > 0 && w.HasMainCPU {
			iv.Utilization, iv.Demand, iv.BusyKnown = w.Utilization(), w.Demand(), true
			iv.Commands, iv.ExecTime, iv.CPUTime = w.Commands, w.Exec, w.ThreadCPU()
			if w.HasHost {
				iv.RunQueueTime, iv.HostKnown = w.RunQueue, true
			}
		}
	}
	if v.probe == nil {
		return
	}
	p50, count := v.probe.Window()
	a.mu.Lock()
	defer a.mu.Unlock()
	if count >= minProbeWindow && iv.Requests == 0 && (v.probeBase == 0 || p50 < v.probeBase) {
		v.probeBase = p50
	}
	if v.probeBase == 0 {
		return
	}
	if count >= minProbeWindow {
		iv.ProbeWait, iv.ProbeKnown = max(p50-v.probeBase, 0), true
	}
	iv.RTTFloor = v.probeBase
	if n := cur.UpstreamRTT.N - prev.UpstreamRTT.N; n > 0 {
		iv.RTTFloor = min(iv.RTTFloor, (cur.UpstreamRTT.Sum-prev.UpstreamRTT.Sum)/time.Duration(n))
	}
}

// account adds the interval's engine wait to the per-command sums since
// start, weighted by each command's requests in the interval.
func (a *analyzer) account(prev, cur *metrics.Snapshot, iv split.Interval, v split.Verdict) {
	if !v.WaitKnown || iv.Requests <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wait == nil {
		a.wait, a.runq, a.waitN = map[string]float64{}, map[string]float64{}, map[string]int64{}
	}
	for i := range cur.Commands {
		n := cur.Commands[i].Phases[metrics.PhaseTotal].Count()
		if i < len(prev.Commands) {
			n -= prev.Commands[i].Phases[metrics.PhaseTotal].Count()
		}
		if n <= 0 {
			continue
		}
		name := cur.Commands[i].Name
		a.wait[name] += v.EngineWait.Seconds() * float64(n)
		a.runq[name] += v.RunQueueWait.Seconds() * float64(n)
		a.waitN[name] += n
	}
	r := float64(iv.Requests)
	a.wUtil += iv.Utilization * r
	a.wDemand += iv.Demand.Seconds() * r
	a.wRunQ += v.RunQueueWait.Seconds() * r
	if up := iv.Upstream.Seconds() / r; iv.EngineMean > 0 {
		a.wPreempt += max(min(iv.EngineMean.Seconds(), up)-v.Exec.Seconds(), 0) * r
	}
	a.wN += r
	a.wHost = a.wHost || iv.HostKnown
}

// waitMean returns the mean engine wait and run-queue wait of command
// label cmd since start; ok is false when no interval had witnesses.
func (a *analyzer) waitMean(cmd string) (wait, runq time.Duration, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.waitN[cmd]
	if n <= 0 {
		return 0, 0, false
	}
	return time.Duration(a.wait[cmd] / float64(n) * 1e9), time.Duration(a.runq[cmd] / float64(n) * 1e9), true
}

// engineMean returns the engine's mean execution time per request over the
// commands timed between the snapshots prev (nil: since start) and cur:
// meanOf(cmd, n) gives the engine's mean of command label cmd, timed n
// times in between, and the weight it counts with (n itself: the proxy's
// mix of commands; or the engine's own calls, shardEngineMean). Commands
// left out of the totals (blocking, pub/sub) and commands the engine said
// nothing about do not count. 0 when the engine knows none of the
// commands.
func engineMean(prev, cur *metrics.Snapshot, meanOf func(cmd string, n int64) (mean time.Duration, weight int64, ok bool)) time.Duration {
	var weighted float64
	var requests int64
	for i := range cur.Commands {
		if i < len(cur.Excluded) && cur.Excluded[i] {
			continue
		}
		n := cur.Commands[i].Phases[metrics.PhaseTotal].Count()
		if prev != nil && i < len(prev.Commands) {
			n -= prev.Commands[i].Phases[metrics.PhaseTotal].Count()
		}
		if n <= 0 {
			continue
		}
		mean, w, ok := meanOf(cur.Commands[i].Name, n)
		if !ok || w <= 0 {
			continue
		}
		weighted += float64(mean) * float64(w)
		requests += w
	}
	if requests == 0 {
		return 0
	}
	return time.Duration(weighted / float64(requests))
}

// shardEngineMean is engineMean for one shard of several: over the
// commands the clients sent between prev and cur (to any shard), the
// engine's means over its last poll interval, weighted by its own calls of
// each (engstats.Poller.EngineMean), so that the mean is of that shard's
// mix — the proxy's counts are not kept per shard and command. The calls
// are the engine's, from all of its clients.
func shardEngineMean(prev, cur *metrics.Snapshot, p *engstats.Poller) time.Duration {
	return engineMean(prev, cur, func(cmd string, _ int64) (time.Duration, int64, bool) {
		return p.EngineMean(cmd)
	})
}

// latest returns the verdict of the latest interval, nil before the first.
func (a *analyzer) latest() *verdictRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// latestVerdict returns the verdict of the latest interval; ok is false
// before the first.
func (a *analyzer) latestVerdict() (split.Verdict, bool) {
	if rec := a.latest(); rec != nil {
		return rec.Verdict, true
	}
	return split.Verdict{}, false
}

// engineMeans returns the engine's mean execution time per command label
// since the Poller's first poll (INFO commandstats); under routing the
// shards' pollers' figures together (their time over their calls); empty
// when the Pollers are off or have not polled twice.
func (a *analyzer) engineMeans() map[string]time.Duration {
	type sum struct {
		calls int64
		time  time.Duration
	}
	sums := map[string]sum{}
	for _, v := range append([]*engineView{a.eng}, a.shardViews()...) {
		if v.pollerOf() == nil {
			continue
		}
		for _, c := range v.poller.Stats().Commands {
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

// sinceStart returns the verdict over everything since start, from the
// snapshot sn: engine means since the Poller's first poll, the mean in
// flight since start. It matches the cumulative tables printed with it.
func (a *analyzer) sinceStart(sn *metrics.Snapshot, means map[string]time.Duration) split.Verdict {
	return a.sinceStartRecord(sn, means).Verdict
}

// sinceStartRecord is sinceStart with the interval it covers (since
// start, ending now).
func (a *analyzer) sinceStartRecord(sn *metrics.Snapshot, means map[string]time.Duration) verdictRecord {
	iv := split.FromSnapshots(nil, sn)
	iv.Length = time.Since(a.started)
	iv.EngineMean = engineMean(nil, sn, func(cmd string, n int64) (time.Duration, int64, bool) {
		m, ok := means[cmd]
		return m, n, ok
	})
	if a.inFlightArea != nil && iv.Length > 0 {
		// The proxy's area counts from its start, after a.started, and
		// nothing was in flight before it.
		iv.InFlight = float64(a.inFlightArea()) / float64(iv.Length)
	}
	a.mu.Lock()
	if a.allLagN > 0 {
		iv.LoopWait, iv.LoopWaitKnown = a.allLagSum/time.Duration(a.allLagN), true
	}
	// The witnesses since start: their request-weighted means over the
	// intervals that had them.
	if a.wN > 0 {
		iv.Utilization = a.wUtil / a.wN
		iv.Demand = time.Duration(a.wDemand / a.wN * 1e9)
		iv.RunQueueWait, iv.HostKnown = time.Duration(a.wRunQ/a.wN*1e9), a.wHost
		if iv.EngineMean > 0 {
			iv.EngineMean = max(iv.EngineMean-time.Duration(a.wPreempt/a.wN*1e9), time.Nanosecond)
		}
		iv.BusyKnown = true
		if a.eng != nil {
			iv.RTTFloor = a.eng.probeBase
		}
	}
	a.mu.Unlock()
	return verdictRecord{End: time.Now(), Interval: iv, Verdict: iv.Verdict()}
}

// sharesJSON are a verdict's shares of the request cycle, 0..1.
type sharesJSON struct {
	Client float64 `json:"client"`
	Path   float64 `json:"path"`
	Engine float64 `json:"engine"`
	// EngineWait holds RunQueue.
	EngineWait float64 `json:"engine_wait"`
	RunQueue   float64 `json:"run_queue"`
	Proxy      float64 `json:"proxy"`
}

// verdictJSON is /stats "verdict": the latest interval's split.Verdict.
type verdictJSON struct {
	End             time.Time  `json:"end"`
	IntervalSeconds float64    `json:"interval_seconds"`
	Requests        int64      `json:"requests"`
	CycleSeconds    float64    `json:"cycle_seconds"`
	Shares          sharesJSON `json:"shares"`
	Bound           string     `json:"bound"`
	// EngineKnown is false when the poller gave no engine time; then the
	// path share holds all of upstream.
	EngineKnown       bool    `json:"engine_known"`
	EngineMeanSeconds float64 `json:"engine_mean_seconds"`
	// Little's law: L is the mean number of requests in flight (the area
	// under the count over the interval's length),
	// LambdaW throughput x mean latency; Little is false when L was not
	// sampled.
	Little  bool    `json:"little"`
	L       float64 `json:"l"`
	LambdaW float64 `json:"lambda_w"`
	// The engine thread's witnesses and the split of upstream, per request
	// (split.Verdict): WaitKnown is false without them (then path holds
	// the wait); HostKnown when the run-queue wait was read from /proc.
	WaitKnown           bool    `json:"wait_known"`
	HostKnown           bool    `json:"host_known"`
	Utilization         float64 `json:"engine_utilization"`
	DemandSeconds       float64 `json:"engine_demand_seconds"`
	EngineWaitSeconds   float64 `json:"engine_wait_seconds"`
	RunQueueWaitSeconds float64 `json:"run_queue_wait_seconds"`
	ModelWaitSeconds    float64 `json:"model_wait_seconds"`
	NetworkSeconds      float64 `json:"network_seconds"`
	RTTFloorSeconds     float64 `json:"rtt_floor_seconds"`
	ProbeKnown          bool    `json:"probe_known"`
	ProbeWaitSeconds    float64 `json:"probe_wait_seconds"`
	// The proxy's loop wait per request (split.Verdict.LoopWait, part of
	// the proxy share; LoopWaitKnown false when not measured) and the mean
	// wait of a task handed to a loop (split.Interval.LoopWait).
	LoopWaitKnown       bool    `json:"loop_wait_known"`
	LoopWaitSeconds     float64 `json:"loop_wait_seconds"`
	LoopTaskWaitSeconds float64 `json:"loop_task_wait_seconds"`
	String              string  `json:"string"`
	// Held is true when this is the latest interval with requests shown
	// in place of later idle ones (verdictDoc); LastRequestsAgeSeconds
	// the seconds since that interval ended, null before one had
	// requests.
	Held                   bool     `json:"held"`
	LastRequestsAgeSeconds *float64 `json:"last_requests_age_seconds"`
}

// verdictDoc returns the latest verdict for /stats, nil before the first
// interval. With a window (/stats?window=D, D > 0) the latest interval
// that had requests stands in for later idle ones until D has passed since
// it ended, as the window's own figures stay until then: a load that just
// stopped does not read "idle" at once. "last_requests_age_seconds" says
// how long ago that interval ended, whichever verdict is shown.
func (a *analyzer) verdictDoc(window time.Duration) *verdictJSON {
	a.mu.Lock()
	rec, busy := a.last, a.busy
	a.mu.Unlock()
	if rec == nil {
		return nil
	}
	now := time.Now()
	held := window > 0 && rec.Interval.Requests == 0 && busy != nil && now.Sub(busy.End) < window
	if held {
		rec = busy
	}
	doc := newVerdictJSON(rec)
	doc.Held = held
	if busy != nil {
		age := now.Sub(busy.End).Seconds()
		doc.LastRequestsAgeSeconds = &age
	}
	return doc
}

// newVerdictJSON returns rec as /stats shows a verdict.
func newVerdictJSON(rec *verdictRecord) *verdictJSON {
	v := rec.Verdict
	return &verdictJSON{
		End:             rec.End,
		IntervalSeconds: rec.Interval.Length.Seconds(),
		Requests:        rec.Interval.Requests,
		CycleSeconds:    v.Cycle.Seconds(),
		Shares: sharesJSON{Client: v.Client, Path: v.Path, Engine: v.Engine, EngineWait: v.Wait, RunQueue: v.RunQueue,
			Proxy: v.Proxy},
		Bound:               v.Bound,
		EngineKnown:         v.EngineKnown,
		EngineMeanSeconds:   rec.Interval.EngineMean.Seconds(),
		Little:              v.Little,
		L:                   v.L,
		LambdaW:             v.LambdaW,
		WaitKnown:           v.WaitKnown,
		HostKnown:           rec.Interval.HostKnown,
		Utilization:         v.Utilization,
		DemandSeconds:       rec.Interval.Demand.Seconds(),
		EngineWaitSeconds:   v.EngineWait.Seconds(),
		RunQueueWaitSeconds: v.RunQueueWait.Seconds(),
		ModelWaitSeconds:    v.ModelWait.Seconds(),
		NetworkSeconds:      v.Network.Seconds(),
		RTTFloorSeconds:     rec.Interval.RTTFloor.Seconds(),
		ProbeKnown:          v.ProbeKnown,
		ProbeWaitSeconds:    v.ProbeWait.Seconds(),
		LoopWaitKnown:       v.LoopWaitKnown,
		LoopWaitSeconds:     v.LoopWait.Seconds(),
		LoopTaskWaitSeconds: rec.Interval.LoopWait.Seconds(),
		String:              v.String(),
	}
}

// probeJSON is /stats "probe": the PING probe's round trips, in seconds.
type probeJSON struct {
	IntervalSeconds float64 `json:"interval_seconds"`
	Count           int64   `json:"count"`
	Mean            float64 `json:"mean"`
	P50             float64 `json:"p50"`
	P99             float64 `json:"p99"`
	Max             float64 `json:"max"`
	Errors          int64   `json:"errors"`
	LastError       string  `json:"last_error"`
}

// probeDoc returns the stats of v's probe for /stats, nil when it is off
// (or v is nil).
func (a *analyzer) probeDoc(v *engineView) *probeJSON {
	p := v.probeOf()
	if p == nil {
		return nil
	}
	s := p.Stats()
	return &probeJSON{
		IntervalSeconds: a.probeEvery.Seconds(),
		Count:           s.Count,
		Mean:            s.Mean.Seconds(),
		P50:             s.P50.Seconds(),
		P99:             s.P99.Seconds(),
		Max:             s.Max.Seconds(),
		Errors:          s.Errors,
		LastError:       s.LastErr,
	}
}

// engineTotalsJSON is the engine's work over all commands (INFO
// commandstats): since the first poll and over the last poll interval.
type engineTotalsJSON struct {
	Calls       int64   `json:"calls"`
	Seconds     float64 `json:"seconds"`
	LastCalls   int64   `json:"last_calls"`
	LastSeconds float64 `json:"last_seconds"`
}

// engineCommandJSON is the engine's view of one command label, in seconds;
// see engstats.CommandStats.
type engineCommandJSON struct {
	Calls     int64   `json:"calls"`
	Seconds   float64 `json:"seconds"`
	Mean      float64 `json:"mean"`
	LastCalls int64   `json:"last_calls"`
	LastMean  float64 `json:"last_mean"`
	P50       float64 `json:"p50"`
	P99       float64 `json:"p99"`
	PctSource string  `json:"pct_source,omitempty"`
}

// engineJSON is /stats "engine": the Poller's summary.
type engineJSON struct {
	IntervalSeconds     float64                      `json:"interval_seconds"`
	Sources             []string                     `json:"sources"`
	LastPoll            *time.Time                   `json:"last_poll"`
	LastIntervalSeconds float64                      `json:"last_interval_seconds"`
	Polls               int64                        `json:"polls"`
	Errors              int64                        `json:"errors"`
	LastError           string                       `json:"last_error"`
	Totals              engineTotalsJSON             `json:"totals"`
	Commands            map[string]engineCommandJSON `json:"commands"`
}

// engineDoc returns the stats of v's Poller for /stats, nil when it is
// off (or v is nil).
func (a *analyzer) engineDoc(v *engineView) *engineJSON {
	p := v.pollerOf()
	if p == nil {
		return nil
	}
	s := p.Stats()
	t := p.Totals()
	doc := &engineJSON{
		IntervalSeconds:     a.pollEvery.Seconds(),
		Sources:             append([]string{}, s.Sources...),
		LastIntervalSeconds: s.LastInterval.Seconds(),
		Polls:               s.Polls,
		Errors:              s.Errors,
		LastError:           s.LastErr,
		Totals: engineTotalsJSON{
			Calls: t.Calls, Seconds: t.Time.Seconds(), LastCalls: t.LastCalls, LastSeconds: t.LastTime.Seconds(),
		},
		Commands: make(map[string]engineCommandJSON, len(s.Commands)),
	}
	if !s.LastPoll.IsZero() {
		lp := s.LastPoll
		doc.LastPoll = &lp
	}
	for _, c := range s.Commands {
		cj := engineCommandJSON{
			Calls: c.Calls, Seconds: c.Time.Seconds(), LastCalls: c.LastCalls, LastMean: c.LastMean.Seconds(),
			P50: c.P50.Seconds(), P99: c.P99.Seconds(), PctSource: c.PctSource,
		}
		if c.Calls > 0 {
			cj.Mean = (c.Time / time.Duration(c.Calls)).Seconds()
		}
		doc.Commands[c.Command] = cj
	}
	return doc
}

// shardEngineJSON is one entry of /stats "shard_engines": a shard's probe
// and poller, its verdict of the latest interval (null before the first)
// and the means since start of its split of upstream per request, in
// seconds (shardSums): upstream over the intervals with requests to it,
// the rest over those in which its engine's execution was known
// (engine_known_requests of the requests), wait and run queue null
// without the command thread's witnesses, path = upstream − engine − wait
// over the same intervals.
type shardEngineJSON struct {
	Shard               string       `json:"shard"`
	Probe               *probeJSON   `json:"probe"`
	Engine              *engineJSON  `json:"engine"`
	Verdict             *verdictJSON `json:"verdict"`
	Requests            int64        `json:"requests"`
	UpstreamSeconds     float64      `json:"upstream_seconds"`
	EngineKnownRequests int64        `json:"engine_known_requests"`
	EngineSeconds       *float64     `json:"engine_seconds"`
	WaitSeconds         *float64     `json:"wait_seconds"`
	RunQueueSeconds     *float64     `json:"run_queue_seconds"`
	PathSeconds         *float64     `json:"path_seconds"`
}

// shardMeans are one shard's means per request since start, from its
// shardSums: upstream over all of its requests; engine, wait, run queue
// and path over the engineKnown requests (wait and run queue only when
// waitKnown). Path is upstream − engine − wait over those.
type shardMeans struct {
	requests, engineKnown            int64
	upstream, exec, wait, runq, path time.Duration
	engineOK, waitOK                 bool
}

// means returns the shard's means since start; the caller holds
// analyzer.mu.
func (s *shardSums) means() shardMeans {
	m := shardMeans{requests: s.n, engineKnown: s.nEngine}
	d := func(x float64, n int64) time.Duration { return time.Duration(x / float64(n) * 1e9) }
	if s.n > 0 {
		m.upstream = d(s.upstream, s.n)
	}
	if s.nEngine > 0 {
		m.engineOK = true
		m.exec = d(s.exec, s.nEngine)
		m.wait, m.runq = d(s.wait, s.nEngine), d(s.runq, s.nEngine)
		m.waitOK = s.nWait > 0
		m.path = d(s.upEngine, s.nEngine) - m.exec - m.wait
	}
	return m
}

// shardDocs returns /stats "shard_engines": one entry per shard under
// routing, in the order of analyzer.shards; nil without routing.
func (a *analyzer) shardDocs() []shardEngineJSON {
	views := a.shardViews()
	if len(views) == 0 {
		return nil
	}
	docs := make([]shardEngineJSON, 0, len(views))
	for _, v := range views {
		a.mu.Lock()
		last, m := v.last, v.sums.means()
		a.mu.Unlock()
		doc := shardEngineJSON{
			Shard: v.addr, Probe: a.probeDoc(v), Engine: a.engineDoc(v),
			Requests: m.requests, UpstreamSeconds: m.upstream.Seconds(), EngineKnownRequests: m.engineKnown,
		}
		if last != nil {
			doc.Verdict = newVerdictJSON(last)
		}
		sec := func(d time.Duration) *float64 { x := d.Seconds(); return &x }
		if m.engineOK {
			doc.EngineSeconds, doc.PathSeconds = sec(m.exec), sec(m.path)
			if m.waitOK {
				doc.WaitSeconds, doc.RunQueueSeconds = sec(m.wait), sec(m.runq)
			}
		}
		docs = append(docs, doc)
	}
	return docs
}

// shardLatest returns the verdict of v's latest interval (a shard's); ok
// is false before the first.
func (a *analyzer) shardLatest(v *engineView) (split.Verdict, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v.last == nil {
		return split.Verdict{}, false
	}
	return v.last.Verdict, true
}

// statsExtra returns the keys the proxy adds to metrics' /stats document:
// "engine", "probe" and "verdict", each null when off or not yet known
// (under routing "engine" and "probe" are null: each shard has its own),
// and "shard_engines" (shardDocs), null without routing.
func (a *analyzer) statsExtra() map[string]any { return a.statsExtraWindow(0) }

// statsExtraWindow is statsExtra for /stats?window=D (0: no window); the
// verdict follows the window (verdictDoc).
func (a *analyzer) statsExtraWindow(window time.Duration) map[string]any {
	return map[string]any{
		"engine":        a.engineDoc(a.eng),
		"probe":         a.probeDoc(a.eng),
		"verdict":       a.verdictDoc(window),
		"shard_engines": a.shardDocs(),
	}
}

// writeVerdict writes, after the latency table, the "verdict:" line (since
// start, like the table), a line with the verdict of the latest interval
// that had requests, and the "where the time went" table: per command, the
// mean total, upstream, engine (the engine's own INFO commandstats; "-"
// when unknown), engine wait and its run-queue part (the intervals' waits,
// weighted by the command's requests in each; "-" without witnesses), path
// (upstream - engine - wait) and proxy times since start in milliseconds, then the probe's mean PING round trip and the mean think
// time.
func (a *analyzer) writeVerdict(w io.Writer) error {
	sn := a.set.Sums() // counts, sums and means only: no histogram copies
	engineMeans := a.engineMeans()
	var b strings.Builder
	fmt.Fprintf(&b, "\nverdict: %s\n", a.sinceStart(sn, engineMeans))
	a.mu.Lock()
	busy := a.busy
	a.mu.Unlock()
	if busy != nil {
		fmt.Fprintf(&b, "latest interval with requests %s\n", busyLine(busy))
	}
	views := a.shardViews()
	for _, v := range views {
		a.mu.Lock()
		busy := v.busy
		a.mu.Unlock()
		if busy != nil {
			fmt.Fprintf(&b, "shard %s, latest interval with requests to it %s\n", v.addr, busyLine(busy))
		}
	}

	nameWidth := len("Command")
	for i := range sn.Commands {
		if c := &sn.Commands[i]; c.Observed() {
			nameWidth = max(nameWidth, len(c.Name))
		}
	}
	const opsWidth, colWidth = 12, 14
	fmt.Fprintf(&b, "\nWhere the time went: means since start in ms; Timed = commands timed; engine = the engine's own\n")
	fmt.Fprintf(&b, "execution time (INFO commandstats, all of its clients); wait = engine wait (its command thread busy with\n")
	fmt.Fprintf(&b, "others, and waiting for a CPU: run queue); path = upstream - engine - wait (network, kernel).\n")
	cols := fmt.Sprintf("%-*s %*s", nameWidth, "Command", opsWidth, "Timed")
	for _, h := range []string{"total", "upstream", "engine", "wait", "run queue", "path", "proxy"} {
		cols += fmt.Sprintf(" %*s", colWidth, h+" (ms)")
	}
	b.WriteString(strings.Repeat("-", len(cols)) + "\n" + cols + "\n" + strings.Repeat("-", len(cols)) + "\n")
	ms := func(d time.Duration) string { return fmt.Sprintf(" %*.4f", colWidth, millis(d)) }
	dash := fmt.Sprintf(" %*s", colWidth, "-")
	type waits struct {
		wait, runq time.Duration
		known      bool
	}
	row := func(name string, c *metrics.CommandStats, eng time.Duration, engKnown bool, w waits) {
		fmt.Fprintf(&b, "%-*s %*d", nameWidth, name, opsWidth, c.Phases[metrics.PhaseTotal].Count())
		up := c.Phases[metrics.PhaseUpstream].Mean()
		b.WriteString(ms(c.Phases[metrics.PhaseTotal].Mean()) + ms(up))
		switch {
		case engKnown && w.known:
			b.WriteString(ms(eng) + ms(w.wait) + ms(w.runq) + ms(up-eng-w.wait))
		case engKnown:
			b.WriteString(ms(eng) + dash + dash + ms(up-eng))
		default:
			b.WriteString(dash + dash + dash + dash)
		}
		b.WriteString(ms(c.Phases[metrics.PhaseProxy].Mean()) + "\n")
	}
	// Totals' engine mean and waits are the per-command means weighted by
	// requests, and only when known for every command in the totals.
	var weighted, wWait, wRunq float64
	allKnown, allWait, rows := true, true, false
	for i := range sn.Commands {
		c := &sn.Commands[i]
		if !c.Observed() {
			continue
		}
		eng, ok := engineMeans[c.Name]
		var w waits
		w.wait, w.runq, w.known = a.waitMean(c.Name)
		row(c.Name, c, eng, ok, w)
		if i < len(sn.Excluded) && sn.Excluded[i] {
			continue
		}
		rows = true
		allKnown = allKnown && ok
		allWait = allWait && w.known
		n := float64(c.Phases[metrics.PhaseTotal].Count())
		weighted += float64(eng) * n
		wWait += float64(w.wait) * n
		wRunq += float64(w.runq) * n
	}
	if rows {
		t := sn.Totals()
		b.WriteString(strings.Repeat("-", len(cols)) + "\n")
		eng := time.Duration(0)
		var w waits
		if n := t.Phases[metrics.PhaseTotal].Count(); n > 0 {
			eng = time.Duration(weighted / float64(n))
			w = waits{time.Duration(wWait / float64(n)), time.Duration(wRunq / float64(n)), allWait}
		}
		row("Totals", &t, eng, allKnown, w)
	}
	b.WriteString(strings.Repeat("-", len(cols)) + "\n")

	switch {
	case len(views) > 0:
		a.writeShards(&b, views)
	case a.eng.probeOf() == nil:
		b.WriteString("probe: off (--probe-interval 0)\n")
	default:
		s := a.eng.probe.Stats()
		if s.Count == 0 {
			fmt.Fprintf(&b, "probe: no PING answered yet (%d errors", s.Errors)
			if s.LastErr != "" {
				fmt.Fprintf(&b, "; last: %s", s.LastErr)
			}
			b.WriteString(")\n")
		} else {
			fmt.Fprintf(&b, "probe: PING round trip mean %.3f ms, p99 %.3f ms over %d PINGs, %d errors\n",
				millis(s.Mean), millis(s.P99), s.Count, s.Errors)
		}
	}
	if n := sn.Think.Count(); n > 0 {
		fmt.Fprintf(&b, "think: mean %.3f ms over %d gaps between a reply and the next request\n", millis(sn.Think.Mean()), n)
	} else {
		b.WriteString("think: none recorded\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// busyLine formats the verdict of an interval with requests for the
// "latest interval with requests" lines: "(1s, 12 requests, ended 3ms
// ago): cycle …".
func busyLine(rec *verdictRecord) string {
	noun := "requests"
	if rec.Interval.Requests == 1 {
		noun = "request"
	}
	return fmt.Sprintf("(%v, %d %s, ended %v ago): %s",
		rec.Interval.Length.Round(time.Millisecond), rec.Interval.Requests, noun,
		time.Since(rec.End).Round(time.Millisecond), rec.Verdict)
}

// writeShards writes, under routing, the per-shard table of where the
// time went: per shard (views), the requests and sub-requests sent to it,
// the means since start of upstream, engine execution, engine wait and its
// run-queue part and path (shardMeans: engine, wait and path over the
// intervals in which the shard's engine was polled; "-" when never),
// the probe's mean PING to that shard and the bound of its latest interval
// with requests.
func (a *analyzer) writeShards(b *strings.Builder, views []*engineView) {
	width := len("Shard")
	for _, v := range views {
		width = max(width, len(v.addr))
	}
	const opsWidth, colWidth = 12, 14
	b.WriteString("\nPer shard: means since start in ms of the requests and fan-out sub-requests sent to each; engine =\n")
	b.WriteString("that engine's own execution of the commands the clients sent, weighted by its calls; wait = its\n")
	b.WriteString("engine wait (run queue: waiting for a CPU); path = upstream - engine - wait, over the intervals in which\n")
	b.WriteString("the engine was polled; probe = mean PING round trip to it; bound = its latest interval with requests.\n")
	cols := fmt.Sprintf("%-*s %*s", width, "Shard", opsWidth, "Requests")
	for _, h := range []string{"upstream", "engine", "wait", "run queue", "path", "probe"} {
		cols += fmt.Sprintf(" %*s", colWidth, h+" (ms)")
	}
	cols += "  bound"
	b.WriteString(strings.Repeat("-", len(cols)) + "\n" + cols + "\n" + strings.Repeat("-", len(cols)) + "\n")
	ms := func(d time.Duration) string { return fmt.Sprintf(" %*.4f", colWidth, millis(d)) }
	dash := fmt.Sprintf(" %*s", colWidth, "-")
	for _, v := range views {
		a.mu.Lock()
		m, busy := v.sums.means(), v.busy
		a.mu.Unlock()
		fmt.Fprintf(b, "%-*s %*d", width, v.addr, opsWidth, m.requests)
		b.WriteString(ms(m.upstream))
		switch {
		case m.engineOK && m.waitOK:
			b.WriteString(ms(m.exec) + ms(m.wait) + ms(m.runq) + ms(m.path))
		case m.engineOK:
			b.WriteString(ms(m.exec) + dash + dash + ms(m.path))
		default:
			b.WriteString(dash + dash + dash + dash)
		}
		if p := v.probeOf(); p != nil && p.Stats().Count > 0 {
			b.WriteString(ms(p.Stats().Mean))
		} else {
			b.WriteString(dash)
		}
		bound := "-"
		if busy != nil {
			bound = busy.Verdict.Bound
		}
		b.WriteString("  " + bound + "\n")
	}
	b.WriteString(strings.Repeat("-", len(cols)) + "\n")
}

// millis returns d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
