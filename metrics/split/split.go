// Package split answers "where did the time go?" for an interval of traffic:
// it divides the average request cycle of closed-loop clients into the time
// spent in the client (think time), in the engine (as the engine itself
// reports it), on the path to the engine (upstream minus engine: network,
// kernel, queueing) and in the proxy, and checks Little's law
// (L = λW: requests in flight = throughput × mean latency) with both sides
// measured.
//
// It is pure arithmetic over sums and counts; the caller gathers them
// (metrics.Snapshot deltas, the engine poller, an in-flight sampler).
package split

import (
	"fmt"
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

// Verdict is the split of the mean request cycle.
type Verdict struct {
	// Cycle is the mean time from one request of a closed-loop client to
	// its next: (think + total) / requests.
	Cycle time.Duration
	// Shares of the cycle, 0..1, summing to 1: Client (think), Path
	// (upstream - engine), Engine, Proxy.
	Client, Path, Engine, Proxy float64
	// EngineKnown is false when the engine reported nothing: then Path
	// holds all of upstream.
	EngineKnown bool
	// Bound names the largest share: "client-bound", "path-bound",
	// "engine-bound" or "proxy-bound"; "idle" with no requests.
	Bound string
	// Little's law: L is the measured mean in flight, LambdaW the product
	// of measured throughput and mean latency; Little is false when L was
	// not sampled.
	L, LambdaW float64
	Little     bool
}

// Verdict computes the split. Engine time per request is capped at the
// upstream time (the engine cannot take longer than the round trip that
// contains it).
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
	parts := [4]float64{
		iv.Think.Seconds() / n, // client
		upstream - engine,      // path
		engine,                 // engine
		iv.Proxy.Seconds() / n, // proxy
	}
	var cycle float64
	for _, p := range parts {
		cycle += max(p, 0)
	}
	if cycle <= 0 {
		return v
	}
	v.Cycle = time.Duration(cycle * float64(time.Second))
	v.Client, v.Path, v.Engine, v.Proxy = parts[0]/cycle, parts[1]/cycle, parts[2]/cycle, parts[3]/cycle
	names := [4]string{"client-bound", "path-bound", "engine-bound", "proxy-bound"}
	best := 0
	for i, p := range parts {
		if p > parts[best] {
			best = i
		}
	}
	v.Bound = names[best]
	if iv.InFlight >= 0 && iv.Length > 0 {
		v.Little = true
		v.L = iv.InFlight
		v.LambdaW = n / iv.Length.Seconds() * (iv.Total.Seconds() / n)
	}
	return v
}

// String formats the verdict on one line, e.g.
// "cycle 412µs: client 61% | path 22% | engine 9% | proxy 8% — client-bound;
// Little: L 3.98 vs λW 4.02".
func (v Verdict) String() string {
	if v.Bound == "idle" {
		return "no requests in the interval"
	}
	var b strings.Builder
	eng := fmt.Sprintf("%.0f%%", 100*v.Engine)
	if !v.EngineKnown {
		eng = "n/a (no engine stats for these commands)"
	}
	fmt.Fprintf(&b, "cycle %v: client %.0f%% | path %.0f%% | engine %s | proxy %.0f%% — %s",
		v.Cycle.Round(time.Microsecond), 100*v.Client, 100*v.Path, eng, 100*v.Proxy, v.Bound)
	if v.Little {
		fmt.Fprintf(&b, "; Little: L %.2f vs λW %.2f", v.L, v.LambdaW)
	}
	return b.String()
}
