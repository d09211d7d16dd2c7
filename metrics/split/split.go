// Package split answers "where did the time go?" for an interval of traffic:
// it divides the average request cycle of closed-loop clients into the time
// spent in the client (think time), in the engine (execution, as the
// engine itself reports it), waiting in the engine's host (for its command
// thread, QueueWait, and for a CPU, the run-queue wait; from the thread's
// witnesses), on the path to the engine (what is left of upstream:
// network, kernel) and in the proxy, and checks Little's law
// (L = λW: requests in flight = throughput × mean latency) with both sides
// measured.
//
// It is pure arithmetic over sums and counts; the caller gathers them
// (metrics.Snapshot deltas, the engine poller, the in-flight area, the
// loops' timing tasks).
package split

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/respmeter/respmeter/metrics"
)

// Interval holds what was measured over one interval. Durations are sums
// over the interval's requests unless named otherwise.
type Interval struct {
	// Length is the interval's wall-clock length.
	Length time.Duration
	// Requests is the number of timed requests (blocking and pub/sub
	// commands excluded, as in metrics.Snapshot.Totals).
	Requests int64
	// Total, Upstream and Proxy are sums of the per-request phases.
	Total, Upstream, Proxy time.Duration
	// Think is the sum of the ThinkCount think times (reply out to next
	// request in, on connections with nothing pending).
	Think      time.Duration
	ThinkCount int64
	// EngineMean is the engine's own mean time per call over the interval
	// (INFO commandstats usec / calls deltas); 0 when unknown.
	EngineMean time.Duration
	// InFlight is the time-averaged number of requests in flight (sent by
	// clients, not yet answered); negative when not sampled.
	InFlight float64

	// Witnesses of the engine's command thread (metrics/engine.Witness),
	// over the engine poller's latest interval; all zero when unknown.
	// Utilization is the thread's busy share, 0..1; Demand its busy time
	// per engine command (execution, parsing and socket I/O); BusyKnown
	// reports that both were measured. Over the same poll interval:
	// Commands the engine ran (all clients), ExecTime their execution
	// (commandstats), CPUTime the thread's time on a CPU (0: unknown) and,
	// from /proc schedstat (HostKnown), RunQueueTime, its time runnable
	// but waiting for a CPU.
	Utilization                     float64
	Demand                          time.Duration
	BusyKnown                       bool
	Commands                        int64
	ExecTime, CPUTime, RunQueueTime time.Duration
	HostKnown                       bool
	// RunQueueWait, when HostKnown and Commands is 0, is the run-queue
	// wait per request as worked out already (a since-start verdict made
	// of intervals' verdicts).
	RunQueueWait time.Duration
	// RTTFloor is the least time the network takes per request: the
	// smaller of the upstream sockets' mean TCP_INFO RTT over the interval
	// and the probe's unloaded baseline; 0 when unknown.
	RTTFloor time.Duration
	// ProbeWait is the probe PING's median round trip over the interval
	// minus its unloaded baseline: the wait a request arriving at a random
	// moment found, measured rather than modelled (ProbeKnown).
	ProbeWait  time.Duration
	ProbeKnown bool
	// LoopWait is the mean time a task handed to one of the proxy's event
	// loops waited before the loop ran it (proxy.Proxy.LoopLag, sampled at
	// fixed times): the wait of a request or reply that arrives while the
	// loop is busy or its thread waits for a CPU, unread in its socket,
	// which the proxy's clock reads book as think time and path
	// (LoopWaitKnown).
	LoopWait      time.Duration
	LoopWaitKnown bool
	// LoopPathCap, when LoopPathCapped, bounds the loop wait taken from
	// the path: one shard's interval under routing, whose replies wait for
	// the same loops as every other shard's, so no longer than the path of
	// the shard with the least (above its floor) holds.
	LoopPathCap    time.Duration
	LoopPathCapped bool
}

// QueueWait is the engine-wait model: the mean time a request waits for
// the engine's single command thread before it is served, from the
// thread's measured utilisation u (0..1), its service demand d per command
// and the mean number of the proxy's requests in the upstream phase
// inFlight (Little's law on the upstream phase: sum of upstream times /
// interval length).
//
// Model: M/M/1 (Kleinrock, Queueing Systems vol. 1, §3.2): wait = d·u/(1−u).
// The engine's witnesses give a utilisation and a mean demand, not the
// queue itself, and M/M/1 is the one-server model that needs nothing else;
// its exponential service is the middle ground between deterministic work
// (M/D/1: half the wait) and heavy-tailed work (more). Its open-system
// assumption fails for a few closed-loop clients, whose requests cannot
// queue behind requests that do not exist, so the wait is capped at the
// closed-system bound (inFlight − 1)·d: at most every other request in
// flight is ahead, each taking d. A saturated thread (u ≥ 1) gets the cap.
// Requests of clients that bypass the proxy are not in inFlight, so with
// such clients the cap is low.
func QueueWait(u float64, d time.Duration, inFlight float64) time.Duration {
	if u <= 0 || d <= 0 {
		return 0
	}
	bound := max(inFlight-1, 0) * float64(d)
	w := bound
	if u < 1 {
		w = min(float64(d)*u/(1-u), bound)
	}
	return time.Duration(w)
}

// FromSnapshots returns the request sums between two cumulative snapshots of
// the same Set (prev may be nil: since start). Length, EngineMean and
// InFlight are left for the caller.
func FromSnapshots(prev, cur *metrics.Snapshot) Interval {
	c := cur.Totals()
	iv := Interval{
		Requests:   c.Phases[metrics.PhaseTotal].Count(),
		Total:      c.Phases[metrics.PhaseTotal].Sum,
		Upstream:   c.Phases[metrics.PhaseUpstream].Sum,
		Proxy:      c.Phases[metrics.PhaseProxy].Sum,
		Think:      cur.Think.Sum,
		ThinkCount: cur.Think.Count(),
		InFlight:   -1,
	}
	if prev != nil {
		p := prev.Totals()
		iv.Requests -= p.Phases[metrics.PhaseTotal].Count()
		iv.Total -= p.Phases[metrics.PhaseTotal].Sum
		iv.Upstream -= p.Phases[metrics.PhaseUpstream].Sum
		iv.Proxy -= p.Phases[metrics.PhaseProxy].Sum
		iv.Think -= prev.Think.Sum
		iv.ThinkCount -= prev.Think.Count()
	}
	return iv
}

// FromShard returns the request sums of the shard labelled name (its
// address, metrics.Set.Shard) between two cumulative snapshots of the same
// Set (prev may be nil: since start): Requests, Total, Upstream and Proxy
// of the commands and fan-out sub-requests sent to that shard, Upstream
// being each sub-request's own round trip to the shard and Total its
// command's (so Proxy = Total − Upstream). The shard stats have no
// per-command split, so blocking and pub/sub commands, left out of
// FromSnapshots' totals, are counted here. Think, Length, EngineMean and
// the witnesses are left for the caller; InFlight is −1 (not sampled per
// shard). A shard the snapshots do not hold gives an empty Interval.
func FromShard(prev, cur *metrics.Snapshot, name string) Interval {
	iv := Interval{InFlight: -1}
	c := shardStats(cur, name)
	if c == nil {
		return iv
	}
	iv.Requests = c.Phases[metrics.PhaseTotal].Count()
	iv.Total = c.Phases[metrics.PhaseTotal].Sum
	iv.Upstream = c.Phases[metrics.PhaseUpstream].Sum
	iv.Proxy = c.Phases[metrics.PhaseProxy].Sum
	if p := shardStats(prev, name); p != nil {
		iv.Requests -= p.Phases[metrics.PhaseTotal].Count()
		iv.Total -= p.Phases[metrics.PhaseTotal].Sum
		iv.Upstream -= p.Phases[metrics.PhaseUpstream].Sum
		iv.Proxy -= p.Phases[metrics.PhaseProxy].Sum
	}
	return iv
}

// shardStats returns the stats of the shard labelled name in sn, nil when
// sn is nil or lacks it.
func shardStats(sn *metrics.Snapshot, name string) *metrics.ShardStats {
	if sn == nil {
		return nil
	}
	for i := range sn.Shards {
		if sn.Shards[i].Name == name {
			return &sn.Shards[i]
		}
	}
	return nil
}

// Verdict is the split of the mean request cycle.
type Verdict struct {
	// Cycle is the mean time from one request of a closed-loop client to
	// its next: (think + total) / requests.
	Cycle time.Duration
	// Shares of the cycle, 0..1, summing to 1: Client (think), Path
	// (the network: upstream − engine execution − engine wait), Engine
	// (execution), Wait (engine wait, run-queue wait included), Proxy.
	// RunQueue is the run-queue part of Wait, Loop the loop-wait part of
	// Proxy.
	Client, Path, Engine, Wait, Proxy float64
	RunQueue, Loop                    float64
	// EngineKnown is false when the engine reported nothing: then Path
	// holds all of upstream.
	EngineKnown bool
	// WaitKnown reports that the engine thread's witnesses were measured
	// (Interval.BusyKnown); without them Wait is 0 and Path holds it.
	WaitKnown bool
	// Per request means: Exec (engine execution), EngineWait (queue plus
	// run queue), RunQueueWait, Network (Path), the model's wait before
	// the upstream cap (ModelWait) and the proxy's loop wait (LoopWait:
	// up to Interval.LoopWait taken from the think time, as the request
	// waited unread, and up to as much from the path, as the reply did).
	Exec, EngineWait, RunQueueWait, Network, ModelWait time.Duration
	LoopWait                                           time.Duration
	// LoopWaitKnown: Interval's.
	LoopWaitKnown bool
	// Utilization is the engine thread's busy share (Interval).
	Utilization float64
	// ProbeWait, ProbeKnown: Interval's, for the cross-check.
	ProbeWait  time.Duration
	ProbeKnown bool
	// Bound names the largest part: "client-bound", "path-bound", when the
	// proxy's part (its processing and loop wait) is the largest
	// "proxy-saturated" (the loop wait is at least the processing: its
	// loops are never idle, or wait for a CPU) or "proxy-bound", or, when
	// the engine's parts together are the largest,
	// "engine-starved" (its run-queue wait is the largest of them: the
	// host is short of CPU), "engine-saturated" (its queueing wait is at
	// least its execution, or its thread is ≥ 90 % busy with at least two
	// requests in flight) or "engine-bound" (execution itself); "idle" with
	// no requests.
	Bound string
	// Little's law: L is the measured mean in flight, LambdaW the product
	// of measured throughput and mean latency; Little is false when L was
	// not sampled.
	L, LambdaW float64
	Little     bool
}

// SaturatedUtilization is the command thread's busy share from which a
// queue is taken to form whenever two or more requests are in flight.
const SaturatedUtilization = 0.9

// Verdict computes the split. Engine time per request is capped at the
// upstream time (the engine cannot take longer than the round trip that
// contains it). Engine wait is QueueWait, with a proxied request's share of
// the thread's busy time as the demand (at least Demand and EngineMean),
// plus the run-queue time shared out over the engine's commands by the
// same weights, capped so that the network keeps at least RTTFloor.
func (iv Interval) Verdict() Verdict {
	v := Verdict{Bound: "idle"}
	if iv.Requests <= 0 {
		return v
	}
	n := float64(iv.Requests)
	upstream := iv.Upstream.Seconds() / n
	engine := 0.0
	if iv.EngineMean > 0 {
		v.EngineKnown = true
		engine = min(iv.EngineMean.Seconds(), upstream)
	}
	var wait, runq, upInFlight float64
	if iv.Length > 0 {
		upInFlight = iv.Upstream.Seconds() / iv.Length.Seconds()
	}
	if iv.BusyKnown {
		v.WaitKnown = true
		v.Utilization = iv.Utilization
		// The thread's occupied time is shared out over the engine's
		// commands by the time each keeps it: its execution plus the
		// per-command work outside execution (io: socket I/O, from the
		// CPU beyond execution). share is a proxied request's part, so
		// that cheap commands of other clients (the probe's PINGs) do not
		// dilute the demand or run-queue wait of long ones; without
		// execution figures every command counts alike.
		share := 0.0
		if n := float64(iv.Commands); n > 0 {
			exec, cpu := iv.ExecTime.Seconds(), iv.CPUTime.Seconds()
			io := max(cpu-exec, 0) / n
			share = 1 / n
			if occupied := exec + n*io; occupied > 0 && engine > 0 {
				share = (engine + io) / occupied
			}
		}
		// The requests ahead are the proxy's own (inFlight counts them),
		// each taking a proxied request's share of the thread's busy time,
		// and at least the engine's execution of it.
		d := max(iv.Demand, iv.EngineMean)
		if share > 0 {
			d = max(d, seconds(iv.Demand.Seconds()*float64(iv.Commands)*share))
		}
		q := QueueWait(iv.Utilization, d, upInFlight).Seconds()
		if iv.HostKnown && iv.Commands > 0 {
			// A thread woken per command waits for the CPU once per
			// command, a command preempted while it runs in proportion
			// to its length: the run-queue time is shared out alike.
			runq = iv.RunQueueTime.Seconds() * share
			// A command preempted while it runs has that wait in its
			// execution time too (commandstats is wall-clock): the
			// run-queue share of the thread's occupied time is taken out
			// of execution, up to the run-queue wait.
			if rq, cpu := iv.RunQueueTime.Seconds(), iv.CPUTime.Seconds(); rq+cpu > 0 {
				engine -= min(runq, engine*rq/(rq+cpu))
			}
		} else if iv.HostKnown {
			runq = iv.RunQueueWait.Seconds()
		}
		v.ModelWait = seconds(q + runq)
		room := max(upstream-engine-iv.RTTFloor.Seconds(), 0)
		if total := q + runq; total > room {
			q, runq = q*room/total, runq*room/total
		}
		wait = q + runq
	}
	// The loop wait: a request read late waited in its client socket
	// (booked as think time), a reply read late in the upstream socket
	// (booked as upstream, so path); each up to what holds it, the path
	// keeping its floor.
	think, path := iv.Think.Seconds()/n, upstream-engine-wait
	var loopWait float64
	if iv.LoopWaitKnown {
		v.LoopWaitKnown = true
		lw := iv.LoopWait.Seconds()
		lt, lp := min(lw, max(think, 0)), min(lw, max(path-iv.RTTFloor.Seconds(), 0))
		if iv.LoopPathCapped {
			lp = min(lp, max(iv.LoopPathCap.Seconds(), 0))
		}
		think, path, loopWait = think-lt, path-lp, lt+lp
	}
	parts := [5]float64{
		think,                           // client
		path,                            // path (network)
		engine,                          // engine execution
		wait,                            // engine wait
		iv.Proxy.Seconds()/n + loopWait, // proxy, its loop wait included
	}
	var cycle float64
	for _, p := range parts {
		cycle += max(p, 0)
	}
	if cycle <= 0 {
		return v
	}
	v.Cycle = seconds(cycle)
	v.Client, v.Path, v.Engine, v.Wait, v.Proxy = parts[0]/cycle, parts[1]/cycle, parts[2]/cycle, parts[3]/cycle, parts[4]/cycle
	v.RunQueue, v.Loop = runq/cycle, loopWait/cycle
	v.Exec, v.EngineWait, v.RunQueueWait, v.Network = seconds(engine), seconds(wait), seconds(runq), seconds(parts[1])
	v.LoopWait = seconds(loopWait)
	v.ProbeWait, v.ProbeKnown = iv.ProbeWait, iv.ProbeKnown

	groups := [4]float64{parts[0], parts[1], engine + wait, parts[4]}
	names := [4]string{"client-bound", "path-bound", "engine", "proxy-bound"}
	best := 0
	for i, p := range groups {
		if p > groups[best] {
			best = i
		}
	}
	v.Bound = names[best]
	if v.Bound == "proxy-bound" && loopWait > 0 && loopWait >= parts[4]-loopWait {
		v.Bound = "proxy-saturated"
	}
	if v.Bound == "engine" {
		q := wait - runq
		switch {
		case runq > 0 && runq >= engine && runq >= q:
			v.Bound = "engine-starved"
		case v.WaitKnown && (q >= engine || iv.Utilization >= SaturatedUtilization && upInFlight >= 2):
			v.Bound = "engine-saturated"
		default:
			v.Bound = "engine-bound"
		}
	}
	if iv.InFlight >= 0 && iv.Length > 0 {
		v.Little = true
		v.L = iv.InFlight
		v.LambdaW = n / iv.Length.Seconds() * (iv.Total.Seconds() / n)
	}
	return v
}

// seconds converts s seconds to a Duration, rounded to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// String formats the verdict on one line, e.g.
// "cycle 412µs: client 61% | path 22% | engine 9% | proxy 8% — client-bound;
// Little: L 3.98 vs λW 4.02", with the engine thread's witnesses
// "cycle 20.1ms: client 0% | path 1% | engine 10% | engine wait 88% | proxy 1%
// — engine-saturated; engine thread 99% busy; Little: L 9.98 vs λW 10.01".
func (v Verdict) String() string {
	if v.Bound == "idle" {
		return "no requests in the interval"
	}
	var b strings.Builder
	eng := fmt.Sprintf("%.0f%%", 100*v.Engine)
	if !v.EngineKnown {
		eng = "n/a (no engine stats for these commands)"
	}
	if v.WaitKnown {
		eng += fmt.Sprintf(" | engine wait %.0f%%", 100*v.Wait)
		if v.RunQueue > 0 {
			eng += fmt.Sprintf(" (run queue %.0f%%)", 100*v.RunQueue)
		}
	}
	prx := fmt.Sprintf("%.0f%%", 100*v.Proxy)
	if v.LoopWaitKnown {
		prx += fmt.Sprintf(" (loop wait %.0f%%)", 100*v.Loop)
	}
	fmt.Fprintf(&b, "cycle %v: client %.0f%% | path %.0f%% | engine %s | proxy %s — %s",
		v.Cycle.Round(time.Microsecond), 100*v.Client, 100*v.Path, eng, prx, v.Bound)
	if v.WaitKnown {
		fmt.Fprintf(&b, "; engine thread %.0f%% busy", 100*v.Utilization)
	}
	if v.Little {
		fmt.Fprintf(&b, "; Little: L %.2f vs λW %.2f", v.L, v.LambdaW)
	}
	return b.String()
}
