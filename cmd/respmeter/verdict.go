package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/respmeter/respmeter/metrics"
	engstats "github.com/respmeter/respmeter/metrics/engine"
	"github.com/respmeter/respmeter/metrics/split"
	"github.com/respmeter/respmeter/metrics/verdict"
)

// analyzer is the verdict (metrics/verdict.Analyzer) with its views: the
// /stats documents and the text tables after the latency table.
type analyzer struct {
	*verdict.Analyzer
	// probeEvery and pollEvery are the configured intervals, for /stats.
	probeEvery, pollEvery time.Duration
}

// newAnalyzer returns the verdict.Analyzer of cfg with its views;
// probeEvery and pollEvery are the configured intervals, for /stats.
func newAnalyzer(cfg verdict.Config, probeEvery, pollEvery time.Duration) *analyzer {
	return &analyzer{Analyzer: verdict.New(cfg), probeEvery: probeEvery, pollEvery: pollEvery}
}

// pollerOf returns v's poller, nil when v or its poller is nil.
func pollerOf(v *verdict.View) *engstats.Poller {
	if v == nil {
		return nil
	}
	return v.Poller
}

// probeOf returns v's probe, nil when v or its probe is nil.
func probeOf(v *verdict.View) *engstats.Probe {
	if v == nil {
		return nil
	}
	return v.Probe
}

// sharesJSON are a verdict's shares of the request cycle, 0..1.
type sharesJSON struct {
	Client float64 `json:"client"`
	Path   float64 `json:"path"`
	Engine float64 `json:"engine"`
	// EngineWait holds RunQueue.
	EngineWait float64 `json:"engine_wait"`
	RunQueue   float64 `json:"run_queue"`
	// Proxy holds LoopWait: the time a request or reply waited unread
	// for a busy or starved loop; and TLS: decrypting TLS clients'
	// requests and encrypting their replies (the tls phase).
	Proxy    float64 `json:"proxy"`
	LoopWait float64 `json:"loop_wait"`
	TLS      float64 `json:"tls"`
	// Injected is the delays of fault injection rules (the injected
	// phase), a share of its own.
	Injected float64 `json:"injected"`
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
	// The account per request in seconds, next to engine_wait_seconds,
	// network_seconds and loop_wait_seconds: think time, the engine's
	// execution (its mean less what the run queue held of it) and the
	// proxy's processing; together they are cycle_seconds.
	ThinkSeconds float64 `json:"think_seconds"`
	ExecSeconds  float64 `json:"engine_exec_seconds"`
	ProxySeconds float64 `json:"proxy_seconds"`
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
	WaitKnown   bool    `json:"wait_known"`
	HostKnown   bool    `json:"host_known"`
	Utilization float64 `json:"engine_utilization"`
	// EventLoopBusy is the share of the poll interval the engine's event
	// loop says it was busy (INFO stats eventloop_duration_sum; Redis >=
	// 7.2, Valkey >= 8), null where the engine does not say.
	EventLoopBusy       *float64 `json:"engine_event_loop_busy"`
	DemandSeconds       float64  `json:"engine_demand_seconds"`
	EngineWaitSeconds   float64  `json:"engine_wait_seconds"`
	RunQueueWaitSeconds float64  `json:"run_queue_wait_seconds"`
	ModelWaitSeconds    float64  `json:"model_wait_seconds"`
	NetworkSeconds      float64  `json:"network_seconds"`
	RTTFloorSeconds     float64  `json:"rtt_floor_seconds"`
	ProbeKnown          bool     `json:"probe_known"`
	ProbeWaitSeconds    float64  `json:"probe_wait_seconds"`
	// The proxy's loop wait per request (split.Verdict.LoopWait, part of
	// the proxy share; LoopWaitKnown false when not measured) and the mean
	// wait of a task handed to a loop (split.Interval.LoopWait).
	LoopWaitKnown       bool    `json:"loop_wait_known"`
	LoopWaitSeconds     float64 `json:"loop_wait_seconds"`
	LoopTaskWaitSeconds float64 `json:"loop_task_wait_seconds"`
	// The proxy's own threads over the interval (/proc/self/task/*/
	// schedstat; ProxyHostKnown): their time on a CPU and runnable but
	// waiting for one, in seconds.
	ProxyHostKnown       bool    `json:"proxy_host_known"`
	ProxyCPUSeconds      float64 `json:"proxy_cpu_seconds"`
	ProxyRunQueueSeconds float64 `json:"proxy_run_queue_seconds"`
	// The wait behind other clients' commands per request (part of
	// engine_wait_seconds) and the command of theirs that kept the engine
	// busiest ("" when none): its share of the interval, its mean and
	// the share of its calls sent through respmeter (0..1).
	OthersWaitSeconds  float64 `json:"others_wait_seconds"`
	Culprit            string  `json:"culprit"`
	CulpritBusy        float64 `json:"culprit_busy"`
	CulpritMeanSeconds float64 `json:"culprit_mean_seconds"`
	CulpritSent        float64 `json:"culprit_sent"`
	// Parts is the account per request in seconds by part
	// (split.PartNames; they add up to cycle_seconds), as
	// respmeter_verdict_seconds_total, the table and the live page name
	// them.
	Parts map[string]float64 `json:"parts"`
	// Next is one line of what to do next about the outcome.
	Next   string `json:"next"`
	String string `json:"string"`
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
	rec, busy := a.Latest(), a.LatestBusy()
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
func newVerdictJSON(rec *verdict.Record) *verdictJSON {
	v := rec.Verdict
	var eventLoop *float64
	if rec.Interval.EventLoopKnown {
		x := rec.Interval.EventLoopBusy
		eventLoop = &x
	}
	return &verdictJSON{
		EventLoopBusy:   eventLoop,
		End:             rec.End,
		IntervalSeconds: rec.Interval.Length.Seconds(),
		Requests:        rec.Interval.Requests,
		CycleSeconds:    v.Cycle.Seconds(),
		Shares: sharesJSON{Client: v.Client, Path: v.Path, Engine: v.Engine, EngineWait: v.Wait, RunQueue: v.RunQueue,
			Proxy: v.Proxy, LoopWait: v.Loop, TLS: v.TLS, Injected: v.Injected},
		ThinkSeconds:         v.Think.Seconds(),
		ExecSeconds:          v.Exec.Seconds(),
		ProxySeconds:         v.ProxyTime.Seconds(),
		Bound:                v.Bound,
		EngineKnown:          v.EngineKnown,
		EngineMeanSeconds:    rec.Interval.EngineMean.Seconds(),
		Little:               v.Little,
		L:                    v.L,
		LambdaW:              v.LambdaW,
		WaitKnown:            v.WaitKnown,
		HostKnown:            rec.Interval.HostKnown,
		Utilization:          v.Utilization,
		DemandSeconds:        rec.Interval.Demand.Seconds(),
		EngineWaitSeconds:    v.EngineWait.Seconds(),
		RunQueueWaitSeconds:  v.RunQueueWait.Seconds(),
		ModelWaitSeconds:     v.ModelWait.Seconds(),
		NetworkSeconds:       v.Network.Seconds(),
		RTTFloorSeconds:      rec.Interval.RTTFloor.Seconds(),
		ProbeKnown:           v.ProbeKnown,
		ProbeWaitSeconds:     v.ProbeWait.Seconds(),
		LoopWaitKnown:        v.LoopWaitKnown,
		LoopWaitSeconds:      v.LoopWait.Seconds(),
		LoopTaskWaitSeconds:  rec.Interval.LoopWait.Seconds(),
		ProxyHostKnown:       rec.Interval.ProxyHostKnown,
		ProxyCPUSeconds:      rec.Interval.ProxyCPU.Seconds(),
		ProxyRunQueueSeconds: rec.Interval.ProxyRunQueue.Seconds(),
		OthersWaitSeconds:    v.OthersWait.Seconds(),
		Culprit:              v.Culprit,
		CulpritBusy:          v.CulpritBusy,
		CulpritMeanSeconds:   v.CulpritMean.Seconds(),
		CulpritSent:          v.CulpritSent,
		Parts:                partsJSON(v.Parts()),
		Next:                 v.Next(),
		String:               v.String(),
	}
}

// partsJSON returns an account's parts (split.Account.Parts) in seconds
// by name.
func partsJSON(parts [len(split.PartNames)]split.Part) map[string]float64 {
	m := make(map[string]float64, len(parts))
	for _, p := range parts {
		m[p.Name] = p.Time.Seconds()
	}
	return m
}

// accountJSON is /stats "account": the verdict since start, the sum of
// every interval (verdict.Analyzer.SinceStart), the same account as the
// exit's table and "account per request" line, the live page's "since
// start" row and respmeter_verdict_seconds_total over
// respmeter_verdict_requests_total.
type accountJSON struct {
	Requests     int64   `json:"requests"`
	CycleSeconds float64 `json:"cycle_seconds"`
	// Parts: the account per request in seconds by part (split.PartNames).
	Parts  map[string]float64 `json:"parts"`
	Shares sharesJSON         `json:"shares"`
	Bound  string             `json:"bound"`
	Next   string             `json:"next"`
	String string             `json:"string"`
	// Commands are the exit table's rows by command label: each
	// command's part of the account (verdict.Rows summed since start),
	// whose parts weighted by their requests add up to Parts.
	Commands map[string]accountCommandJSON `json:"commands"`
}

// accountCommandJSON is one command's part of the account since start:
// its requests, and per request in seconds its mean total and upstream
// times and its parts (split.PartNames).
type accountCommandJSON struct {
	Requests        int64              `json:"requests"`
	TotalSeconds    float64            `json:"total_seconds"`
	UpstreamSeconds float64            `json:"upstream_seconds"`
	Parts           map[string]float64 `json:"parts"`
}

// accountDoc returns /stats "account".
func (a *analyzer) accountDoc() *accountJSON {
	sum, rows := a.CommandRows()
	v := sum.Verdict()
	doc := &accountJSON{
		Requests: sum.Requests, CycleSeconds: v.Cycle.Seconds(), Parts: partsJSON(sum.Account().Parts()),
		Shares: sharesJSON{Client: v.Client, Path: v.Path, Engine: v.Engine, EngineWait: v.Wait, RunQueue: v.RunQueue,
			Proxy: v.Proxy, LoopWait: v.Loop, TLS: v.TLS, Injected: v.Injected},
		Bound: v.Bound, Next: v.Next(), String: v.String(),
		Commands: make(map[string]accountCommandJSON, len(rows)),
	}
	for name, rs := range rows {
		r, _, _, _ := rs.Mean()
		parts := make(map[string]float64, len(r.Parts))
		for i, p := range r.Parts {
			parts[split.PartNames[i]] = p.Seconds()
		}
		doc.Commands[name] = accountCommandJSON{Requests: r.Requests, TotalSeconds: r.Total.Seconds(),
			UpstreamSeconds: r.Upstream.Seconds(), Parts: parts}
	}
	return doc
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
func (a *analyzer) probeDoc(v *verdict.View) *probeJSON {
	p := probeOf(v)
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
	// AvailabilityZone is the engine's (Valkey 9.1 on), omitted when none.
	AvailabilityZone string `json:"availability_zone,omitempty"`
	// SlotMigrations are the atomic slot migrations the engine reported
	// while respmeter watched (engine.Poller.Migrations), omitted when
	// none.
	SlotMigrations []migrationJSON `json:"slot_migrations,omitempty"`
}

// migrationJSON is one entry of an engine's "slot_migrations": a CLUSTER
// MIGRATESLOTS job as that engine reports it (CLUSTER GETSLOTMIGRATIONS,
// Valkey 9.0 on). start and end are the engine's create_time and, once the
// job ended, last_update_time (whole seconds; end null while it runs);
// seen and ended when respmeter's poll first saw it and first found it
// ended.
type migrationJSON struct {
	Name      string     `json:"name"`
	Operation string     `json:"operation"`
	Slots     string     `json:"slots"`
	Source    string     `json:"source_node"`
	Target    string     `json:"target_node"`
	State     string     `json:"state"`
	Start     time.Time  `json:"start"`
	End       *time.Time `json:"end"`
	Seen      time.Time  `json:"seen"`
	Ended     *time.Time `json:"ended"`
}

// newMigrationJSON returns m's entry of "slot_migrations".
func newMigrationJSON(m engstats.Migration) migrationJSON {
	doc := migrationJSON{Name: m.Name, Operation: m.Operation, Slots: m.Slots, Source: m.Source, Target: m.Target,
		State: m.State, Start: m.Start, Seen: m.Seen}
	if !m.Running() {
		end, ended := m.End, m.Ended
		doc.End, doc.Ended = &end, &ended
	}
	return doc
}

// engineDoc returns the stats of v's Poller for /stats, nil when it is
// off (or v is nil).
func (a *analyzer) engineDoc(v *verdict.View) *engineJSON {
	p := pollerOf(v)
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
		Commands:         make(map[string]engineCommandJSON, len(s.Commands)),
		AvailabilityZone: p.Zone(),
	}
	if !s.LastPoll.IsZero() {
		lp := s.LastPoll
		doc.LastPoll = &lp
	}
	for _, m := range p.Migrations() {
		doc.SlotMigrations = append(doc.SlotMigrations, newMigrationJSON(m))
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
// and the means since start of its account per request, in seconds: the
// sum of its intervals with requests (verdict.Sum), upstream over all of
// them; engine, wait, run queue and path (the verdict's network part)
// null when its engine's execution was never known, wait and run queue
// null without the command thread's witnesses; engine_known_requests the
// requests of the intervals in which its execution was known.
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

// shardMeans are one shard's means per request since start (shardMeansOf).
type shardMeans struct {
	requests, engineKnown            int64
	upstream, exec, wait, runq, path time.Duration
	engineOK, waitOK                 bool
}

// shardMeansOf returns v's means since start, from its sum of intervals.
func (a *analyzer) shardMeansOf(v *verdict.View) shardMeans {
	s := a.ShardSum(v)
	acc := s.Account()
	return shardMeans{
		requests: s.Requests, engineKnown: s.EngineKnownRequests(), upstream: s.Upstream(),
		exec: acc.Exec, wait: acc.Wait, runq: acc.RunQueue, path: acc.Path,
		engineOK: s.EngineKnownRequests() > 0, waitOK: acc.WaitKnown,
	}
}

// shardDocs returns /stats "shard_engines": one entry per shard under
// routing, in the order of the analyzer's shards; nil without routing.
func (a *analyzer) shardDocs() []shardEngineJSON {
	views := a.Shards()
	if len(views) == 0 {
		return nil
	}
	docs := make([]shardEngineJSON, 0, len(views))
	for _, v := range views {
		last, _ := a.ShardRecords(v)
		m := a.shardMeansOf(v)
		doc := shardEngineJSON{
			Shard: v.Addr, Probe: a.probeDoc(v), Engine: a.engineDoc(v),
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

// statsExtra returns the keys the proxy adds to metrics' /stats document:
// "engine", "probe" and "verdict", each null when off or not yet known
// (under routing "engine" and "probe" are null: each shard has its own),
// "account" (accountDoc: the verdict since start) and "shard_engines"
// (shardDocs), null without routing.
func (a *analyzer) statsExtra() map[string]any { return a.statsExtraWindow(0) }

// statsExtraWindow is statsExtra for /stats?window=D (0: no window); the
// verdict follows the window (verdictDoc).
func (a *analyzer) statsExtraWindow(window time.Duration) map[string]any {
	return map[string]any{
		"engine":        a.engineDoc(a.Engine()),
		"probe":         a.probeDoc(a.Engine()),
		"verdict":       a.verdictDoc(window),
		"account":       a.accountDoc(),
		"shard_engines": a.shardDocs(),
	}
}

// writeVerdict writes, after the latency table, the "verdict:" line (the
// sum of every interval since start: verdict.Analyzer.SinceStart) with
// what to do next, a line with the verdict of the latest interval that had
// requests, and the "where the time went" table: per command, its part of
// the account since start (verdict.Rows, summed over the intervals: its
// requests, mean total and upstream, and the parts engine, wait (queue,
// other clients and run queue), run queue, path, proxy, loop wait (of
// requests and replies) and injected, in milliseconds; "-" for engine,
// waits or loop wait never measured), then the Totals row, the account
// itself (the sum of its intervals), which is the request-weighted mean of
// the rows above it and from which the verdict's shares are recomputed, as
// they are from the "account" line under it; then the commands left out of
// the account (blocking, pub/sub) with their own times; then the probe's
// mean PING round trip and the mean think time. A command timed before the
// first interval ended has its own times only, as those left out.
func (a *analyzer) writeVerdict(w io.Writer) error {
	sn := a.Set().Sums() // counts, sums and means only: no histogram copies
	engineMeans := a.EngineMeans()
	since := a.SinceStart()
	sum := a.SinceStartSum()
	acc := sum.Account()
	var b strings.Builder
	fmt.Fprintf(&b, "\nverdict: %s\n", since.Verdict)
	if next := since.Verdict.Next(); next != "" {
		fmt.Fprintf(&b, "next: %s\n", next)
	}
	if busy := a.LatestBusy(); busy != nil {
		fmt.Fprintf(&b, "latest interval with requests %s\n", busyLine(busy))
		fmt.Fprintf(&b, "its account per request (ms): %s\n", accountLine(busy.Verdict.Parts()))
	}
	views := a.Shards()
	for _, v := range views {
		if _, busy := a.ShardRecords(v); busy != nil {
			fmt.Fprintf(&b, "shard %s, latest interval with requests to it %s\n", v.Addr, busyLine(busy))
		}
	}

	nameWidth := len("Command")
	for i := range sn.Commands {
		if c := &sn.Commands[i]; c.Observed() {
			nameWidth = max(nameWidth, len(c.Name))
		}
	}
	nameWidth = max(nameWidth, len("Totals"))
	const opsWidth, colWidth = 12, 14
	fmt.Fprintf(&b, "\nWhere the time went: the account since start per command, means in ms; Timed = requests counted;\n")
	fmt.Fprintf(&b, "engine = the engine's execution (INFO commandstats, less what its thread waited for a CPU while running);\n")
	fmt.Fprintf(&b, "wait = engine wait: queue + other_clients + run_queue of the account line (run queue: its thread waiting\n")
	fmt.Fprintf(&b, "for a CPU); loop wait = loop_wait_request + loop_wait_reply (a request or reply waiting unread for a busy\n")
	fmt.Fprintf(&b, "or starved proxy loop); path = upstream - engine - wait - loop_wait_reply (network, kernel); injected =\n")
	fmt.Fprintf(&b, "the delays of fault injection rules (--inject); proxy = proxy + tls of the account line. A request\n")
	fmt.Fprintf(&b, "waits unread (loop_wait_request) before its total starts, so loop wait can exceed total. Totals: the\n")
	fmt.Fprintf(&b, "verdict's account, the sum of its intervals, each column the request-weighted mean of the rows above\n")
	fmt.Fprintf(&b, "it. Under it, the commands left out of the account (blocking, pub/sub) and those timed before the\n")
	fmt.Fprintf(&b, "first interval ended, with their own times.\n")
	cols := fmt.Sprintf("%-*s %*s", nameWidth, "Command", opsWidth, "Timed")
	for _, h := range []string{"total", "upstream", "engine", "wait", "run queue", "path", "proxy", "loop wait", "injected"} {
		cols += fmt.Sprintf(" %*s", colWidth, h+" (ms)")
	}
	b.WriteString(strings.Repeat("-", len(cols)) + "\n" + cols + "\n" + strings.Repeat("-", len(cols)) + "\n")
	ms := func(d time.Duration) string { return fmt.Sprintf(" %*.4f", colWidth, tableMillis(d)) }
	dash := fmt.Sprintf(" %*s", colWidth, "-")
	var rest []int // the Set's commands with no part of the account
	rows := false
	for i := range sn.Commands {
		c := &sn.Commands[i]
		if !c.Observed() {
			continue
		}
		rs, ok := a.CommandRow(c.Name)
		if !ok || i < len(sn.Excluded) && sn.Excluded[i] {
			rest = append(rest, i)
			continue
		}
		rows = true
		r, engineOK, waitOK, loopOK := rs.Mean()
		fmt.Fprintf(&b, "%-*s %*d", nameWidth, c.Name, opsWidth, r.Requests)
		b.WriteString(ms(r.Total) + ms(r.Upstream))
		b.WriteString(accountCols(ms, dash, r.Parts, engineOK, waitOK, loopOK) + "\n")
	}
	if rows && sum.Requests > 0 {
		b.WriteString(strings.Repeat("-", len(cols)) + "\n")
		fmt.Fprintf(&b, "%-*s %*d", nameWidth, "Totals", opsWidth, sum.Requests)
		b.WriteString(ms(since.Interval.Total/time.Duration(sum.Requests)) + ms(sum.Upstream()))
		b.WriteString(accountCols(ms, dash, partTimes(acc.Parts()), acc.EngineKnown, acc.WaitKnown, acc.LoopWaitKnown) + "\n")
	}
	if len(rest) > 0 && rows {
		b.WriteString(strings.Repeat("-", len(cols)) + "\n")
	}
	for _, i := range rest {
		// Their own times: the engine's execution (commandstats) and
		// what is left of upstream beside it.
		c := &sn.Commands[i]
		eng, engKnown := engineMeans[c.Name]
		fmt.Fprintf(&b, "%-*s %*d", nameWidth, c.Name, opsWidth, c.Phases[metrics.PhaseTotal].Count())
		up := c.Phases[metrics.PhaseUpstream].Mean()
		b.WriteString(ms(c.Phases[metrics.PhaseTotal].Mean()) + ms(up))
		if engKnown {
			b.WriteString(ms(eng) + dash + dash + ms(up-eng))
		} else {
			b.WriteString(dash + dash + dash + dash)
		}
		b.WriteString(ms(c.Phases[metrics.PhaseProxy].Mean()) + dash)
		// Per timed command, as the account's: the rule's delays over
		// every request of the command, touched or not.
		if inj := c.Phases[metrics.PhaseInjected]; inj.Count() > 0 {
			b.WriteString(ms(inj.Sum / time.Duration(c.Phases[metrics.PhaseTotal].Count())))
		} else {
			b.WriteString(dash)
		}
		b.WriteString("\n")
	}
	b.WriteString(strings.Repeat("-", len(cols)) + "\n")
	if sum.Requests > 0 {
		fmt.Fprintf(&b, "account per request (ms): %s\n", accountLine(acc.Parts()))
		// A poll as often as the interval misses one now and then (the
		// two clocks drift, a busy host delays a poll); a slower one most
		// of them, which only a faster poll mends.
		if n, of := a.StaleIntervals(); n > 0 && 10*n > of {
			advice := "a poll as often as the interval misses one now and then on a busy host"
			if a.pollEvery > a.Interval() {
				advice = "set --engine-poll at most --hdr-interval"
			}
			fmt.Fprintf(&b, "engine poll: %d of %d intervals had no fresh poll of the engine (their witnesses are the latest poll's): %s\n", n, of, advice)
		}
	}

	switch {
	case len(views) > 0:
		a.writeShards(&b, views)
	case probeOf(a.Engine()) == nil:
		b.WriteString("probe: off (--probe-interval 0)\n")
	default:
		s := a.Engine().Probe.Stats()
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
		fmt.Fprintf(&b, "think: mean %.3f ms over %d gaps between a reply and the next request read (raw gaps: the account moves time a request waited unread to loop_wait_request)\n", millis(sn.Think.Mean()), n)
	} else {
		b.WriteString("think: none recorded\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// accountCols returns the engine, wait, run queue, path, proxy (its tls
// part included), loop wait and injected columns of a "where the time went" row from an
// account's parts (split.PartNames), each formatted by col: the engine's
// when engineOK, the waits when waitOK (the engine's thread's witnesses
// without its execution figures give a wait and no execution), the loop
// wait when loopOK; dash stands for a figure never measured.
func accountCols(col func(time.Duration) string, dash string, p [len(split.PartNames)]time.Duration, engineOK, waitOK, loopOK bool) string {
	exec, queue, others, runq := p[2], p[3], p[4], p[5]
	out := dash
	if engineOK {
		out = col(exec)
	}
	if waitOK {
		out += col(queue+others+runq) + col(runq)
	} else {
		out += dash + dash
	}
	out += col(p[1]) + col(p[6]+p[10]) // proxy: its processing and its tls part
	if loopOK {
		out += col(p[7] + p[8])
	} else {
		out += dash
	}
	return out + col(p[9])
}

// partTimes returns the times of an account's parts (split.PartNames).
func partTimes(parts [len(split.PartNames)]split.Part) [len(split.PartNames)]time.Duration {
	var out [len(split.PartNames)]time.Duration
	for i, p := range parts {
		out[i] = p.Time
	}
	return out
}

// engineCols returns the engine, wait, run queue and path columns of a
// per-shard row, each formatted by col: the engine's only when engineOK,
// the waits only when waitOK too, the path when pathOK; dash stands for a
// figure not known.
func engineCols(col func(time.Duration) string, dash string, exec, wait, runq, path time.Duration, engineOK, waitOK, pathOK bool) string {
	out := dash + dash + dash
	switch {
	case engineOK && waitOK:
		out = col(exec) + col(wait) + col(runq)
	case engineOK:
		out = col(exec) + dash + dash
	}
	if pathOK {
		return out + col(path)
	}
	return out + dash
}

// accountLine formats an account per request, the parts the verdict's
// shares are of (split.Account.Parts, under their names), in ms: "think
// 0.1477 + path 0.0361 + engine 0.0003 + queue 0.0000 + other_clients
// 0.0000 + run_queue 0.0597 + proxy 0.0038 + loop_wait_request 0.1002 +
// loop_wait_reply 0.0207 + injected 0.0000 = cycle 0.3686".
func accountLine(parts [len(split.PartNames)]split.Part) string {
	var b strings.Builder
	var cycle time.Duration
	for i, p := range parts {
		if i > 0 {
			b.WriteString(" + ")
		}
		fmt.Fprintf(&b, "%s %.4f", p.Name, millis(p.Time))
		cycle += p.Time
	}
	fmt.Fprintf(&b, " = cycle %.4f", millis(cycle))
	return b.String()
}

// busyLine formats the verdict of an interval with requests for the
// "latest interval with requests" lines: "(1s, 12 requests, ended 3ms
// ago): cycle …".
func busyLine(rec *verdict.Record) string {
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
func (a *analyzer) writeShards(b *strings.Builder, views []*verdict.View) {
	width := len("Shard")
	for _, v := range views {
		width = max(width, len(shardName(v)))
	}
	const opsWidth, colWidth = 12, 14
	b.WriteString("\nPer shard: means since start in ms of the requests and fan-out sub-requests sent to each; engine =\n")
	b.WriteString("that engine's own execution of the commands the clients sent, weighted by its calls; wait = its\n")
	b.WriteString("engine wait (run queue: waiting for a CPU); path = upstream - engine - wait - the replies' loop wait,\n")
	b.WriteString("over the intervals in which the engine was polled; probe = mean PING round trip to it; bound = its latest\n")
	b.WriteString("interval with requests.\n")
	cols := fmt.Sprintf("%-*s %*s", width, "Shard", opsWidth, "Requests")
	for _, h := range []string{"upstream", "engine", "wait", "run queue", "path", "probe"} {
		cols += fmt.Sprintf(" %*s", colWidth, h+" (ms)")
	}
	cols += "  bound"
	b.WriteString(strings.Repeat("-", len(cols)) + "\n" + cols + "\n" + strings.Repeat("-", len(cols)) + "\n")
	ms := func(d time.Duration) string { return fmt.Sprintf(" %*.4f", colWidth, tableMillis(d)) }
	dash := fmt.Sprintf(" %*s", colWidth, "-")
	for _, v := range views {
		m := a.shardMeansOf(v)
		_, busy := a.ShardRecords(v)
		fmt.Fprintf(b, "%-*s %*d", width, shardName(v), opsWidth, m.requests)
		b.WriteString(ms(m.upstream))
		b.WriteString(engineCols(ms, dash, m.exec, m.wait, m.runq, m.path, m.engineOK, m.waitOK, m.engineOK))
		if p := probeOf(v); p != nil && p.Stats().Count > 0 {
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
	for _, v := range views {
		p := pollerOf(v)
		if p == nil {
			continue
		}
		for _, m := range p.Migrations() {
			b.WriteString(migrationLine(v.Addr, m) + "\n")
		}
	}
}

// migrationLine formats a slot migration a shard's engine reported for
// the lines under the per-shard table: "slot migration on 127.0.0.1:7000:
// EXPORT 0-999 to 5f3c…, success, 17:15:28 to 17:15:29 (the engine's
// clock)".
func migrationLine(addr string, m engstats.Migration) string {
	peer := "to " + m.Target
	if m.Operation == "IMPORT" {
		peer = "from " + m.Source
	}
	when := m.Start.Format(time.TimeOnly) + ", running"
	if !m.Running() {
		when = m.Start.Format(time.TimeOnly) + " to " + m.End.Format(time.TimeOnly)
	}
	return fmt.Sprintf("slot migration on %s: %s %s %s, %s, %s (the engine's clock)", addr, m.Operation, m.Slots, peer, m.State, when)
}

// millis returns d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// tableMillis returns d in milliseconds for a table's 4 decimals: a
// figure that rounds to 0 from below (a part left over from rounding to
// the nanosecond) prints as 0.0000, not -0.0000.
func tableMillis(d time.Duration) float64 {
	if x := millis(d); x <= -0.00005 || x > 0 {
		return x
	}
	return 0
}

// shardName is a shard's row label in the per-shard table: its address,
// and its availability zone in brackets where it has one: the configured
// one (shard_zones), else its engine's own.
func shardName(v *verdict.View) string {
	if v.Zone != "" {
		return v.Addr + " (" + v.Zone + ")"
	}
	if p := pollerOf(v); p != nil && p.Zone() != "" {
		return v.Addr + " (" + p.Zone() + ")"
	}
	return v.Addr
}
