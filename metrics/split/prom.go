package split

import "github.com/prometheus/client_golang/prometheus"

// NewCollector returns a prometheus.Collector that exports, at each scrape,
// the verdict latest returns (ok false: nothing is exported, as before the
// first interval or after one without requests):
//
//   - respmeter_engine_utilization: the engine's command thread's busy
//     share, 0..1 (Verdict.Utilization), only with its witnesses;
//   - respmeter_engine_wait_seconds{part}: mean engine wait per request in
//     seconds, part = queue (waiting for the command thread behind the
//     proxy's own requests), other_clients (behind other clients'
//     commands) or run_queue (the thread waiting for a CPU): the account's
//     parts of those names (Verdict.Parts), only with the witnesses;
//   - respmeter_network_path_seconds: the account's path per request in
//     seconds (upstream − engine execution − engine wait − the replies'
//     loop wait), only when the engine reported its execution time;
//   - respmeter_upstream_probe_wait_seconds: the probe PING's median round
//     trip minus its unloaded baseline, when the probe answered enough;
//   - respmeter_proxy_loop_wait_seconds: mean time per request its request
//     and reply waited unread for a busy proxy loop (Verdict.LoopWait), when
//     the loops were timed.
//
// The engine's own figures (utilization, wait) carry the label engine =
// engine() (engine.Poller.Engine: its run_id), as the poller's series do,
// so that max by (engine) counts an engine once however many proxies
// watch it; engine nil (or "") leaves it out of those two. latest and
// engine are called from the scraping goroutine and must be safe for that.
func NewCollector(latest func() (Verdict, bool), engine func() string) prometheus.Collector {
	return &collector{
		latest: latest,
		engine: engine,
		util: prometheus.NewDesc("respmeter_engine_utilization",
			"Busy share (0..1) of the engine's command thread over the latest engine poll interval: "+
				"max(CPU + run-queue wait, command execution) / interval.", []string{"engine"}, nil),
		wait: prometheus.NewDesc("respmeter_engine_wait_seconds",
			"Mean engine wait per request over the latest verdict interval in seconds, the verdict account's parts: "+
				"queue = waiting for the engine's command thread behind the proxy's own requests (from its utilisation "+
				"and demand, capped by the requests in flight), other_clients = behind other clients' commands, "+
				"run_queue = the thread waiting for a CPU (/proc schedstat).", []string{"part", "engine"}, nil),
		network: prometheus.NewDesc("respmeter_network_path_seconds",
			"Mean network part of the upstream phase per request over the latest verdict interval in seconds, "+
				"the verdict account's path: upstream - engine execution - engine wait - the replies' loop wait.", nil, nil),
		probe: prometheus.NewDesc("respmeter_upstream_probe_wait_seconds",
			"Median PING probe round trip over the latest verdict interval minus its unloaded baseline, in seconds.", nil, nil),
		loop: prometheus.NewDesc("respmeter_proxy_loop_wait_seconds",
			"Mean time per request over the latest verdict interval, in seconds, that its request and reply waited "+
				"unread for a busy proxy event loop (from tasks handed to the loops at fixed times).", nil, nil),
	}
}

type collector struct {
	latest                     func() (Verdict, bool)
	engine                     func() string
	util, wait, network, probe *prometheus.Desc
	loop                       *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.util
	ch <- c.wait
	ch <- c.network
	ch <- c.probe
	ch <- c.loop
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	v, ok := c.latest()
	if !ok || v.Bound == "idle" {
		return
	}
	if v.WaitKnown {
		var engine string
		if c.engine != nil {
			engine = c.engine()
		}
		ch <- prometheus.MustNewConstMetric(c.util, prometheus.GaugeValue, v.Utilization, engine)
		parts := v.Parts()
		for _, i := range [...]int{3, 4, 5} { // queue, other_clients, run_queue
			ch <- prometheus.MustNewConstMetric(c.wait, prometheus.GaugeValue, parts[i].Time.Seconds(), parts[i].Name, engine)
		}
	}
	if v.EngineKnown {
		ch <- prometheus.MustNewConstMetric(c.network, prometheus.GaugeValue, v.Network.Seconds())
	}
	if v.ProbeKnown {
		ch <- prometheus.MustNewConstMetric(c.probe, prometheus.GaugeValue, v.ProbeWait.Seconds())
	}
	if v.LoopWaitKnown {
		ch <- prometheus.MustNewConstMetric(c.loop, prometheus.GaugeValue, v.LoopWait.Seconds())
	}
}
