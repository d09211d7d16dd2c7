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
	// Injected is the sum of the injected phase (metrics.PhaseInjected:
	// the delays fault injection rules added, respmeter proxy --inject):
	// part of Total, of no other phase, and its own part of the verdict,
	// never engine, path or proxy.
	Injected time.Duration
	// TLS is the sum of the tls phase (metrics.PhaseTLS: decrypting TLS
	// clients' requests and encrypting their replies), a part of Proxy.
	TLS time.Duration
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
	// EventLoopBusy is the share of the poll interval the engine's event
	// loop says it was busy (INFO stats eventloop_duration_sum, Redis >=
	// 7.2 and Valkey >= 8; EventLoopKnown): a witness of the thread's busy
	// time by the engine's own clock, which Utilization takes when it is
	// the largest and which bounds OthersBusy and CulpritBusy.
	EventLoopBusy  float64
	EventLoopKnown bool
	// RunQueueWait, when HostKnown and Commands is 0, is the run-queue
	// wait per request as worked out already (a since-start verdict made
	// of intervals' verdicts).
	RunQueueWait time.Duration
	// RTTFloor is the least time the network takes per request: the
	// smallest of the upstream sockets' mean TCP_INFO RTT over the
	// interval, the probe's unloaded baseline and the proxied requests'
	// own unloaded path (metrics/verdict's path base: their upstream less
	// the engine's execution and run-queue wait in an interval with the
	// engine's thread mostly idle); 0 when unknown.
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

	// Other clients' commands, from the engine's INFO commandstats over
	// the interval less the proxy's own requests of each command label
	// (metrics/verdict): OthersBusy is the share of the interval the
	// engine spent executing them, 0..1, and OthersResidual the mean
	// residual work of theirs a request arriving at a random moment finds
	// in execution (Σ calls × mean² / (2 × interval): a 2 ms command
	// leaves 1 ms on average, a 1 µs one nothing). Culprit is the label
	// of the other clients' command that leaves the most of that residual,
	// CulpritBusy its share of the interval and CulpritMean its mean
	// execution; CulpritSent is the share of those calls that came
	// through respmeter (0..1: another of its clients' DEBUG loop is
	// 1, a loop sent to the engine directly 0). All zero when unknown.
	OthersBusy     float64
	OthersResidual time.Duration
	Culprit        string
	CulpritBusy    float64
	CulpritMean    time.Duration
	CulpritSent    float64
	// Classes, when known, are the interval's requests per command label
	// with the residual work of every other command each one finds, so
	// that a GET queued behind 2 ms commands (another client's, proxied
	// or not) waits for them and the 2 ms commands themselves wait behind
	// next to nothing; the requests of labels not in Classes take the
	// interval-wide OthersResidual.
	Classes []Class

	// The proxy's own threads over the interval (/proc/self/task/*/
	// schedstat; ProxyHostKnown): ProxyCPU their time on a CPU,
	// ProxyRunQueue their time runnable but waiting for one.
	ProxyCPU, ProxyRunQueue time.Duration
	ProxyHostKnown          bool
}

// Class is one command label's requests over an interval (Interval.Classes).
type Class struct {
	// Name is the command label, Requests its timed requests and
	// Upstream the sum of their upstream times.
	Name     string
	Requests int64
	Upstream time.Duration
	// Exec is the engine's mean execution of the label (0: unknown).
	Exec time.Duration
	// Residual is the mean residual work a request of the label arriving
	// at a random moment finds in execution from every other command:
	// the other labels' calls, whoever sent them, and this label's calls
	// of other clients (Σ calls × mean² / (2 × interval), as
	// OthersResidual).
	Residual time.Duration
}

// ClassWait is a command label's per-request means in a Verdict: its
// engine execution (Exec) and engine wait (Wait, queue behind the
// proxy's own requests, behind other commands (Others) and run queue
// (RunQueue)), after the cap by the label's own upstream time (Upstream).
type ClassWait struct {
	Name                                   string
	Requests                               int64
	Upstream, Exec, Wait, Others, RunQueue time.Duration
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

// OthersWait is the engine wait a request finds behind other clients'
// commands: Pollaczek–Khinchine for M/G/1 (Kleinrock, Queueing Systems
// vol. 1, §5.5), W = R / (1 − u), from the mean residual work R of those
// commands that an arrival at a random moment finds (Interval's
// OthersResidual: their second moment, so that a queue behind 2 ms
// commands is not one behind 1 µs ones) and the thread's utilisation u
// (0..1, capped at MaxQueueUtilization so that a saturated thread gives a
// finite wait; the caller caps the result by what the round trip holds).
func OthersWait(residual time.Duration, u float64) time.Duration {
	if residual <= 0 {
		return 0
	}
	return time.Duration(float64(residual) / (1 - min(max(u, 0), MaxQueueUtilization)))
}

// MaxQueueUtilization caps the utilisation OthersWait divides by: at 0.9
// the wait is ten residuals.
const MaxQueueUtilization = 0.9

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
		Injected:   c.Phases[metrics.PhaseInjected].Sum,
		TLS:        c.Phases[metrics.PhaseTLS].Sum,
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
		iv.Injected -= p.Phases[metrics.PhaseInjected].Sum
		iv.TLS -= p.Phases[metrics.PhaseTLS].Sum
		iv.Think -= prev.Think.Sum
		iv.ThinkCount -= prev.Think.Count()
	}
	return iv
}

// FromShard returns the request sums of the shard labelled name (its
// address, metrics.Set.Shard) between two cumulative snapshots of the same
// Set (prev may be nil: since start): Requests, Total, Upstream, Proxy,
// Injected (fault injection's delays) and TLS (TLS clients' crypto, part
// of Proxy) of the commands and fan-out sub-requests sent to that shard, Upstream
// being each sub-request's own round trip to the shard and Total its
// command's (so Proxy = Total − Upstream − Injected). The shard stats have no
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
	iv.TLS = c.Phases[metrics.PhaseTLS].Sum
	iv.Injected = c.Phases[metrics.PhaseInjected].Sum
	if p := shardStats(prev, name); p != nil {
		iv.Requests -= p.Phases[metrics.PhaseTotal].Count()
		iv.Total -= p.Phases[metrics.PhaseTotal].Sum
		iv.Upstream -= p.Phases[metrics.PhaseUpstream].Sum
		iv.Proxy -= p.Phases[metrics.PhaseProxy].Sum
		iv.TLS -= p.Phases[metrics.PhaseTLS].Sum
		iv.Injected -= p.Phases[metrics.PhaseInjected].Sum
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
	// (execution), Wait (engine wait, run-queue wait included), Proxy,
	// Injected (below). RunQueue is the run-queue part of Wait, Loop the loop-wait part of
	// Proxy.
	Client, Path, Engine, Wait, Proxy float64
	RunQueue, Loop                    float64
	// Injected is the share of the delays fault injection rules added
	// (Interval.Injected), and InjectedTime its mean per request: a part
	// of its own, never counted as engine, path or proxy.
	Injected     float64
	InjectedTime time.Duration
	// TLS is the share of Proxy spent decrypting TLS clients' requests and
	// encrypting their replies (the tls phase), and TLSTime its mean per
	// request; the engine's TLS work is in Engine and Path.
	TLS     float64
	TLSTime time.Duration
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
	// EventLoop is the engine's own busy share of the interval
	// (Interval.EventLoopBusy: INFO stats eventloop_duration_sum) where
	// EventLoopKnown; String names it beside the thread's busy share.
	EventLoop      float64
	EventLoopKnown bool
	// ProbeWait, ProbeKnown: Interval's, for the cross-check.
	ProbeWait  time.Duration
	ProbeKnown bool
	// LoopReply is the part of LoopWait that replies waited unread (in
	// the upstream phase): upstream = Network + Exec + EngineWait +
	// LoopReply.
	LoopReply time.Duration
	// Per request means of the two parts not above: Think (the client's
	// think time less the loop wait taken from it) and ProxyTime (the
	// proxy's processing, its loop wait not included). Cycle = Think +
	// Network + Exec + EngineWait + ProxyTime + LoopWait + InjectedTime,
	// the parts each at least 0.
	Think, ProxyTime time.Duration
	// OthersWait is the part of EngineWait spent behind other clients'
	// commands (OthersWait; after the cap), Culprit the command label of
	// those that kept the engine busiest, with CulpritBusy (its share of
	// the interval, 0..1), CulpritMean (its mean execution) and
	// CulpritSent (the share of them sent through respmeter, 0..1).
	OthersWait  time.Duration
	Culprit     string
	CulpritBusy float64
	CulpritMean time.Duration
	CulpritSent float64
	// Classes are the per-label means of Interval.Classes, nil without
	// them; their request-weighted means make up Exec and EngineWait for
	// the requests they hold.
	Classes []ClassWait
	// ProxyStarved is the proxy's threads' run-queue wait over their CPU
	// time (ProxyHostKnown): 1 means they waited for a CPU as long as
	// they ran.
	ProxyStarved   float64
	ProxyHostKnown bool
	// Bound names the largest part: "client-bound", "path-bound",
	// "injected-bound" (the delays of fault injection rules), when the
	// proxy's part (its processing and loop wait) is the largest
	// "host-starved" (the proxy's threads waited for a CPU at least
	// HostStarved times as long as they ran: the host is short of CPU,
	// not the proxy; so too when the client's part is the largest and
	// that wait per request is a quarter of the cycle, as the think time
	// respmeter's clock reads then holds the requests its threads read
	// late), "proxy-saturated" (the loop wait is at least the
	// processing: its loops are never idle) or "proxy-bound", or, when
	// the engine's parts together are the largest,
	// "engine-starved" (its run-queue wait is the largest of them: the
	// host is short of CPU), "engine-busy" (the wait behind other
	// clients' commands is the largest: Culprit names them),
	// "engine-saturated" (its queueing wait is at least its execution, or
	// its thread is ≥ 90 % busy with at least two requests in flight) or
	// "engine-bound" (execution itself); "idle" with no requests.
	Bound string
	// Little's law: L is the measured mean in flight, LambdaW the product
	// of measured throughput and mean latency; Little is false when L was
	// not sampled.
	L, LambdaW float64
	Little     bool
}

// CulpritBusy is the least share of the interval other clients'
// commands of one label keep the engine busy for the verdict to name
// them: the side connections' polls and PINGs stay below it.
const CulpritBusy = 0.05

// HostStarved is the ratio of the proxy's threads' run-queue wait to
// their CPU time from which a proxy-bound interval reads "host-starved".
const HostStarved = 0.5

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
	if iv.Requests <= 0 {
		return Verdict{Bound: "idle"}
	}
	n := float64(iv.Requests)
	upstream := iv.Upstream.Seconds() / n
	a := Account{Requests: iv.Requests, Culprit: iv.Culprit, CulpritBusy: iv.CulpritBusy, CulpritMean: iv.CulpritMean,
		CulpritSent: iv.CulpritSent}
	engine := 0.0
	if iv.EngineMean > 0 {
		a.EngineKnown = true
		engine = min(iv.EngineMean.Seconds(), upstream)
	}
	var wait, runq, others float64
	if iv.Length > 0 {
		a.UpInFlight = iv.Upstream.Seconds() / iv.Length.Seconds()
	}
	if iv.BusyKnown {
		a.WaitKnown = true
		a.Utilization = iv.Utilization
		// The thread's occupied time is shared out over the engine's
		// commands by the time each keeps it: its execution plus the
		// per-command work outside execution (io: socket I/O, from the
		// CPU beyond execution). share is a proxied request's part, so
		// that cheap commands of other clients (the probe's PINGs) do not
		// dilute the demand or run-queue wait of long ones; without
		// execution figures every command counts alike.
		share := 0.0
		if n := float64(iv.Commands); n > 0 {
			exec, cpu, e := iv.ExecTime.Seconds(), iv.CPUTime.Seconds(), engine
			// commandstats' execution is wall-clock: a command preempted
			// while it ran holds the run-queue wait too, which for a
			// starved thread can make one INFO outweigh thousands of GETs.
			// The executions are taken on the CPU alone, in the share of
			// the thread's runnable time it spent on one.
			if rq := iv.RunQueueTime.Seconds(); iv.HostKnown && cpu > 0 {
				f := cpu / (cpu + rq)
				exec, e = exec*f, e*f
			}
			io := max(cpu-exec, 0) / n
			share = 1 / n
			if occupied := exec + n*io; occupied > 0 && e > 0 {
				share = (e + io) / occupied
			}
		}
		// The requests ahead are the proxy's own (inFlight counts them),
		// each taking a proxied request's share of the thread's busy time,
		// and at least the engine's execution of it.
		d := max(iv.Demand, iv.EngineMean)
		if share > 0 {
			d = max(d, seconds(iv.Demand.Seconds()*float64(iv.Commands)*share))
		}
		q := QueueWait(iv.Utilization, d, a.UpInFlight).Seconds()
		var runq0, preempt float64 // before the cap; the run-queue share of execution
		// Behind other clients' commands: their residual work, queued.
		others = OthersWait(iv.OthersResidual, iv.Utilization).Seconds()
		if iv.HostKnown && iv.Commands > 0 {
			// A thread woken per command waits for the CPU once per
			// command, a command preempted while it runs in proportion
			// to its length: the run-queue time is shared out alike.
			runq = iv.RunQueueTime.Seconds() * share
			rq, cpu := iv.RunQueueTime.Seconds(), iv.CPUTime.Seconds()
			// A command preempted while it runs has that wait in its
			// execution time too (commandstats is wall-clock): the
			// run-queue share of the thread's occupied time is taken out
			// of execution, up to the run-queue wait.
			if rq+cpu > 0 {
				preempt = rq / (rq + cpu)
				engine -= min(runq, engine*preempt)
			}
			runq0 = runq
		} else if iv.HostKnown {
			runq = iv.RunQueueWait.Seconds()
			runq0 = runq
		}
		a.ModelWait = seconds(q + others + runq)
		q, others, runq = capWait(q, others, runq, upstream-engine, iv.RTTFloor.Seconds())
		wait = q + others + runq
		if len(iv.Classes) > 0 {
			a.Classes = iv.classWaits(&engine, &wait, &runq, &others, &a.ModelWait, q, runq0, preempt)
		}
	}
	// The loop wait: a request read late waited in its client socket
	// (booked as think time), a reply read late in the upstream socket
	// (booked as upstream, so path); each up to what holds it, the path
	// keeping its floor.
	think, path := iv.Think.Seconds()/n, upstream-engine-wait
	var loopWait float64
	// The proxy's threads' run-queue wait per request: a request or reply
	// waits unread at least that long when the loops' threads wait for a
	// CPU (the loops' timing tasks see less: the thread that hands them
	// out waits for the same CPU before it stamps them).
	var hostWait float64
	if iv.ProxyHostKnown {
		hostWait = iv.ProxyRunQueue.Seconds() / n
		a.ProxyWait = seconds(hostWait)
	}
	if iv.LoopWaitKnown || hostWait > 0 {
		a.LoopWaitKnown = true
		lw := max(iv.LoopWait.Seconds(), hostWait)
		lt, lp := min(lw, max(think, 0)), min(lw, max(path-iv.RTTFloor.Seconds(), 0))
		if iv.LoopPathCapped {
			lp = min(lp, max(iv.LoopPathCap.Seconds(), 0))
		}
		think, path, loopWait = think-lt, path-lp, lt+lp
		a.LoopReply = seconds(lp)
	}
	a.Think, a.Path, a.Exec = seconds(max(think, 0)), seconds(max(path, 0)), seconds(max(engine, 0))
	a.Wait, a.RunQueue, a.Others = seconds(wait), seconds(runq), seconds(others)
	a.Proxy, a.Loop = seconds(max(iv.Proxy.Seconds()/n, 0)), seconds(loopWait)
	a.Injected = seconds(max(iv.Injected.Seconds()/n, 0))
	a.TLS = min(seconds(max(iv.TLS.Seconds()/n, 0)), a.Proxy)
	if iv.ProxyHostKnown {
		a.ProxyHostKnown = true
		a.ProxyCPU, a.ProxyRunQueue = iv.ProxyCPU, iv.ProxyRunQueue
	}
	v := a.Verdict()
	v.ProbeWait, v.ProbeKnown = iv.ProbeWait, iv.ProbeKnown
	if iv.BusyKnown {
		v.EventLoop, v.EventLoopKnown = iv.EventLoopBusy, iv.EventLoopKnown
	}
	if iv.InFlight >= 0 && iv.Length > 0 {
		v.Little = true
		v.L = iv.InFlight
		v.LambdaW = n / iv.Length.Seconds() * (iv.Total.Seconds() / n)
	}
	return v
}

// capWait caps the engine wait's parts, per request in seconds, by the
// room the upstream time leaves beside the execution (room): the
// run-queue wait runq, measured (schedstat), by the room itself; the
// modelled queue q and wait behind other commands others by what is left
// after it and the network's floor, shared in proportion. The floor is
// not taken from the run-queue wait, since it holds it when the engine is
// starved: the upstream sockets' TCP RTT when the ACK of a request rides
// on its reply, and the probe's baseline when it was taken while the
// engine waited for its CPU.
func capWait(q, others, runq, room, floor float64) (float64, float64, float64) {
	runq = min(runq, max(room, 0))
	left := max(room-runq-floor, 0)
	if total := q + others; total > left {
		q, others = q*left/total, others*left/total
	}
	return q, others, runq
}

// classWaits works the engine's execution and wait out per class
// (Interval.Classes) from the interval-wide queue wait q and run-queue wait
// runq per request (before the cap) and the run-queue share preempt of
// execution: each class waits behind its own Residual (OthersWait), and
// its wait is capped by its own upstream time (keeping RTTFloor), so that
// a cheap command's long wait is not averaged with a long command's short
// one. The interval-wide engine, wait, runq, others and model figures are
// replaced by the request-weighted means of the classes and, for the
// requests of no class, the interval-wide figures passed in.
func (iv Interval) classWaits(engine, wait, runq, others *float64, model *time.Duration, q, runq0, preempt float64) []ClassWait {
	out := make([]ClassWait, 0, len(iv.Classes))
	var n, eSum, wSum, rSum, oSum, mSum float64
	for _, c := range iv.Classes {
		if c.Requests <= 0 || c.Exec <= 0 {
			continue
		}
		cn := float64(c.Requests)
		up := c.Upstream.Seconds() / cn
		e := min(c.Exec.Seconds(), up)
		e -= min(runq0, e*preempt)
		o := OthersWait(c.Residual, iv.Utilization).Seconds()
		mSum += (q + o + runq0) * cn
		cq, co, cr := capWait(q, o, runq0, up-e, iv.RTTFloor.Seconds())
		w := cq + co + cr
		out = append(out, ClassWait{Name: c.Name, Requests: c.Requests, Upstream: seconds(up), Exec: seconds(max(e, 0)),
			Wait: seconds(w), Others: seconds(co), RunQueue: seconds(cr)})
		n += cn
		eSum += e * cn
		wSum += w * cn
		rSum += cr * cn
		oSum += co * cn
	}
	if n == 0 {
		return nil
	}
	rest := max(float64(iv.Requests)-n, 0)
	all := n + rest
	*engine = (eSum + rest**engine) / all
	*wait = (wSum + rest**wait) / all
	*runq = (rSum + rest**runq) / all
	*others = (oSum + rest**others) / all
	*model = seconds((mSum + rest*model.Seconds()) / all)
	return out
}

// Account is a request cycle's parts, per request, each at least 0, and
// what the verdict's outcome is decided on: an interval's
// (Interval.Verdict) or the request-weighted mean of several
// (metrics/verdict: the verdict since start is the sum of its
// intervals').
type Account struct {
	// Requests is the number of requests the means are over; 0: idle.
	Requests int64
	// Think is the client's think time, Path the network, Exec the
	// engine's execution, Wait the engine wait (RunQueue and Others
	// included: the run-queue wait, and the wait behind other clients'
	// commands), Proxy the proxy's processing and Loop its loop wait.
	Think, Path, Exec, Wait, RunQueue, Others, Proxy, Loop time.Duration
	// Injected is the delays fault injection rules added (the injected
	// phase), apart from every other part.
	Injected time.Duration
	// TLS is the part of Proxy spent decrypting TLS clients' requests and
	// encrypting their replies (the tls phase).
	TLS time.Duration
	// LoopReply is the part of Loop a reply waited unread (taken from the
	// upstream phase; the rest of Loop is taken from the think time), so
	// that upstream = Path + Exec + Wait + LoopReply.
	LoopReply time.Duration
	// ModelWait is the engine-wait model's figure before the cap.
	ModelWait time.Duration
	// EngineKnown, WaitKnown, LoopWaitKnown: see Verdict.
	EngineKnown, WaitKnown, LoopWaitKnown bool
	// Utilization is the engine thread's busy share, UpInFlight the mean
	// number of the proxy's requests in the upstream phase.
	Utilization, UpInFlight float64
	// Culprit, CulpritBusy, CulpritMean, CulpritSent: see Interval.
	Culprit     string
	CulpritBusy float64
	CulpritMean time.Duration
	CulpritSent float64
	// The proxy's threads' CPU and run-queue wait (ProxyHostKnown), and
	// that wait per request (ProxyWait).
	ProxyCPU, ProxyRunQueue, ProxyWait time.Duration
	ProxyHostKnown                     bool
	// Classes: see Verdict (an interval's only).
	Classes []ClassWait
}

// Part is one part of an Account, per request, under the name every view
// of the account gives it: the /stats "account" parts, the part label of
// respmeter_verdict_seconds_total, the live page's account row and the
// exit's "account per request" line.
type Part struct {
	Name string
	Time time.Duration
}

// PartNames are the names of Account.Parts, in order.
var PartNames = [...]string{"think", "path", "engine", "queue", "other_clients", "run_queue", "proxy",
	"loop_wait_request", "loop_wait_reply", "injected", "tls"}

// Parts returns the account's parts, which add up to its cycle: think,
// path (the network), engine (execution), queue (waiting for the engine's
// command thread behind the proxy's own requests), other_clients (behind
// other clients' commands), run_queue (the engine's thread waiting for a
// CPU), proxy (processing, tls not included), loop_wait_request and
// loop_wait_reply (a request or a reply waiting unread for a busy or
// starved proxy loop), injected (the delays of fault injection rules: the
// injected phase) and tls (decrypting TLS clients' requests and encrypting
// their replies: the tls phase, the rest of the proxy's processing).
// Wait is queue + other_clients + run_queue, Loop the two loop waits, and
// upstream = path + engine + Wait + loop_wait_reply. Every view of the
// account takes its figures from here.
func (a Account) Parts() [len(PartNames)]Part {
	t := [len(PartNames)]time.Duration{a.Think, a.Path, a.Exec, max(a.Wait-a.RunQueue-a.Others, 0), a.Others, a.RunQueue,
		max(a.Proxy-a.TLS, 0), max(a.Loop-a.LoopReply, 0), a.LoopReply, a.Injected, a.TLS}
	var out [len(PartNames)]Part
	for i, name := range PartNames {
		out[i] = Part{Name: name, Time: t[i]}
	}
	return out
}

// Parts returns the verdict's account per request (Account.Parts).
func (v Verdict) Parts() [len(PartNames)]Part {
	return Account{Think: v.Think, Path: v.Network, Exec: v.Exec, Wait: v.EngineWait, RunQueue: v.RunQueueWait,
		Others: v.OthersWait, Proxy: v.ProxyTime, Loop: v.LoopWait, LoopReply: v.LoopReply, Injected: v.InjectedTime, TLS: v.TLSTime}.Parts()
}

// Verdict returns the shares and the outcome of the account; Little's
// law is left for the caller.
func (a Account) Verdict() Verdict {
	v := Verdict{Bound: "idle"}
	if a.Requests <= 0 {
		return v
	}
	v.EngineKnown, v.WaitKnown, v.LoopWaitKnown = a.EngineKnown, a.WaitKnown, a.LoopWaitKnown
	v.Utilization = a.Utilization
	v.ModelWait = a.ModelWait
	parts := [6]time.Duration{a.Think, a.Path, a.Exec, a.Wait, a.Proxy + a.Loop, a.Injected}
	var cycle time.Duration
	for _, p := range parts {
		cycle += max(p, 0)
	}
	if cycle <= 0 {
		return v
	}
	c := cycle.Seconds()
	v.Cycle = cycle
	v.Client, v.Path, v.Engine, v.Wait, v.Proxy = parts[0].Seconds()/c, parts[1].Seconds()/c, parts[2].Seconds()/c, parts[3].Seconds()/c, parts[4].Seconds()/c
	v.RunQueue, v.Loop = a.RunQueue.Seconds()/c, a.Loop.Seconds()/c
	v.Injected, v.InjectedTime = max(a.Injected, 0).Seconds()/c, max(a.Injected, 0)
	v.TLS, v.TLSTime = max(a.TLS, 0).Seconds()/c, max(a.TLS, 0)
	v.Exec, v.EngineWait, v.RunQueueWait, v.Network = a.Exec, a.Wait, a.RunQueue, a.Path
	v.LoopWait, v.Think, v.ProxyTime, v.OthersWait = a.Loop, a.Think, a.Proxy, a.Others
	v.LoopReply = a.LoopReply
	v.Classes = a.Classes
	if a.Others > 0 && a.CulpritBusy >= CulpritBusy {
		v.Culprit, v.CulpritBusy, v.CulpritMean, v.CulpritSent = a.Culprit, a.CulpritBusy, a.CulpritMean, a.CulpritSent
	}
	if a.ProxyHostKnown && a.ProxyCPU > 0 {
		v.ProxyHostKnown = true
		v.ProxyStarved = a.ProxyRunQueue.Seconds() / a.ProxyCPU.Seconds()
	}

	groups := [5]time.Duration{parts[0], parts[1], a.Exec + a.Wait, parts[4], parts[5]}
	names := [5]string{"client-bound", "path-bound", "engine", "proxy-bound", "injected-bound"}
	best := 0
	for i, p := range groups {
		if p > groups[best] {
			best = i
		}
	}
	v.Bound = names[best]
	switch {
	case v.ProxyHostKnown && v.ProxyStarved >= HostStarved && (v.Bound == "proxy-bound" || v.Bound == "client-bound" && 4*a.ProxyWait >= cycle):
		v.Bound = "host-starved"
	case v.Bound == "proxy-bound" && a.Loop > 0 && a.Loop >= a.Proxy:
		v.Bound = "proxy-saturated"
	case v.Bound == "engine":
		q := a.Wait - a.RunQueue - a.Others
		switch {
		case a.RunQueue > 0 && a.RunQueue >= a.Exec && a.RunQueue >= q && a.RunQueue >= a.Others:
			v.Bound = "engine-starved"
		case a.Others > 0 && a.Others >= a.Exec && a.Others >= q:
			v.Bound = "engine-busy"
		case a.WaitKnown && (q >= a.Exec || a.Utilization >= SaturatedUtilization && a.UpInFlight >= 2):
			v.Bound = "engine-saturated"
		default:
			v.Bound = "engine-bound"
		}
	}
	return v
}

// Next returns one line of what to do next about the verdict's outcome
// ("" when idle).
func (v Verdict) Next() string {
	switch v.Bound {
	case "client-bound":
		return "the clients' own time between replies and requests dominates: more connections or pipelining raise throughput"
	case "path-bound":
		return "the network between respmeter and the engine dominates: check the path (RTT, relays, TLS) or move the engine closer"
	case "injected-bound":
		return "the delays of respmeter's fault injection rules dominate (--inject, /inject): the rest of the account is what the setup adds without them"
	case "proxy-bound":
		return "respmeter's processing dominates: give it more loops (--loops) or CPU"
	case "proxy-saturated":
		return "respmeter's loops are never idle: give it more loops (--loops) or cores of its own"
	case "host-starved":
		return "respmeter's threads wait for a CPU: pin the load generator and respmeter to separate cores (taskset), or give the host more CPU"
	case "engine-starved":
		return "the engine waits for a CPU: give its process a core of its own (taskset) and move CPU-heavy neighbours away"
	case "engine-busy":
		if v.Culprit != "" {
			return fmt.Sprintf("%s commands keep the engine busy %.0f%% of the time (%v each)%s: find them (SLOWLOG GET, CLIENT LIST, respmeter's slow log) and shorten, split or move them",
				strings.ToUpper(v.Culprit), 100*v.CulpritBusy, v.CulpritMean.Round(time.Microsecond), v.culpritFrom())
		}
		return "other clients' commands keep the engine busy: find them (SLOWLOG GET, CLIENT LIST) and shorten, split or move them"
	case "engine-saturated":
		return "the engine's command thread is saturated: fewer or cheaper commands, or more shards"
	case "engine-bound":
		return "the commands' own execution dominates: cheaper commands (smaller values, fewer keys per call)"
	}
	return ""
}

// culpritFrom says who sent the culprit's calls, from CulpritSent:
// " from other clients" (engine clients other than respmeter's, under 5 %
// through it), " through respmeter" (95 % or more: other requests than
// those waiting, from its clients), or the share through it.
func (v Verdict) culpritFrom() string {
	switch {
	case v.CulpritSent < 0.05:
		return " from other clients"
	case v.CulpritSent >= 0.95:
		return " through respmeter"
	}
	return fmt.Sprintf(" (%.0f%% through respmeter)", 100*v.CulpritSent)
}

// seconds converts s seconds to a Duration, rounded to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// String formats the verdict on one line, e.g.
// "cycle 412µs: client 61% | path 22% | engine 9% | proxy 8% — client-bound;
// Little: L 3.98 vs λW 4.02", with the engine thread's witnesses
// "cycle 20.1ms: client 0% | path 1% | engine 10% | engine wait 88% | proxy 1%
// — engine-saturated; engine thread 99% busy; Little: L 9.98 vs λW 10.01",
// and where the engine counts its event loop's busy time (Redis >= 7.2,
// Valkey >= 8) "engine thread 99% busy (event loop 97% by the engine's own
// count)".
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
	switch {
	case v.LoopWaitKnown && v.TLSTime > 0:
		prx += fmt.Sprintf(" (tls %.0f%%, loop wait %.0f%%)", 100*v.TLS, 100*v.Loop)
	case v.LoopWaitKnown:
		prx += fmt.Sprintf(" (loop wait %.0f%%)", 100*v.Loop)
	case v.TLSTime > 0:
		prx += fmt.Sprintf(" (tls %.0f%%)", 100*v.TLS)
	}
	if v.InjectedTime > 0 {
		prx += fmt.Sprintf(" | injected %.0f%%", 100*v.Injected)
	}
	fmt.Fprintf(&b, "cycle %v: client %.0f%% | path %.0f%% | engine %s | proxy %s — %s",
		v.Cycle.Round(time.Microsecond), 100*v.Client, 100*v.Path, eng, prx, v.Bound)
	if v.WaitKnown {
		fmt.Fprintf(&b, "; engine thread %.0f%% busy", 100*v.Utilization)
		if v.EventLoopKnown {
			fmt.Fprintf(&b, " (event loop %.0f%% by the engine's own count)", 100*v.EventLoop)
		}
	}
	if v.Culprit != "" {
		fmt.Fprintf(&b, ", %.0f%% with %s (%v each)%s", 100*v.CulpritBusy, strings.ToUpper(v.Culprit),
			v.CulpritMean.Round(time.Microsecond), v.culpritFrom())
	}
	if v.ProxyHostKnown && v.Bound == "host-starved" {
		fmt.Fprintf(&b, "; respmeter's threads waited %.1fx their CPU time for a CPU", v.ProxyStarved)
	}
	if v.Little {
		fmt.Fprintf(&b, "; Little: L %.2f vs λW %.2f", v.L, v.LambdaW)
	}
	return b.String()
}
