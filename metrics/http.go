package metrics

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewAdminMux returns a mux serving GET /metrics, the Prometheus exposition
// of reg (promhttp.HandlerFor), GET /stats, s.StatsHandler, and the live
// page, GET / and GET /live/ (LiveHandler); other paths get 404. The caller
// registers s with reg (s.Register) along with any other collectors.
// OpenMetrics is not offered because respmeter_client_connections and
// respmeter_client_connections_total would clash there (see Set.Register);
// the text and protobuf formats, the latter carrying native histograms, are.
func NewAdminMux(s *Set, reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /stats", s.StatsHandler())
	live := LiveHandler()
	mux.Handle("GET /{$}", live)
	mux.Handle("GET /live/", live)
	if h := s.heat; h != nil { // key and slot heat: see package heat
		mux.Handle("GET /keys", h.KeysHandler(s.ShardNames))
		mux.Handle("GET /slots", h.SlotsHandler(s.ShardNames))
	}
	return mux
}

// StatsHandler returns a handler answering GET (and HEAD) with the Set's stats
// as indented JSON, all durations in seconds:
//
//	{"commands": {"get": {"count": N, "errors": E, "phases": {"total": D, "upstream": D, "proxy": D}}},
//	 "totals": {"count": N, "errors": E, "phases": {...}},
//	 "think": D,
//	 "connections": {"clients": N, "clients_total": N, "clients_rejected": N,
//	                 "clients_evicted_output_limit": N, "clients_evicted_query_limit": N,
//	                 "clients_evicted_other": N, "upstreams": N,
//	                 "upstream_dial_errors": N, "upstream_lost": N, "protocol_errors": N},
//	 "bytes": {"client_read": N, "client_written": N, "upstream_read": N, "upstream_written": N},
//	 "shards": [{"shard": "127.0.0.1:7001", "commands": N, "errors": E,
//	             "total": P, "upstream": P,
//	             "batch": {"count": N, "mean": X, "p50": N, "p99": N}}],
//	 "routing": {"redirects_moved": N, "redirects_ask": N, "tryagain_retries": N, "pinned_misroutes": N,
//	             "crossslot_replies": N, "redirect_penalty": D,
//	             "handoffs": {"pubsub": N, "monitor": N, "blocking": N,
//	                          "transaction": N, "state": N, "other": N}}}
//
// where D is {"count", "mean", "p50", "p90", "p99", "p99.9", "p99.99", "max"}
// and P is {"p50", "p99", "p99.9"}, in seconds like every duration here.
// Commands never counted are left out, as are phases of commands never timed.
// "shards" lists every registered shard (Set.Shard) in index order, an empty
// array when there are none; a batch holds commands per upstream write
// (unit-less, mean exact, percentiles at 3 significant digits).
// Other methods get 405. The handler may serve concurrently with recording.
func (s *Set) StatsHandler() http.Handler { return s.StatsHandlerWith(nil) }

// StatsHandlerWith is StatsHandler with more top-level sections: the keys of
// extra() (called once per request; nil for none) are added to the document,
// each value encoded as JSON. Keys that /stats already has are not replaced.
func (s *Set) StatsHandlerWith(extra func() map[string]any) http.Handler {
	if extra == nil {
		return s.StatsHandlerWindowed(nil, nil)
	}
	return s.StatsHandlerWindowed(nil, func(time.Duration) map[string]any { return extra() })
}

// StatsHandlerWindowed is StatsHandlerWith that also answers
// /stats?window=D (D a Go duration: 10s, 500ms, 1m) from win: "commands",
// "totals" and "shards" then cover only the newest intervals of win that
// cover D (Window.Stats; up to win.Len() intervals), each command and shard
// with a "rate" (commands per second over the window) and the shards
// without "batch", and a "window" section says what was merged:
//
//	"window": {"seconds": S, "intervals": N, "interval_seconds": I,
//	           "start": RFC3339, "end": RFC3339}
//
// The other sections stay cumulative. A bad or non-positive D, or a
// window asked of a nil win, gets 400. extra (nil for none) is called once
// per request with D, or 0 without ?window=, so that its sections can
// follow the window too.
func (s *Set) StatsHandlerWindowed(win *Window, extra func(window time.Duration) map[string]any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		var ws *WindowStats
		var window time.Duration
		if q := r.URL.Query().Get("window"); q != "" {
			d, err := time.ParseDuration(q)
			switch {
			case err != nil || d <= 0:
				http.Error(w, fmt.Sprintf("window=%q: want a positive duration such as 10s", q), http.StatusBadRequest)
				return
			case win == nil:
				http.Error(w, "window: no intervals are kept here", http.StatusBadRequest)
				return
			}
			ws, window = win.Stats(d), d
		}
		var interval time.Duration
		if win != nil {
			interval = win.Interval()
		}
		var ex func() map[string]any
		if extra != nil {
			ex = func() map[string]any { return extra(window) }
		}
		doc := s.statsDoc(ws, interval, ex)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if r.Method == http.MethodHead {
			return
		}
		_ = writeIndented(w, doc) // only fails when the client has gone
	})
}

// WriteStats writes the /stats document (StatsHandlerWith's, cumulative)
// to w as indented JSON, with the sections of extra (nil for none) added
// as there. It returns w's error. It may be called concurrently with
// recording and with the handlers.
func (s *Set) WriteStats(w io.Writer, extra func() map[string]any) error {
	return writeIndented(w, s.statsDoc(nil, 0, extra))
}

// statsDoc builds the /stats document: cumulative, or over ws (of a
// Window of intervals of the given length) when ws is not nil, plus the
// sections of extra.
func (s *Set) statsDoc(ws *WindowStats, interval time.Duration, extra func() map[string]any) any {
	var stats statsJSON
	_ = s.view(func(sn *Snapshot) error {
		stats = newStatsJSON(sn)
		return nil
	})
	if ws != nil {
		stats.setWindow(ws, interval)
	}
	if extra == nil {
		return stats
	}
	m := map[string]any{
		"commands": stats.Commands, "totals": stats.Totals, "think": stats.Think,
		"tcp_rtt": stats.TCPRTT, "connections": stats.Connections, "bytes": stats.Bytes,
		"shards": stats.Shards, "routing": stats.Routing,
	}
	if stats.Window != nil {
		m["window"] = stats.Window
	}
	for k, v := range extra() {
		if _, taken := m[k]; !taken {
			m[k] = v
		}
	}
	return m
}

// writeIndented writes doc to w as JSON indented by two spaces.
func writeIndented(w io.Writer, doc any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// setWindow replaces the cumulative commands, totals and shards of doc with
// those of ws and adds its "window" section.
func (doc *statsJSON) setWindow(ws *WindowStats, interval time.Duration) {
	sn, secs := ws.Snapshot, ws.Seconds()
	rate := func(n int64) *float64 {
		r := 0.0
		if secs > 0 {
			r = float64(n) / secs
		}
		return &r
	}
	doc.Window = &windowJSON{
		Seconds: secs, Intervals: ws.Intervals, IntervalSeconds: interval.Seconds(),
		Start: ws.Start.UTC().Format(time.RFC3339Nano), End: ws.End.UTC().Format(time.RFC3339Nano),
	}
	doc.Commands = make(map[string]commandJSON)
	for i := range sn.Commands {
		if c := &sn.Commands[i]; c.Count > 0 {
			cj := newCommandJSON(c)
			cj.Rate = rate(c.Count)
			doc.Commands[c.Name] = cj
		}
	}
	totals := sn.Totals()
	doc.Totals = newCommandJSON(&totals)
	doc.Totals.Rate = rate(totals.Count)
	doc.Shards = make([]shardJSON, 0, len(sn.Shards))
	for i := range sn.Shards {
		sj := newShardJSON(&sn.Shards[i])
		sj.Rate = rate(sj.Commands)
		doc.Shards = append(doc.Shards, sj)
	}
}

// windowJSON is the "window" section of /stats?window=D.
type windowJSON struct {
	Seconds         float64 `json:"seconds"`
	Intervals       int     `json:"intervals"`
	IntervalSeconds float64 `json:"interval_seconds"`
	Start           string  `json:"start"`
	End             string  `json:"end"`
}

// statsJSON is the /stats document. Maps are encoded with sorted keys, so the
// output is deterministic.
type statsJSON struct {
	Commands    map[string]commandJSON   `json:"commands"`
	Totals      commandJSON              `json:"totals"`
	Think       durationsJSON            `json:"think"`
	TCPRTT      map[string]durationsJSON `json:"tcp_rtt"`
	Connections connectionsJSON          `json:"connections"`
	Bytes       bytesJSON                `json:"bytes"`
	Shards      []shardJSON              `json:"shards"`
	Routing     routingJSON              `json:"routing"`
	Window      *windowJSON              `json:"window,omitempty"`
}

// shardJSON is one entry of "shards".
type shardJSON struct {
	Shard    string         `json:"shard"`
	Commands int64          `json:"commands"`
	Errors   int64          `json:"errors"`
	Rate     *float64       `json:"rate,omitempty"`
	Total    percentileJSON `json:"total"`
	Upstream percentileJSON `json:"upstream"`
	Batch    *batchJSON     `json:"batch,omitempty"`
}

// percentileJSON is a short summary of a Durations, in seconds.
type percentileJSON struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99.9"`
}

// batchJSON summarizes a shard's commands per upstream write.
type batchJSON struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   int64   `json:"p50"`
	P99   int64   `json:"p99"`
}

type routingJSON struct {
	RedirectsMoved   int64            `json:"redirects_moved"`
	RedirectsAsk     int64            `json:"redirects_ask"`
	TryAgainRetries  int64            `json:"tryagain_retries"`
	PinnedMisroutes  int64            `json:"pinned_misroutes"`
	CrossSlotReplies int64            `json:"crossslot_replies"`
	SharedStalls     int64            `json:"shared_stalls"`
	RedirectPenalty  durationsJSON    `json:"redirect_penalty"`
	ReorderWait      durationsJSON    `json:"reorder_wait"`
	Handoffs         map[string]int64 `json:"handoffs"`
	TopologyEvents   map[string]int64 `json:"topology_events"`
}

type commandJSON struct {
	Count  int64                    `json:"count"`
	Errors int64                    `json:"errors"`
	Rate   *float64                 `json:"rate,omitempty"`
	Phases map[string]durationsJSON `json:"phases"`
}

// durationsJSON summarizes a Durations in seconds.
type durationsJSON struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99.9"`
	P9999 float64 `json:"p99.99"`
	Max   float64 `json:"max"`
}

type connectionsJSON struct {
	Clients            int64 `json:"clients"`
	ClientsTotal       int64 `json:"clients_total"`
	ClientsRejected    int64 `json:"clients_rejected"`
	EvictedOutputLimit int64 `json:"clients_evicted_output_limit"`
	EvictedQueryLimit  int64 `json:"clients_evicted_query_limit"`
	EvictedOther       int64 `json:"clients_evicted_other"`
	Upstreams          int64 `json:"upstreams"`
	UpstreamDialErrors int64 `json:"upstream_dial_errors"`
	UpstreamLost       int64 `json:"upstream_lost"`
	ProtocolErrors     int64 `json:"protocol_errors"`
}

type bytesJSON struct {
	ClientRead      int64 `json:"client_read"`
	ClientWritten   int64 `json:"client_written"`
	UpstreamRead    int64 `json:"upstream_read"`
	UpstreamWritten int64 `json:"upstream_written"`
}

func newStatsJSON(sn *Snapshot) statsJSON {
	doc := statsJSON{
		Commands: make(map[string]commandJSON),
		Think:    newDurationsJSON(sn.Think),
		TCPRTT: map[string]durationsJSON{
			"client":   newDurationsJSON(sn.ClientRTT),
			"upstream": newDurationsJSON(sn.UpstreamRTT),
		},
		Connections: connectionsJSON{
			Clients:            sn.Counters.ClientConns,
			ClientsTotal:       sn.Counters.ClientConnsTotal,
			ClientsRejected:    sn.Counters.ClientsRejected,
			EvictedOutputLimit: sn.Counters.ClientsEvictedOutputLimit,
			EvictedQueryLimit:  sn.Counters.ClientsEvictedQueryLimit,
			EvictedOther:       sn.Counters.ClientsEvictedOther,
			Upstreams:          sn.Counters.UpstreamConns,
			UpstreamDialErrors: sn.Counters.UpstreamDialErrors,
			UpstreamLost:       sn.Counters.UpstreamLost,
			ProtocolErrors:     sn.Counters.ProtocolErrors,
		},
		Bytes: bytesJSON{
			ClientRead:      sn.Counters.ClientReadBytes,
			ClientWritten:   sn.Counters.ClientWrittenBytes,
			UpstreamRead:    sn.Counters.UpstreamReadBytes,
			UpstreamWritten: sn.Counters.UpstreamWrittenBytes,
		},
		Shards: make([]shardJSON, 0, len(sn.Shards)),
		Routing: routingJSON{
			RedirectsMoved:   sn.Routing.RedirectsMoved,
			RedirectsAsk:     sn.Routing.RedirectsAsk,
			TryAgainRetries:  sn.Routing.TryAgainRetries,
			PinnedMisroutes:  sn.Routing.PinnedMisroutes,
			CrossSlotReplies: sn.Routing.CrossSlotReplies,
			SharedStalls:     sn.Routing.SharedStalls,
			RedirectPenalty:  newDurationsJSON(sn.RedirectPenalty),
			ReorderWait:      newDurationsJSON(sn.ReorderWait),
			Handoffs:         make(map[string]int64, numHandoffReasons),
			TopologyEvents:   make(map[string]int64, numTopologyKinds),
		},
	}
	for k, v := range sn.Routing.topologyEvents() {
		doc.Routing.TopologyEvents[TopologyKind(k).String()] = v
	}
	for r, v := range sn.Routing.handoffs() {
		doc.Routing.Handoffs[handoffReason(r).String()] = v
	}
	for i := range sn.Shards {
		ss := &sn.Shards[i]
		sj := newShardJSON(ss)
		sj.Batch = &batchJSON{
			Count: ss.Batch.Count(),
			Mean:  ss.Batch.Mean(),
			P50:   ss.Batch.Percentile(50),
			P99:   ss.Batch.Percentile(99),
		}
		doc.Shards = append(doc.Shards, sj)
	}
	for i := range sn.Commands {
		if c := &sn.Commands[i]; c.Count > 0 {
			doc.Commands[c.Name] = newCommandJSON(c)
		}
	}
	totals := sn.Totals()
	doc.Totals = newCommandJSON(&totals)
	return doc
}

// newShardJSON returns ss's entry of "shards", without rate and batch.
func newShardJSON(ss *ShardStats) shardJSON {
	return shardJSON{
		Shard:    ss.Name,
		Commands: ss.Count,
		Errors:   ss.Errors,
		Total:    newPercentileJSON(ss.Phases[PhaseTotal]),
		Upstream: newPercentileJSON(ss.Phases[PhaseUpstream]),
	}
}

func newCommandJSON(c *CommandStats) commandJSON {
	out := commandJSON{Count: c.Count, Errors: c.Errors, Phases: make(map[string]durationsJSON)}
	for p, d := range c.Phases {
		if d.Count() > 0 {
			out.Phases[Phase(p).String()] = newDurationsJSON(d)
		}
	}
	return out
}

func newDurationsJSON(d Durations) durationsJSON {
	sec := func(pct float64) float64 { return d.Percentile(pct).Seconds() }
	return durationsJSON{
		Count: d.Count(),
		Mean:  d.Mean().Seconds(),
		P50:   sec(50),
		P90:   sec(90),
		P99:   sec(99),
		P999:  sec(99.9),
		P9999: sec(99.99),
		Max:   d.Max().Seconds(),
	}
}

func newPercentileJSON(d Durations) percentileJSON {
	return percentileJSON{
		P50:  d.Percentile(50).Seconds(),
		P99:  d.Percentile(99).Seconds(),
		P999: d.Percentile(99.9).Seconds(),
	}
}
