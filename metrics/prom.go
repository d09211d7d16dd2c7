package metrics

import (
	"iter"
	"math"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// nativeSchema is the resolution of the exported native histograms: bucket
// boundaries are 2^(i/2^nativeSchema) seconds, so schema 3 gives 8 buckets per
// doubling (~9% wide), coarser than the HdrHistograms they come from.
const nativeSchema = 3

// classicBoundsMicros are the upper bounds of the classic histogram buckets,
// in microseconds: 1, 2, 3, 4, 5, 7 µs, then 10 µs .. 10 s in 1-2.5-5 steps
// (25 buckets). The six below 10 µs resolve the proxy's own microseconds
// (proxy and queue phases, typically 1-5 µs, recorded in whole
// microseconds), which all fell below the first bound before; from 10 µs
// up the bounds are unchanged, and so is the interpolation error of
// histogram_quantile there (TestClassicP99Error).
func classicBoundsMicros() []int64 {
	return []int64{
		1, 2, 3, 4, 5, 7, 10, 25, 50, 100, 250, 500, // µs
		1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, // ms
		1_000_000, 2_500_000, 5_000_000, 10_000_000, // s
	}
}

// ClassicBoundsMicros returns the upper bounds, in microseconds, of the
// classic buckets of every respmeter duration histogram (1, 2, 3, 4, 5,
// 7 µs, then 10 µs .. 10 s in 1-2.5-5 steps); the caller owns the slice.
func ClassicBoundsMicros() []int64 { return classicBoundsMicros() }

// ParsePhase returns the phase whose String is name, or false.
func ParsePhase(name string) (Phase, bool) {
	for p := range NumPhases {
		if p.String() == name {
			return p, true
		}
	}
	return 0, false
}

// Export selects what Set.RegisterExport exports: the cardinality budget of
// /metrics. The zero value exports everything, as Register does.
type Export struct {
	// Phases lists the phases whose respmeter_command_duration_seconds and
	// respmeter_shard_command_duration_seconds series are exported; nil or
	// empty means all NumPhases. Each exported (command, phase) costs 28
	// series (25 classic buckets, +Inf, _sum, _count; native buckets ride
	// in the same series).
	Phases []Phase
	// MaxCommands caps the command labels exported: the first MaxCommands
	// commands seen (in the order scrapes first saw them, by command ID
	// within one scrape) keep their own label for the life of the
	// collector, and the counts and durations of every later one are added
	// to command="other" (where unknown commands already are). "other"
	// itself does not count against the cap. 0 means no cap.
	MaxCommands int
}

// batchBounds are the upper bounds of the classic buckets of the batch
// histogram, in commands per upstream write: powers of two, 1 .. 1024.
func batchBounds() []int64 {
	out := make([]int64, 0, 11)
	for b := int64(1); b <= 1024; b *= 2 {
		out = append(out, b)
	}
	return out
}

// Register registers one prometheus.Collector for the Set with reg that
// exports everything: RegisterExport(reg, Export{}).
func (s *Set) Register(reg prometheus.Registerer) error {
	return s.RegisterExport(reg, Export{})
}

// RegisterExport registers one prometheus.Collector for the Set with reg,
// limited by ex (see Export; the zero value limits nothing). At each
// scrape the collector merges the loops (as Snapshot does, but without copying
// the histograms) and exports, in seconds and bytes:
//
//   - respmeter_command_duration_seconds{command,phase}: histogram with
//     classic buckets (1 µs .. 10 s, ClassicBoundsMicros) and native buckets
//     (schema 3) in the same series, only for (command, phase) pairs
//     observed at least once, and only for the phases in ex.Phases;
//   - respmeter_commands_total{command} and
//     respmeter_command_errors_total{command}, for commands counted at least
//     once;
//   - respmeter_think_duration_seconds, histogram as above;
//   - the connection and byte counters (see Counters), including
//     respmeter_client_rejected_connections_total and
//     respmeter_client_evictions_total{reason}, always all three reasons;
//   - per registered shard (Set.Shard; none when no shard is registered):
//     respmeter_shard_commands_total{shard} and
//     respmeter_shard_command_errors_total{shard}, even at 0;
//     respmeter_shard_command_duration_seconds{shard,phase}, histogram as
//     the command one, for (shard, phase) pairs observed at least once; and
//     respmeter_upstream_batch_commands{shard}, histogram of the commands per
//     upstream write (unit-less; classic buckets 1, 2, 4 .. 1024, native
//     schema 3), for shards with at least one write;
//   - the routing counters (see RoutingCounters), always:
//     respmeter_redirects_total{kind} (moved, ask, tryagain),
//     respmeter_pinned_misroutes_total, respmeter_crossslot_replies_total and
//     respmeter_handoffs_total{reason} (pubsub, monitor, blocking,
//     transaction, state, other), and the histogram
//     respmeter_redirect_penalty_seconds.
//
// Buckets are computed from the merged HdrHistograms: each recorded bucket
// counts at its highest equivalent value, so a value lands at most 0.1% above
// where it was observed. The series pair respmeter_client_connections (gauge)
// and respmeter_client_connections_total (counter) clash in OpenMetrics, whose
// counter family drops _total: expose them as Prometheus text or protobuf, as
// NewAdminMux does.
//
// RegisterExport returns reg's error, such as
// prometheus.AlreadyRegisteredError if the Set's collector is already
// registered with reg.
func (s *Set) RegisterExport(reg prometheus.Registerer, ex Export) error {
	return reg.Register(newCollector(s, ex))
}

// collector exports a Set's stats at scrape time.
type collector struct {
	s            *Set
	boundsMicros []int64
	batchBounds  []int64 // commands

	duration, commands, errors, think, tcpRTT                *prometheus.Desc
	clientConns, clientConnsTotal, upstreamConns             *prometheus.Desc
	clientsRejected, clientEvictions                         *prometheus.Desc
	dialErrors, lost, protocolErrors                         *prometheus.Desc
	clientRead, clientWritten, upstreamRead, upstreamWritten *prometheus.Desc

	shardDuration, shardCommands, shardErrors, batch                               *prometheus.Desc
	redirects, redirectPenalty, pinnedMisroutes, crossSlot, handoffs, sharedStalls *prometheus.Desc
	topologyEvents                                                                 *prometheus.Desc
	reorderWait                                                                    *prometheus.Desc

	// The cardinality budget (Export). Collect runs under the Set's merge
	// lock (Set.view), so these need no lock of their own.
	phases      [NumPhases]bool
	maxCommands int
	named       []bool                                   // by command ID: exported under its own label
	nNamed      int                                      // named commands, "other" not counted
	other       [NumPhases]*hdrhistogram.PackedHistogram // scratch: "other" plus the commands over the cap
}

var _ prometheus.Collector = (*collector)(nil)

// NewTopologyEventsDesc returns the description of
// respmeter_topology_events_total with the variable label kind and the
// constant labels given. Two collectors export it: the Set, with the
// constant label shard empty (no shard label once Prometheus stores it),
// the map-wide kinds (TopologyKind); and each shard's engine poller
// (metrics/engine), with none of its own, registered under the constant
// label shard (the engine's address), the atomic slot migration kinds
// slot_migration_started and slot_migration_ended. Both take the
// description from here: a registry accepts one metric from several
// collectors only with the same help and the same constant and variable
// label names.
func NewTopologyEventsDesc(constLabels prometheus.Labels) *prometheus.Desc {
	return prometheus.NewDesc("respmeter_topology_events_total",
		"Changes of the cluster's shard map the proxy saw, by kind: slot_moved (a MOVED reply named a new owner), "+
			"slots_reassigned (a refresh found slots with another owner), masters_changed (a refresh found a master joined or gone), "+
			"all three with shard empty; and by shard (the engine's address) the atomic slot migrations that shard's engine "+
			"listed as source or target (CLUSTER GETSLOTMIGRATIONS): slot_migration_started, slot_migration_ended.",
		[]string{"kind"}, constLabels)
}

func newCollector(s *Set, ex Export) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("respmeter_"+name, help, labels, nil)
	}
	c := &collector{
		s:            s,
		maxCommands:  ex.MaxCommands,
		boundsMicros: classicBoundsMicros(),
		batchBounds:  batchBounds(),
		duration: d("command_duration_seconds",
			"Duration of Redis commands through the proxy in seconds, by phase: "+
				"total = request read from the client to reply written back, "+
				"upstream = request sent to the engine to reply read, proxy = total - upstream, "+
				"service = reply read - max(request sent, previous reply read), queue = upstream - service. "+
				"Recorded in whole microseconds (1us..1h, 3 significant digits).",
			"command", "phase"),
		commands: d("commands_total",
			"Redis commands forwarded by the proxy, timed or not.", "command"),
		errors: d("command_errors_total",
			"Redis commands the engine answered with an error reply.", "command"),
		think: d("think_duration_seconds",
			"Think time of closed-loop clients in seconds: reply written to the next request read. "+
				"Recorded in whole microseconds (1us..1h, 3 significant digits)."),
		reorderWait: d("reorder_wait_seconds",
			"Under hash-slot routing, time in seconds from a command's reply being complete to its "+
				"being written to the client: the wait behind the same client's earlier commands on "+
				"slower shards (head-of-line blocking). Recorded in whole microseconds (1us..1h, 3 significant digits)."),
		tcpRTT: d("tcp_rtt_seconds",
			"Kernel TCP round-trip time estimate (TCP_INFO tcpi_rtt) in seconds, sampled periodically "+
				"on client and upstream sockets, by side.", "side"),
		clientConns:      d("client_connections_open", "Client connections currently open."),
		clientConnsTotal: d("client_connections_total", "Client connections accepted."),
		clientsRejected:  d("client_rejected_connections_total", "Client connections refused because the client limit was reached."),
		clientEvictions: d("client_evictions_total",
			"Clients disconnected for crossing a memory limit, by reason (output_limit, query_limit, other).", "reason"),
		upstreamConns: d("upstream_connections_open", "Upstream (engine) connections currently open."),
		dialErrors:    d("upstream_dial_errors_total", "Failed attempts to connect to the engine."),
		lost: d("upstream_lost_total",
			"Upstream connections closed by the engine or the network while commands were pending."),
		protocolErrors:  d("protocol_errors_total", "Client connections closed for sending malformed input."),
		clientRead:      d("client_read_bytes_total", "Bytes read from clients."),
		clientWritten:   d("client_written_bytes_total", "Bytes written to clients."),
		upstreamRead:    d("upstream_read_bytes_total", "Bytes read from the engine."),
		upstreamWritten: d("upstream_written_bytes_total", "Bytes written to the engine."),

		shardDuration: d("shard_command_duration_seconds",
			"Duration of Redis commands through the proxy in seconds, by upstream shard (its address) and phase, "+
				"with the phases of respmeter_command_duration_seconds. "+
				"Recorded in whole microseconds (1us..1h, 3 significant digits).",
			"shard", "phase"),
		shardCommands: d("shard_commands_total",
			"Redis commands the proxy sent to each upstream shard (its address), timed or not.", "shard"),
		shardErrors: d("shard_command_errors_total",
			"Redis commands an upstream shard (its address) answered with an error reply.", "shard"),
		batch: d("upstream_batch_commands",
			"Commands carried by one write to a shard's upstream connection (effective pipeline depth), "+
				"a unit-less count; recorded with 3 significant digits, above 1048576 as 1048576.",
			"shard"),
		redirects: d("redirects_total",
			"MOVED and ASK redirects the proxy followed and TRYAGAIN replies it retried, by kind (moved, ask, tryagain).", "kind"),
		redirectPenalty: d("redirect_penalty_seconds",
			"Extra time in seconds that commands spent because of a MOVED or ASK redirect. "+
				"Recorded in whole microseconds (1us..1h, 3 significant digits)."),
		pinnedMisroutes: d("pinned_misroutes_total",
			"Commands sent, in pinned routing, to a shard that does not own their key's hash slot."),
		topologyEvents: NewTopologyEventsDesc(prometheus.Labels{"shard": ""}),
		crossSlot: d("crossslot_replies_total",
			"Commands the proxy answered with -CROSSSLOT itself, without sending them upstream."),
		handoffs: d("handoffs_total",
			"Clients moved to a private upstream connection, by reason "+
				"(pubsub, monitor, blocking, transaction, state, other).", "reason"),
		sharedStalls: d("shared_stalls_total",
			"Shared upstream connections taken out of use because their oldest request had no reply "+
				"for 100 ms (a script or CLIENT PAUSE holding them); new requests went to another."),
	}
	for _, p := range ex.Phases {
		c.phases[p] = true
	}
	if len(ex.Phases) == 0 {
		for p := range c.phases {
			c.phases[p] = true
		}
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.duration, c.commands, c.errors, c.think, c.tcpRTT,
		c.clientConns, c.clientConnsTotal, c.upstreamConns,
		c.clientsRejected, c.clientEvictions,
		c.dialErrors, c.lost, c.protocolErrors,
		c.clientRead, c.clientWritten, c.upstreamRead, c.upstreamWritten,
		c.shardDuration, c.shardCommands, c.shardErrors, c.batch,
		c.redirects, c.redirectPenalty, c.pinnedMisroutes, c.crossSlot, c.handoffs, c.reorderWait, c.sharedStalls, c.topologyEvents,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Concurrent Collects are
// serialized with each other and with the Set's other readers.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	_ = c.s.view(func(sn *Snapshot) error {
		c.collectCommands(ch, sn)
		ch <- newHistogramMetric(c.think, c.boundsMicros, sn.Think)
		if sn.ClientRTT.Count() > 0 {
			ch <- newHistogramMetric(c.tcpRTT, c.boundsMicros, sn.ClientRTT, "client")
		}
		if sn.UpstreamRTT.Count() > 0 {
			ch <- newHistogramMetric(c.tcpRTT, c.boundsMicros, sn.UpstreamRTT, "upstream")
		}
		for i := range sn.Shards {
			ss := &sn.Shards[i]
			ch <- prometheus.MustNewConstMetric(c.shardCommands, prometheus.CounterValue, float64(ss.Count), ss.Name)
			ch <- prometheus.MustNewConstMetric(c.shardErrors, prometheus.CounterValue, float64(ss.Errors), ss.Name)
			for p, d := range ss.Phases {
				if c.phases[p] && d.Count() > 0 {
					ch <- newHistogramMetric(c.shardDuration, c.boundsMicros, d, ss.Name, Phase(p).String())
				}
			}
			if ss.Batch.Count() > 0 {
				ch <- newCountsMetric(c.batch, c.batchBounds, ss.Batch, ss.Name)
			}
		}
		ch <- newHistogramMetric(c.redirectPenalty, c.boundsMicros, sn.RedirectPenalty)
		ch <- newHistogramMetric(c.reorderWait, c.boundsMicros, sn.ReorderWait)

		k := sn.Counters
		for _, m := range []struct {
			desc *prometheus.Desc
			typ  prometheus.ValueType
			v    int64
		}{
			{c.clientConns, prometheus.GaugeValue, k.ClientConns},
			{c.clientConnsTotal, prometheus.CounterValue, k.ClientConnsTotal},
			{c.clientsRejected, prometheus.CounterValue, k.ClientsRejected},
			{c.upstreamConns, prometheus.GaugeValue, k.UpstreamConns},
			{c.dialErrors, prometheus.CounterValue, k.UpstreamDialErrors},
			{c.lost, prometheus.CounterValue, k.UpstreamLost},
			{c.protocolErrors, prometheus.CounterValue, k.ProtocolErrors},
			{c.clientRead, prometheus.CounterValue, k.ClientReadBytes},
			{c.clientWritten, prometheus.CounterValue, k.ClientWrittenBytes},
			{c.upstreamRead, prometheus.CounterValue, k.UpstreamReadBytes},
			{c.upstreamWritten, prometheus.CounterValue, k.UpstreamWrittenBytes},
			{c.pinnedMisroutes, prometheus.CounterValue, sn.Routing.PinnedMisroutes},
			{c.crossSlot, prometheus.CounterValue, sn.Routing.CrossSlotReplies},
			{c.sharedStalls, prometheus.CounterValue, sn.Routing.SharedStalls},
		} {
			ch <- prometheus.MustNewConstMetric(m.desc, m.typ, float64(m.v))
		}
		for r, v := range []int64{k.ClientsEvictedOutputLimit, k.ClientsEvictedQueryLimit, k.ClientsEvictedOther} {
			ch <- prometheus.MustNewConstMetric(c.clientEvictions, prometheus.CounterValue, float64(v), evictReason(r).String())
		}
		ch <- prometheus.MustNewConstMetric(c.redirects, prometheus.CounterValue, float64(sn.Routing.RedirectsMoved), "moved")
		ch <- prometheus.MustNewConstMetric(c.redirects, prometheus.CounterValue, float64(sn.Routing.RedirectsAsk), "ask")
		ch <- prometheus.MustNewConstMetric(c.redirects, prometheus.CounterValue, float64(sn.Routing.TryAgainRetries), "tryagain")
		for r, v := range sn.Routing.handoffs() {
			ch <- prometheus.MustNewConstMetric(c.handoffs, prometheus.CounterValue, float64(v), handoffReason(r).String())
		}
		for k, v := range sn.Routing.topologyEvents() {
			ch <- prometheus.MustNewConstMetric(c.topologyEvents, prometheus.CounterValue, float64(v), TopologyKind(k).String())
		}
		return nil
	})
}

// collectCommands exports the per-command series of sn within the budget:
// commands over c.maxCommands are added to "other" (command ID 0, see
// NewSet), phases not in c.phases are left out.
func (c *collector) collectCommands(ch chan<- prometheus.Metric, sn *Snapshot) {
	if len(c.named) < len(sn.Commands) {
		c.named = append(c.named, make([]bool, len(sn.Commands)-len(c.named))...)
	}
	// First pass: admit new commands while the cap allows, and add the
	// others into the scratch "other".
	var other CommandStats
	if len(sn.Commands) > 0 {
		other = sn.Commands[0] // the "other" ID itself
	}
	var otherSums [NumPhases]time.Duration
	spilled := false
	for i := 1; i < len(sn.Commands); i++ {
		cs := &sn.Commands[i]
		if cs.Count == 0 || c.named[i] {
			continue
		}
		if c.maxCommands == 0 || c.nNamed < c.maxCommands {
			c.named[i] = true
			c.nNamed++
			continue
		}
		if !spilled {
			spilled = true
			for p := range c.other {
				if c.other[p] == nil {
					c.other[p] = newHistogram()
				}
				c.other[p].Reset()
				if h := other.Phases[p].sparse; h != nil {
					c.other[p].Merge(h)
				}
				otherSums[p] = other.Phases[p].Sum
			}
		}
		other.Count += cs.Count
		other.Errors += cs.Errors
		for p := range cs.Phases {
			if h := cs.Phases[p].sparse; h != nil {
				c.other[p].Merge(h)
			}
			otherSums[p] += cs.Phases[p].Sum
		}
	}
	if spilled {
		for p := range other.Phases {
			other.Phases[p] = Durations{Sum: otherSums[p], sparse: c.other[p]}
		}
	}
	for i := range sn.Commands {
		cs := &sn.Commands[i]
		switch {
		case i == 0:
			cs = &other
		case !c.named[i]:
			continue
		}
		if cs.Count == 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.commands, prometheus.CounterValue, float64(cs.Count), cs.Name)
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(cs.Errors), cs.Name)
		for p, d := range cs.Phases {
			if c.phases[p] && d.Count() > 0 {
				ch <- newHistogramMetric(c.duration, c.boundsMicros, d, cs.Name, Phase(p).String())
			}
		}
	}
}

// NewDurationsMetric returns a histogram metric in seconds of h, a dense
// histogram of whole microseconds with this package's geometry (1 µs ..
// 1 h, 3 significant digits), whose values sum to sum: classic buckets at
// ClassicBoundsMicros and native buckets of schema 3 in one series, as
// respmeter_command_duration_seconds. labelValues follow desc's variable
// labels. It reads h while building the metric and keeps nothing of it.
func NewDurationsMetric(desc *prometheus.Desc, h *hdrhistogram.Histogram, sum time.Duration, labelValues ...string) prometheus.Metric {
	return newHistogramMetric(desc, classicBoundsMicros(), Durations{Hist: h, Sum: sum}, labelValues...)
}

// NewBucketsMetric returns a histogram metric in seconds of values that
// were bucketed elsewhere (such as an engine's LATENCY HISTOGRAM):
// counts[i] values at most boundsMicros[i] microseconds and above the
// previous bound (boundsMicros ascending, len(counts) == len(boundsMicros)),
// summing to sum seconds. Classic buckets are those bounds; native buckets
// (schema 3) count each bucket at its bound, so they are no finer than the
// source. labelValues follow desc's variable labels.
func NewBucketsMetric(desc *prometheus.Desc, boundsMicros, counts []int64, sum float64, labelValues ...string) prometheus.Metric {
	var count int64
	for _, n := range counts {
		count += n
	}
	buckets := func(yield func(int64, int64) bool) {
		for i, b := range boundsMicros {
			if counts[i] > 0 && !yield(b, counts[i]) {
				return
			}
		}
	}
	return buildHistogramMetricAt(desc, boundsMicros, 1e6, buckets, func(v int64) int64 { return v }, count, sum, labelValues)
}

// histogramMetric is a prometheus.Metric for a histogram built at scrape
// time, carrying classic and native buckets in one series
// (prometheus.NewConstHistogram has classic buckets only).
type histogramMetric struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	h      *dto.Histogram
}

var _ prometheus.Metric = (*histogramMetric)(nil)

// Desc implements prometheus.Metric.
func (m *histogramMetric) Desc() *prometheus.Desc { return m.desc }

// Write implements prometheus.Metric.
func (m *histogramMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	out.Histogram = m.h
	return nil
}

// newHistogramMetric converts d to a Prometheus histogram in seconds with
// classic buckets at boundsMicros (microseconds, ascending) and native
// buckets of nativeSchema. Every bucket HdrHistogram recorded counts at its
// highest equivalent value. labelValues follow desc's variable labels.
func newHistogramMetric(desc *prometheus.Desc, boundsMicros []int64, d Durations, labelValues ...string) *histogramMetric {
	return buildHistogramMetric(desc, boundsMicros, 1e6, histBuckets(d.Hist, d.sparse), d.Count(), d.Sum.Seconds(), labelValues)
}

// newCountsMetric converts c to a Prometheus histogram of unit-less counts
// with classic buckets at bounds (ascending) and native buckets of
// nativeSchema, as newHistogramMetric does for durations.
func newCountsMetric(desc *prometheus.Desc, bounds []int64, c Counts, labelValues ...string) *histogramMetric {
	return buildHistogramMetric(desc, bounds, 1, histBuckets(c.Hist, c.sparse), c.Count(), float64(c.Sum), labelValues)
}

// buildHistogramMetric converts a histogram's non-empty buckets (lowest
// equivalent value, count; ascending), whose values are in units of
// 1/perUnit of the exported unit (1e6 for microseconds exported as seconds,
// 1 for counts), to a Prometheus histogram with classic buckets at bounds
// (in the histogram's units, ascending) and native buckets of nativeSchema;
// each bucket counts at its highest equivalent value. count and sum (in the
// exported unit) are the sample count and sum.
func buildHistogramMetric(desc *prometheus.Desc, bounds []int64, perUnit float64, buckets iter.Seq2[int64, int64],
	count int64, sum float64, labelValues []string,
) *histogramMetric {
	return buildHistogramMetricAt(desc, bounds, perUnit, buckets, highestEquivalent, count, sum, labelValues)
}

// buildHistogramMetricAt is buildHistogramMetric with the value each bucket
// counts at given by at(bucket key) rather than HdrHistogram's highest
// equivalent value.
func buildHistogramMetricAt(desc *prometheus.Desc, bounds []int64, perUnit float64, buckets iter.Seq2[int64, int64],
	at func(int64) int64, count int64, sum float64, labelValues []string,
) *histogramMetric {
	classic := make([]uint64, len(bounds)) // per bucket, not cumulative
	var native nativeBuckets
	if count > 0 {
		j := 0
		for from, n := range buckets {
			to := at(from)
			for j < len(bounds) && bounds[j] < to {
				j++
			}
			if j < len(bounds) {
				classic[j] += uint64(n)
			} // else only in the implicit +Inf bucket
			native.add(nativeKey(float64(to)/perUnit), n)
		}
	}
	h := &dto.Histogram{
		SampleCount:   new(uint64(count)),
		SampleSum:     new(sum),
		Bucket:        make([]*dto.Bucket, len(bounds)),
		Schema:        new(int32(nativeSchema)),
		ZeroThreshold: new(prometheus.DefNativeHistogramZeroThreshold),
		ZeroCount:     new(uint64(0)), // nothing is recorded below 1 µs
		PositiveSpan:  native.spans,
		PositiveDelta: native.deltas,
	}
	var cum uint64
	for i, ub := range bounds {
		cum += classic[i]
		h.Bucket[i] = &dto.Bucket{CumulativeCount: new(cum), UpperBound: new(float64(ub) / perUnit)}
	}
	return &histogramMetric{desc: desc, labels: prometheus.MakeLabelPairs(desc, labelValues), h: h}
}

// nativeKey returns the index k of the native histogram bucket of schema
// nativeSchema holding v > 0 seconds: the bucket (2^((k-1)/8), 2^(k/8)].
// Powers of two map exactly; a value within float rounding of another
// boundary could land in the neighbouring bucket, but no highest equivalent
// value of our histograms comes that close (TestNativeKeyHdrValues).
func nativeKey(v float64) int {
	frac, exp := math.Frexp(v) // v = frac * 2^exp, 0.5 <= frac < 1
	const perDoubling = 1 << nativeSchema
	// log2(2*frac) is in [0, 1): the position of v within its doubling.
	return (exp-1)*perDoubling + int(math.Ceil(math.Log2(2*frac)*perDoubling))
}

// nativeBuckets builds the spans and deltas of a native histogram from
// buckets added in ascending key order, as client_golang's makeBuckets does:
// gaps of up to two empty buckets are filled in rather than starting a span.
type nativeBuckets struct {
	spans  []*dto.BucketSpan
	deltas []int64 // each bucket's count minus the previous bucket's
	next   int     // key after the last bucket added
	last   int64   // count of the last bucket added
}

// add adds count observations to bucket key, which must not be below the
// last key added.
func (b *nativeBuckets) add(key int, count int64) {
	if len(b.spans) > 0 && key == b.next-1 { // same bucket as the last add
		b.deltas[len(b.deltas)-1] += count
		b.last += count
		return
	}
	gap := key - b.next // the first span's offset is its absolute key
	if len(b.spans) == 0 || gap > 2 {
		b.spans = append(b.spans, &dto.BucketSpan{Offset: new(int32(gap)), Length: new(uint32(0))})
	} else {
		for range gap {
			b.push(0)
		}
	}
	b.push(count)
	b.next = key + 1
}

// push appends a bucket holding count to the last span.
func (b *nativeBuckets) push(count int64) {
	*b.spans[len(b.spans)-1].Length++
	b.deltas = append(b.deltas, count-b.last)
	b.last = count
}
