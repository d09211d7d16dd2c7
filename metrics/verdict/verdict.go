// Package verdict computes, every interval, where the time of the proxied
// requests went (metrics/split) from the proxy's metrics Set, the engine's
// witnesses (metrics/engine: its poller and PING probe), the proxy's
// requests in flight, its loops' wait and its own threads' run-queue wait,
// and keeps the account since start as the sum of its intervals, so that
// every figure it shows (per interval and at exit) adds up the same way.
//
// Build turns one interval's evidence into a split.Interval and is pure;
// Sum adds up intervals; Analyzer gathers the evidence on a goroutine of
// its own (Run) and only reads Snapshots and atomics: nothing of it is on
// the proxy's hot path.
package verdict

import (
	"context"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/respmeter/respmeter/metrics"
	engstats "github.com/respmeter/respmeter/metrics/engine"
	"github.com/respmeter/respmeter/metrics/split"
)

// Record is the verdict of one interval with what it was computed from.
type Record struct {
	End      time.Time
	Interval split.Interval
	Verdict  split.Verdict
}

// Input is one interval's evidence, for Build. Durations are over the
// interval.
type Input struct {
	// Prev and Cur are the Set's cumulative snapshots at the interval's
	// start (nil: since start) and end (metrics.Set.Sums suffices).
	Prev, Cur *metrics.Snapshot
	// Shard, when not "", makes the interval that of the requests and
	// sub-requests sent to the shard of that label (split.FromShard);
	// its Think is then the clients' think time shared out by the
	// shard's part of the requests.
	Shard string
	// Length is the interval's wall-clock length.
	Length time.Duration
	// InFlightArea is the area under the proxy's requests in flight over
	// the interval, in request·nanoseconds; negative: unknown.
	InFlightArea int64
	// EngineMean gives the engine's mean execution of a command label
	// and the weight it counts with given the proxy's n requests of it
	// (engineMean); nil: unknown.
	EngineMean func(cmd string, n int64) (mean time.Duration, weight int64, ok bool)
	// Witness is the engine thread's witnesses over (about) the interval
	// (WitnessOK), Labels the poller's command labels Witness.Work is
	// indexed by.
	Witness   engstats.Witness
	WitnessOK bool
	Labels    []string
	// LoopWait is the mean wait of the loops' timing tasks (LoopWaitKnown).
	LoopWait      time.Duration
	LoopWaitKnown bool
	// ProxyCPU and ProxyRunQueue are the proxy's threads' time on a CPU
	// and runnable waiting for one (ProxyHostKnown).
	ProxyCPU, ProxyRunQueue time.Duration
	ProxyHostKnown          bool
	// ProbeBase is the probe's unloaded baseline (0: none yet), ProbeP50
	// and ProbeCount its median round trip and PINGs over the interval.
	ProbeBase, ProbeP50 time.Duration
	ProbeCount          int64
	// PathBase is the proxied requests' unloaded path (PathOf; 0: none
	// yet): with ProbeBase, it lowers the interval's RTTFloor to it.
	PathBase time.Duration
}

// MinProbeWindow is the fewest PINGs whose median may set the probe's
// unloaded baseline or an interval's probe wait.
const MinProbeWindow = 5

// Build returns the interval the evidence in describes. Its engine
// witnesses are used only from an engine that reports its command
// thread's CPU (Redis 7, Valkey: the one-thread model holds; Dragonfly's
// INFO has the process's only). The other clients' commands are the
// engine's calls of each label less the proxy's requests of it in the
// interval (Interval.OthersBusy, OthersResidual, Culprit).
func Build(in Input) split.Interval {
	iv := split.FromSnapshots(in.Prev, in.Cur)
	if in.Shard != "" {
		all := iv
		iv = split.FromShard(in.Prev, in.Cur, in.Shard)
		if all.Requests > 0 && iv.Requests > 0 {
			iv.Think = time.Duration(float64(all.Think) * float64(iv.Requests) / float64(all.Requests))
		}
	}
	iv.Length = in.Length
	if in.EngineMean != nil {
		iv.EngineMean = engineMean(in.Prev, in.Cur, in.EngineMean)
	}
	if in.InFlightArea >= 0 && iv.Length > 0 && in.Shard == "" {
		iv.InFlight = float64(in.InFlightArea) / float64(iv.Length)
	}
	if w := in.Witness; in.WitnessOK && w.Commands > 0 && w.Interval > 0 && w.HasMainCPU {
		iv.Utilization, iv.Demand, iv.BusyKnown = w.Utilization(), w.Demand(), true
		iv.Commands, iv.ExecTime, iv.CPUTime = w.Commands, w.Exec, w.ThreadCPU()
		if w.HasHost {
			iv.RunQueueTime, iv.HostKnown = w.RunQueue, true
		}
		iv.EventLoopBusy, iv.EventLoopKnown = w.EventLoopShare()
		others(&iv, in)
	}
	iv.LoopWait, iv.LoopWaitKnown = in.LoopWait, in.LoopWaitKnown
	iv.ProxyCPU, iv.ProxyRunQueue, iv.ProxyHostKnown = in.ProxyCPU, in.ProxyRunQueue, in.ProxyHostKnown
	if in.ProbeBase > 0 {
		if in.ProbeCount >= MinProbeWindow {
			iv.ProbeWait, iv.ProbeKnown = max(in.ProbeP50-in.ProbeBase, 0), true
		}
		iv.RTTFloor = in.ProbeBase
		if in.PathBase > 0 {
			iv.RTTFloor = min(iv.RTTFloor, in.PathBase)
		}
		if in.Cur != nil {
			var prevN int64
			var prevSum time.Duration
			if in.Prev != nil {
				prevN, prevSum = in.Prev.UpstreamRTT.N, in.Prev.UpstreamRTT.Sum
			}
			if n := in.Cur.UpstreamRTT.N - prevN; n > 0 {
				iv.RTTFloor = min(iv.RTTFloor, (in.Cur.UpstreamRTT.Sum-prevSum)/time.Duration(n))
			}
		}
	}
	return iv
}

// CulpritMin is the least share of all labels' residual work (Σ calls ×
// mean² / 2T) that the culprit's calls must leave to be named.
const CulpritMin = 0.05

// others fills in iv the commands other than each of the proxy's
// requests: per label, the engine's calls over the witness's interval,
// of which the proxy's requests of that label in the verdict's (scaled to
// the witness's length) are its own, each call taking the label's mean.
// A request of label l finds in execution the residual work (Σ calls ×
// mean² / 2T) of every other label's calls, whoever sent them (another
// client's DEBUG through the proxy as much as one sent to the engine
// directly), and of l's calls from other clients (iv.Classes, weighted
// into iv.OthersResidual by the proxy's requests of each label). The
// culprit is the label whose calls leave the most of that residual, its
// busy share that of its calls other to the proxy's requests.
func others(iv *split.Interval, in Input) {
	w := in.Witness
	if len(w.Work) == 0 || w.Interval <= 0 {
		return
	}
	type own struct {
		n        int64
		upstream time.Duration
	}
	proxied := map[string]own{}
	var total int64
	if in.Cur != nil {
		for i := range in.Cur.Commands {
			if i < len(in.Cur.Excluded) && in.Cur.Excluded[i] {
				continue
			}
			c := &in.Cur.Commands[i]
			n, up := c.Phases[metrics.PhaseTotal].Count(), c.Phases[metrics.PhaseUpstream].Sum
			if in.Prev != nil && i < len(in.Prev.Commands) {
				n -= in.Prev.Commands[i].Phases[metrics.PhaseTotal].Count()
				up -= in.Prev.Commands[i].Phases[metrics.PhaseUpstream].Sum
			}
			if n > 0 {
				o := proxied[lower(c.Name)]
				o.n += n
				o.upstream += up
				proxied[lower(c.Name)] = o
				total += n
			}
		}
	}
	scale := 1.0
	if in.Length > 0 {
		scale = w.Interval.Seconds() / in.Length.Seconds()
	}
	T := w.Interval.Seconds()
	// Per label: its whole residual and the other clients' part of it.
	var all float64
	resid := make([]float64, len(w.Work))
	foreign := make([]float64, len(w.Work))
	for i, wk := range w.Work {
		if wk.Calls <= 0 || wk.Time <= 0 || i >= len(in.Labels) {
			continue
		}
		resid[i] = wk.Square / (2 * T)
		own := float64(proxied[in.Labels[i]].n) * scale
		foreign[i] = resid[i] * max(float64(wk.Calls)-own, 0) / float64(wk.Calls)
		all += resid[i]
	}
	// A request of label l finds every other label's residual and the
	// foreign part of l's own.
	var weighted float64
	for i, name := range in.Labels {
		o, ok := proxied[name]
		if !ok || i >= len(w.Work) || w.Work[i].Calls <= 0 {
			continue
		}
		r := all - resid[i] + foreign[i]
		iv.Classes = append(iv.Classes, split.Class{Name: name, Requests: o.n, Upstream: o.upstream,
			Exec: w.Work[i].Time / time.Duration(w.Work[i].Calls), Residual: time.Duration(r * float64(time.Second))})
		weighted += r * float64(o.n)
	}
	var busy, top float64
	for i, wk := range w.Work {
		if wk.Calls <= 0 || wk.Time <= 0 || i >= len(in.Labels) {
			continue
		}
		// The part of the label's calls other to the proxy's requests:
		// all of them when the proxy sent requests of other labels, else
		// the other clients' calls.
		part := foreign[i] / resid[i]
		if n := proxied[in.Labels[i]].n; total > n {
			part = 1
		}
		if part <= 0 {
			continue
		}
		b := wk.Time.Seconds() * part / T
		busy += b
		// The culprit is the label whose calls leave the most residual
		// work: long commands, not many short ones (a script's inner
		// calls, counted apart from the script, take next to none).
		if r := resid[i] * part; r > top {
			top = r
			iv.Culprit, iv.CulpritBusy = in.Labels[i], b
			iv.CulpritMean = wk.Time / time.Duration(wk.Calls)
			iv.CulpritSent = min(float64(proxied[in.Labels[i]].n)*scale/float64(wk.Calls), 1)
		}
	}
	if top < CulpritMin*all {
		// No label's calls leave a material part of the residual work:
		// none is named (a script's inner calls, counted apart from the
		// script and not sent by the proxy, would otherwise be named
		// for next to nothing: "TIME (0s each)").
		iv.Culprit, iv.CulpritBusy, iv.CulpritMean, iv.CulpritSent = "", 0, 0, 0
	}
	iv.OthersBusy = min(busy, 1)
	// Other clients' commands keep the thread no busier than its event
	// loop says it was, where the engine says.
	if share, ok := w.EventLoopShare(); ok {
		iv.OthersBusy, iv.CulpritBusy = min(iv.OthersBusy, share), min(iv.CulpritBusy, share)
	}
	if total > 0 && len(iv.Classes) > 0 {
		var n int64
		for _, c := range iv.Classes {
			n += c.Requests
		}
		iv.OthersResidual = time.Duration(weighted / float64(n) * float64(time.Second))
	} else {
		var r float64
		for i := range foreign {
			r += foreign[i]
		}
		iv.OthersResidual = time.Duration(r * float64(time.Second))
	}
}

// requestsBetween returns the timed requests between two snapshots.
func requestsBetween(prev, cur *metrics.Snapshot) int64 {
	n := cur.Totals().Phases[metrics.PhaseTotal].Count()
	if prev != nil {
		n -= prev.Totals().Phases[metrics.PhaseTotal].Count()
	}
	return n
}

// lower returns s in lower case (command labels are ASCII).
func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// engineMean returns the engine's mean execution time per request over the
// commands timed between the snapshots prev (nil: since start) and cur:
// meanOf(cmd, n) gives the engine's mean of command label cmd, timed n
// times in between, and the weight it counts with (n itself: the proxy's
// mix of commands; or the engine's own calls, under routing). Commands
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

// EngineMean is engineMean for callers: the engine's mean execution per
// request over the commands timed between prev and cur.
func EngineMean(prev, cur *metrics.Snapshot, meanOf func(cmd string, n int64) (time.Duration, int64, bool)) time.Duration {
	return engineMean(prev, cur, meanOf)
}

// Sum adds up intervals' verdicts: each part per request times the
// interval's requests, so that the account since start is the sum of its
// intervals (Account), not a recomputation from since-start means. The
// zero Sum is empty.
type Sum struct {
	// Requests is the sum of the intervals' requests, engineN of those in
	// intervals with the engine's execution known; the other fields are
	// seconds·requests: parts the account's (split.PartNames).
	Requests, engineN                                           int64
	parts                                                       [len(split.PartNames)]float64
	model                                                       float64
	util, upInFlight, proxyWait                                 float64
	proxyCPU, proxyRunQ                                         time.Duration
	engineKnown, waitKnown, loopKnown, proxyHost, engineUnknown bool
	// culprits: busy share × requests per label.
	culprits map[string]culprit
	// Length, Total and InFlight (area) for Little's law; Upstream.
	length, total, upstream time.Duration
	area                    float64
	areaKnown               bool
}

type culprit struct {
	busy, mean, sent float64 // weighted by requests
	n                float64
}

// Add adds an interval's record.
func (s *Sum) Add(rec *Record) {
	s.length += rec.Interval.Length
	if rec.Interval.InFlight >= 0 {
		s.area += rec.Interval.InFlight * rec.Interval.Length.Seconds()
		s.areaKnown = true
	}
	n := rec.Interval.Requests
	if n <= 0 {
		return
	}
	v, r := rec.Verdict, float64(n)
	s.Requests += n
	s.total += rec.Interval.Total
	s.upstream += rec.Interval.Upstream
	for i, p := range v.Parts() {
		s.parts[i] += p.Time.Seconds() * r
	}
	s.model += v.ModelWait.Seconds() * r
	s.util += v.Utilization * r
	if rec.Interval.Length > 0 {
		s.upInFlight += rec.Interval.Upstream.Seconds() / rec.Interval.Length.Seconds() * r
	}
	s.engineKnown = s.engineKnown || v.EngineKnown
	if v.EngineKnown {
		s.engineN += n
	}
	s.engineUnknown = s.engineUnknown || !v.EngineKnown
	s.waitKnown = s.waitKnown || v.WaitKnown
	s.loopKnown = s.loopKnown || v.LoopWaitKnown
	if rec.Interval.ProxyHostKnown {
		s.proxyHost = true
		s.proxyWait += rec.Interval.ProxyRunQueue.Seconds()
		s.proxyCPU += rec.Interval.ProxyCPU
		s.proxyRunQ += rec.Interval.ProxyRunQueue
	}
	if v.Culprit != "" {
		if s.culprits == nil {
			s.culprits = map[string]culprit{}
		}
		c := s.culprits[v.Culprit]
		c.busy += v.CulpritBusy * r
		c.mean += v.CulpritMean.Seconds() * r
		c.sent += v.CulpritSent * r
		c.n += r
		s.culprits[v.Culprit] = c
	}
}

// Account returns the mean account per request over the added intervals.
func (s *Sum) Account() split.Account {
	a := split.Account{Requests: s.Requests}
	if s.Requests <= 0 {
		return a
	}
	r := float64(s.Requests)
	d := func(x float64) time.Duration { return time.Duration(x / r * float64(time.Second)) }
	// split.PartNames: think, path, engine, queue, other_clients,
	// run_queue, proxy, loop_wait_request, loop_wait_reply, injected,
	// tls (proxy less tls, then tls).
	p := &s.parts
	a.Think, a.Path, a.Exec, a.Wait = d(p[0]), d(p[1]), d(p[2]), d(p[3]+p[4]+p[5])
	a.Others, a.RunQueue, a.Proxy, a.Loop, a.LoopReply = d(p[4]), d(p[5]), d(p[6]+p[10]), d(p[7]+p[8]), d(p[8])
	a.Injected, a.TLS = d(p[9]), d(p[10])
	a.ModelWait = d(s.model)
	a.Utilization, a.UpInFlight = s.util/r, s.upInFlight/r
	a.EngineKnown, a.WaitKnown, a.LoopWaitKnown = s.engineKnown, s.waitKnown, s.loopKnown
	a.ProxyHostKnown, a.ProxyCPU, a.ProxyRunQueue, a.ProxyWait = s.proxyHost, s.proxyCPU, s.proxyRunQ, d(s.proxyWait)
	var top float64
	for name, c := range s.culprits {
		if c.busy > top {
			top = c.busy
			a.Culprit, a.CulpritBusy = name, c.busy/r
			a.CulpritMean = time.Duration(c.mean / c.n * float64(time.Second))
			a.CulpritSent = c.sent / c.n
		}
	}
	return a
}

// Totals returns the parts of the added intervals (split.PartNames)
// summed over their requests, in seconds·requests: the sums of each
// interval's Verdict.Parts times its requests, so that each over Requests
// is Account().Parts()'s (within a nanosecond) and each only grows as
// intervals are added (respmeter_verdict_seconds_total).
func (s *Sum) Totals() [len(split.PartNames)]split.Part {
	var out [len(split.PartNames)]split.Part
	for i, name := range split.PartNames {
		out[i] = split.Part{Name: name, Time: time.Duration(math.Round(s.parts[i] * float64(time.Second)))}
	}
	return out
}

// Verdict returns the verdict of the sum: the Account's, with Little's
// law over the added intervals when they measured the requests in flight.
func (s *Sum) Verdict() split.Verdict {
	v := s.Account().Verdict()
	if s.Requests > 0 && s.areaKnown && s.length > 0 {
		v.Little = true
		v.L = s.area / s.length.Seconds()
		v.LambdaW = s.total.Seconds() / s.length.Seconds()
	}
	return v
}

// Record returns the sum as a Record ending at end: its Interval holds
// the sums of requests, total and length, its Verdict is Verdict.
func (s *Sum) Record(end time.Time) Record {
	iv := split.Interval{Length: s.length, Requests: s.Requests, Total: s.total, Upstream: s.upstream, InFlight: -1,
		ProxyCPU: s.proxyCPU, ProxyRunQueue: s.proxyRunQ, ProxyHostKnown: s.proxyHost}
	if s.areaKnown && s.length > 0 {
		iv.InFlight = s.area / s.length.Seconds()
	}
	return Record{End: end, Interval: iv, Verdict: s.Verdict()}
}

// Upstream returns the mean upstream time per request over the added
// intervals (0 without requests).
func (s *Sum) Upstream() time.Duration {
	if s.Requests <= 0 {
		return 0
	}
	return s.upstream / time.Duration(s.Requests)
}

// EngineKnownRequests returns the requests of the added intervals in
// which the engine's execution was known.
func (s *Sum) EngineKnownRequests() int64 { return s.engineN }

// EngineUnknown reports that some added interval with requests had no
// engine execution figures (its path then holds all of upstream).
func (s *Sum) EngineUnknown() bool { return s.engineUnknown }

// Config configures an Analyzer.
type Config struct {
	Set *metrics.Set
	Log *slog.Logger // nil: discard
	// InFlightArea is the area under the proxy's requests in flight since
	// it started, in request·nanoseconds (proxy.Proxy.InFlightArea; nil:
	// L unknown). It is integrated exactly from the moments the proxy's
	// loops count requests in and out, not sampled: a sampler reads the
	// count when the process wakes, and a busy process wakes mostly when a
	// request or reply arrives (measured: L/λW 0.62 for one client pausing
	// 3 ms between GETs with a 100 Hz sampler). The count spans a request
	// from the loop's count-in (after parsing its batch) to after the
	// reply's write, so L exceeds λW by λ × (write − parse time).
	InFlightArea func() int64
	// LoopLag hands each of the proxy's loops a task that reports how
	// long it waited to run (proxy.Proxy.LoopLag); nil: loop wait unknown.
	LoopLag func(record func(time.Duration)) int
	// Engine is the upstream's view without routing; nil under --route
	// slots or pinned, where ShardAddrs returns the shards the proxy
	// routes to (proxy.Proxy.ShardAddrs, settable later with
	// SetShardAddrs) and NewView starts the view of one.
	Engine     *View
	ShardAddrs func() []string
	NewView    func(addr string) (*View, error)
	// Interval is the verdict's interval (--hdr-interval).
	Interval time.Duration
	// ProcSelf is the proxy's own /proc directory for its threads'
	// run-queue wait ("/proc/self"); "" leaves the host-starved outcome
	// unknown.
	ProcSelf string
}

// View is one engine's side connections — the PING probe and the engine
// poller — and what the Analyzer keeps about them: without routing the
// upstream's, under --route slots or pinned one per shard, whose verdict
// it then computes per interval next to the overall one.
type View struct {
	// Addr is the engine's address, its shard label.
	Addr string
	// Zone is the shard's availability zone as configured (shard_zones),
	// "" when none was given.
	Zone   string
	Poller *engstats.Poller // nil when --engine-poll is 0
	Probe  *engstats.Probe  // nil when --probe-interval is 0

	// witPrev is the Poller's WitnessTotal at the previous interval's end
	// (witPrevOK); only Run's goroutine uses them.
	witPrev   engstats.Witness
	witPrevOK bool
	// lastPolls is the Poller's poll count at the previous interval's end.
	lastPolls int64

	// The fields below are guarded by Analyzer.mu.

	// probeBase is the probe's unloaded baseline: the lowest median round
	// trip of an interval without requests (to this engine) and with at
	// least MinProbeWindow PINGs; 0 before.
	probeBase time.Duration
	// pathBase is the proxied requests' unloaded path: the lowest PathOf
	// of an interval of this engine's; 0 before.
	pathBase time.Duration
	// last and busy are a shard's verdicts (routed only): of the latest
	// interval and of the latest with requests to it; sum adds up its
	// intervals.
	last, busy *Record
	sum        Sum
}

// EngineLabel is the engine label of the view's verdict gauges: the
// poller's (engstats.Poller.Engine), or "" with the poller off.
func (v *View) EngineLabel() string {
	if v == nil || v.Poller == nil {
		return ""
	}
	return v.Poller.Engine()
}

// Analyzer computes a verdict every interval (Run) and keeps the account
// since start. Run is called once; the other methods may be called from
// any goroutine.
type Analyzer struct {
	cfg     Config
	log     *slog.Logger
	started time.Time

	mu         sync.Mutex
	shardAddrs func() []string
	last       *Record // the latest interval; nil before the first
	busy       *Record // the latest interval with requests
	shards     []*View // append-only
	sum        Sum     // every interval since start
	// rows adds up each command label's rows (Rows) since start.
	rows map[string]*RowSum
	// lagSum, lagN: the loop-timing tasks' waits in the current interval.
	lagSum         time.Duration
	lagN, lagTotal int64
	// stale counts intervals that had no fresh poll of the engine, of
	// polled intervals.
	stale, polled int64
}

// New returns an Analyzer; nothing runs until Run and SampleLoops.
func New(cfg Config) *Analyzer {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Analyzer{cfg: cfg, log: log, started: time.Now(), shardAddrs: cfg.ShardAddrs}
}

// Started returns when the Analyzer was created.
func (a *Analyzer) Started() time.Time { return a.started }

// Interval returns the verdict's interval.
func (a *Analyzer) Interval() time.Duration { return a.cfg.Interval }

// Set returns the metrics Set it reads.
func (a *Analyzer) Set() *metrics.Set { return a.cfg.Set }

// Engine returns the upstream's view, nil under routing.
func (a *Analyzer) Engine() *View { return a.cfg.Engine }

// SetShardAddrs sets the function returning the shards the proxy routes
// to (before Run).
func (a *Analyzer) SetShardAddrs(f func() []string) {
	a.mu.Lock()
	a.shardAddrs = f
	a.mu.Unlock()
}

// SetProxy sets the proxy's in-flight area and loop-lag functions
// (Config's; before Run and SampleLoops).
func (a *Analyzer) SetProxy(inFlightArea func() int64, loopLag func(record func(time.Duration)) int) {
	a.cfg.InFlightArea, a.cfg.LoopLag = inFlightArea, loopLag
}

// Run computes a verdict every interval until ctx is done, and then one
// of the partial interval since the last, so that the account since start
// (SinceStart) holds every request.
func (a *Analyzer) Run(ctx context.Context) {
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	st := a.newState()
	for {
		select {
		case <-ctx.Done():
			if now := time.Now(); now.Sub(st.start) > 0 {
				a.step(st, now, false) // the pollers end with ctx too
			}
			return
		case <-tick.C:
		}
		a.step(st, time.Now(), true)
	}
}

// state is what Run carries from one interval to the next.
type state struct {
	prev            *metrics.Snapshot
	start           time.Time
	area            int64
	procCPU, procRQ time.Duration
	procOK          bool
}

func (a *Analyzer) newState() *state {
	st := &state{prev: a.cfg.Set.Sums(), start: time.Now(), area: a.area()}
	st.procCPU, st.procRQ, st.procOK = a.procSelf()
	return st
}

// procSelf reads the proxy's threads' CPU and run-queue time.
func (a *Analyzer) procSelf() (cpu, rq time.Duration, ok bool) {
	a.mu.Lock()
	dir := a.cfg.ProcSelf
	a.mu.Unlock()
	if dir == "" {
		return 0, 0, false
	}
	cpu, rq, err := engstats.TasksSchedstat(dir)
	return cpu, rq, err == nil
}

// SetProcSelf sets Config.ProcSelf ("" leaves the host-starved outcome
// unknown from the next interval on): a process that runs the proxy next to
// other work of its own (an in-process test with its clients and CPU
// burners) has no threads of the proxy alone to read.
func (a *Analyzer) SetProcSelf(dir string) {
	a.mu.Lock()
	a.cfg.ProcSelf = dir
	a.mu.Unlock()
}

// PollWait bounds how long an interval's end waits for the engine polls
// it asks for (pollNow), and a quarter of the interval does too.
const PollWait = 250 * time.Millisecond

// pollNow asks the pollers that poll at least as often as the interval
// for a poll at its end, so that the interval's witnesses and engine
// means cover the interval itself; a poller set slower than the interval
// (by choice, to spare the engine) keeps its own pace, and the intervals
// without a fresh poll are counted (StaleIntervals).
func (a *Analyzer) pollNow() {
	views := a.Shards()
	if a.cfg.Engine != nil {
		views = append(views, a.cfg.Engine)
	}
	for _, v := range views {
		if v.Poller != nil && v.Poller.Interval() <= a.cfg.Interval {
			v.Poller.PollNow(min(PollWait, a.cfg.Interval/4))
		}
	}
}

// step computes the interval ending at now, asking the engine for a poll
// first when poll is set.
func (a *Analyzer) step(st *state, now time.Time, poll bool) {
	if poll {
		a.pollNow()
	}
	a.SyncShards()
	cur := a.cfg.Set.Sums()
	area := a.area()
	in := Input{Prev: st.prev, Cur: cur, Length: now.Sub(st.start), InFlightArea: -1}
	if a.cfg.InFlightArea != nil {
		in.InFlightArea = area - st.area
	}
	cpu, rq, ok := a.procSelf()
	if ok && st.procOK {
		in.ProxyCPU, in.ProxyRunQueue, in.ProxyHostKnown = max(cpu-st.procCPU, 0), max(rq-st.procRQ, 0), true
	}
	a.mu.Lock()
	if a.lagN > 0 {
		in.LoopWait, in.LoopWaitKnown = a.lagSum/time.Duration(a.lagN), true
	}
	a.lagSum, a.lagN = 0, 0
	a.mu.Unlock()
	var iv split.Interval
	if v := a.cfg.Engine; v != nil {
		a.engineInput(v, &in, requestsBetween(st.prev, cur), false)
		iv = Build(in)
	} else {
		iv = Build(in)
		if mean, ok := a.shardVerdicts(now, in, iv); ok {
			iv.EngineMean = mean
		}
	}
	rec := &Record{End: now, Interval: iv, Verdict: iv.Verdict()}
	if v := a.cfg.Engine; v != nil {
		a.learnPath(v, rec)
	}
	a.account(Rows(st.prev, cur, rec.Verdict, a.labelMean(in)), rec)
	a.log.Debug("verdict", "interval", iv.Length, "requests", iv.Requests, "in_flight", iv.InFlight,
		"engine_mean", iv.EngineMean, "verdict", rec.Verdict.String())
	a.mu.Lock()
	a.last = rec
	if iv.Requests > 0 {
		a.busy = rec
	}
	a.mu.Unlock()
	st.prev, st.start, st.area = cur, now, area
	st.procCPU, st.procRQ, st.procOK = cpu, rq, ok
}

// engineInput fills in the evidence of v's poller and probe: the engine
// means (weighted by the engine's own calls of each command when byCalls:
// a shard's mix; else by the proxy's requests), the witnesses of the polls
// that ended within the interval (else the latest poll's), and the probe's
// median and baseline (the lowest median of an interval without requests
// and with at least MinProbeWindow PINGs, requests being the interval's
// requests to this engine; until there is one, neither the
// probe wait nor the network floor is known: the kernel's RTT alone is no
// floor, since a delayed ACK rides on the engine's reply).
func (a *Analyzer) engineInput(v *View, in *Input, requests int64, byCalls bool) {
	if v.Poller != nil {
		meanOf := func(cmd string, n int64) (time.Duration, int64, bool) {
			mean, calls, ok := v.Poller.EngineMean(cmd)
			if byCalls {
				n = calls
			}
			return mean, n, ok
		}
		polls := v.Poller.Stats().Polls
		a.mu.Lock()
		a.polled++
		if polls == v.lastPolls {
			a.stale++
		}
		a.mu.Unlock()
		v.lastPolls = polls
		in.EngineMean = meanOf
		w, ok := v.Poller.Witness()
		fresh := false
		if tot, tok := v.Poller.WitnessTotal(); tok {
			if d := tot.Since(v.witPrev); v.witPrevOK && d.Interval > 0 && d.Commands > 0 {
				w, fresh = d, true
			}
			v.witPrev, v.witPrevOK = tot, true
		}
		in.Witness, in.WitnessOK, in.Labels = w, ok, v.Poller.Labels()
		if fresh && len(w.Work) > 0 {
			// The engine's means over the polls that ended within the
			// interval, not over the last poll alone (which may be a
			// few milliseconds long when a regular poll came just before
			// the one the interval asked for).
			in.EngineMean = workMean(w, in.Labels, byCalls)
		}
	}
	if v.Probe == nil {
		return
	}
	p50, count := v.Probe.Window()
	a.mu.Lock()
	defer a.mu.Unlock()
	if count >= MinProbeWindow && requests == 0 && (v.probeBase == 0 || p50 < v.probeBase) {
		v.probeBase = p50
	}
	in.ProbeBase, in.ProbeP50, in.ProbeCount = v.probeBase, p50, count
	in.PathBase = v.pathBase
}

// MinPathRequests is the fewest requests an interval needs for PathOf.
const MinPathRequests = 10

// PathOf returns the mean path of an interval's requests that no model
// holds: their upstream time less the engine's execution and the
// run-queue wait, both measured (commandstats, schedstat), per request;
// ok only for an unloaded engine: an interval with at least
// MinPathRequests requests, the engine's execution known and its thread's
// witnesses saying it was less than half busy. The lowest of an engine's
// intervals (View.pathBase) is the network floor of its later intervals
// (split.Interval.RTTFloor) where the probe's and the kernel's are higher:
// the probe's baseline is the median of a few PINGs a second, which on a
// busy host wake a process each, and the kernel's RTT holds the engine's
// time whenever a delayed ACK rides on its reply. It is that floor which
// bounds, from below, the path of a request waiting out another client's
// long command, and so what is left of its round trip to book as the wait.
func PathOf(iv split.Interval, v split.Verdict) (time.Duration, bool) {
	if iv.Requests < MinPathRequests || !v.EngineKnown || !iv.BusyKnown || iv.Utilization >= 0.5 {
		return 0, false
	}
	p := iv.Upstream/time.Duration(iv.Requests) - v.Exec - v.RunQueueWait
	return p, p > 0
}

// learnPath lowers v's path base to rec's PathOf.
func (a *Analyzer) learnPath(v *View, rec *Record) {
	p, ok := PathOf(rec.Interval, rec.Verdict)
	if !ok {
		return
	}
	a.mu.Lock()
	if v.pathBase == 0 || p < v.pathBase {
		v.pathBase = p
	}
	a.mu.Unlock()
}

// workMean returns an Input.EngineMean from the per-label work of w
// (labels index it): the label's execution over its calls, weighted by the
// proxy's requests n, or by the engine's calls when byCalls.
func workMean(w engstats.Witness, labels []string, byCalls bool) func(cmd string, n int64) (time.Duration, int64, bool) {
	return func(cmd string, n int64) (time.Duration, int64, bool) {
		l := lower(cmd)
		for i, name := range labels {
			if name != l || i >= len(w.Work) {
				continue
			}
			wk := w.Work[i]
			if wk.Calls <= 0 {
				return 0, 0, false
			}
			if byCalls {
				n = wk.Calls
			}
			return wk.Time / time.Duration(wk.Calls), n, true
		}
		return 0, 0, false
	}
}

// StaleIntervals returns how many intervals found no new engine poll
// since the previous one (their witnesses are then the latest poll's), of
// how many intervals had a poller (of every view).
func (a *Analyzer) StaleIntervals() (stale, of int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stale, a.polled
}

// area returns InFlightArea(), 0 when it is nil.
func (a *Analyzer) area() int64 {
	if a.cfg.InFlightArea == nil {
		return 0
	}
	return a.cfg.InFlightArea()
}

// account adds the interval to the sums since start: its record's and
// its command labels' rows.
func (a *Analyzer) account(rows []Row, rec *Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sum.Add(rec)
	if len(rows) > 0 && a.rows == nil {
		a.rows = map[string]*RowSum{}
	}
	for _, r := range rows {
		s := a.rows[r.Name]
		if s == nil {
			s = &RowSum{}
			a.rows[r.Name] = s
		}
		s.Add(r, rec.Verdict)
	}
}

// labelMean returns the engine's mean execution of a command label for
// Rows: the interval's engine means (in.EngineMean) where it has them,
// else, under routing, the shards' since start (EngineMeans).
func (a *Analyzer) labelMean(in Input) func(string) (time.Duration, bool) {
	if in.EngineMean != nil {
		return func(label string) (time.Duration, bool) {
			m, _, ok := in.EngineMean(label, 1)
			return m, ok
		}
	}
	means := a.EngineMeans()
	return func(label string) (time.Duration, bool) {
		m, ok := means[lower(label)]
		return m, ok
	}
}

// CommandRow returns the sum since start of command label cmd's rows
// (Rows): its part of the account since start; ok is false when no
// interval had requests of it (or it is left out of the totals).
func (a *Analyzer) CommandRow(cmd string) (s RowSum, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.rows[cmd]; r != nil {
		return *r, true
	}
	return RowSum{}, false
}

// CommandRows returns the sums since start of every command label's rows
// (Rows), by label, read together with the account they add up to (the
// sum of SinceStartSum), so that no interval is in one and not the other.
func (a *Analyzer) CommandRows() (Sum, map[string]RowSum) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rows := make(map[string]RowSum, len(a.rows))
	for name, r := range a.rows {
		rows[name] = *r
	}
	return a.sinceStartSumLocked(), rows
}

// SinceStart returns the verdict since start: the sum of every interval
// so far (Sum), ending now.
func (a *Analyzer) SinceStart() Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sum.Record(time.Now())
}

// SinceStartSum returns a copy of the sums since start.
func (a *Analyzer) SinceStartSum() Sum {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sinceStartSumLocked()
}

// sinceStartSumLocked is SinceStartSum with a.mu held.
func (a *Analyzer) sinceStartSumLocked() Sum {
	s := a.sum
	s.culprits = make(map[string]culprit, len(a.sum.culprits))
	for k, c := range a.sum.culprits {
		s.culprits[k] = c
	}
	return s
}

// Latest returns the verdict of the latest interval, nil before the first.
func (a *Analyzer) Latest() *Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// LatestBusy returns the latest interval with requests, nil before one.
func (a *Analyzer) LatestBusy() *Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.busy
}

// LatestVerdict returns the verdict of the latest interval; ok is false
// before the first.
func (a *Analyzer) LatestVerdict() (split.Verdict, bool) {
	if rec := a.Latest(); rec != nil {
		return rec.Verdict, true
	}
	return split.Verdict{}, false
}

// LoopLagPeriod returns the time between two loop-timing samples for a
// verdict interval: interval/LoopLagSamples, at least LoopLagMin.
func LoopLagPeriod(interval time.Duration) time.Duration {
	return max(interval/LoopLagSamples, LoopLagMin)
}

// LoopLagSamples is how many timing tasks SampleLoops hands each loop per
// verdict interval, and LoopLagMin the shortest period between two: with
// the default 1 s interval, one every 50 ms. Each sample wakes a thread and
// every loop; on a 2-core VM one every 10 ms cost 7 % of a core with no
// traffic and 1.1-1.2x the proxy's CPU per operation under memtier at
// pipeline 16, for a mean that 20 samples per loop and interval already
// give.
const (
	LoopLagSamples = 20
	LoopLagMin     = 10 * time.Millisecond
)

// SampleLoops hands the proxy's loops a timing task every
// LoopLagPeriod(interval) until ctx is done; each task adds its wait to
// the interval's loop-wait sums.
// The times must not depend on the proxy's activity: a Go timer fires at
// the process's next wake-up, which a request or a reply causes, when the
// loop is busy with it, and would find the loops busier than they are. So
// the sampler sleeps in clock_nanosleep(CLOCK_MONOTONIC) on a thread of
// its own, which the kernel wakes on time whatever the proxy does.
func (a *Analyzer) SampleLoops(ctx context.Context) {
	if a.cfg.LoopLag == nil {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	record := func(d time.Duration) {
		a.mu.Lock()
		a.lagSum += d
		a.lagN++
		a.lagTotal++
		a.mu.Unlock()
	}
	ts := unix.NsecToTimespec(int64(LoopLagPeriod(a.cfg.Interval)))
	for ctx.Err() == nil {
		if err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, 0, &ts, nil); err != nil && err != unix.EINTR {
			return // unreachable on Linux: the arguments are valid
		}
		a.cfg.LoopLag(record)
	}
}

// LoopSamples returns how many loop-timing samples were taken since start.
func (a *Analyzer) LoopSamples() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lagTotal
}
