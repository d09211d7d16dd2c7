package verdict

import "github.com/prometheus/client_golang/prometheus"

// Collector returns a prometheus.Collector of the account since start as
// counters, the sums over the verdict's intervals (Sum), so that a rate of
// each over the requests' rate is the mean part per request over any
// window, and the parts add up as the verdict's do:
//
//   - respmeter_verdict_requests_total: the requests the intervals held;
//   - respmeter_verdict_seconds_total{part}: the parts summed over those
//     requests, in seconds (split.Account.Parts: think, path, engine,
//     queue, other_clients, run_queue, proxy, loop_wait_request,
//     loop_wait_reply, injected, tls; Sum.Totals).
//
// upstream = path + engine + queue + other_clients + run_queue +
// loop_wait_reply; the cycle is all of them together. Intervals without
// the engine's execution hold it in path.
func (a *Analyzer) Collector() prometheus.Collector {
	return &collector{
		a: a,
		requests: prometheus.NewDesc("respmeter_verdict_requests_total",
			"Requests of the verdict's intervals since start.", nil, nil),
		seconds: prometheus.NewDesc("respmeter_verdict_seconds_total",
			"The verdict's account since start, summed over its requests, in seconds, by part: "+
				"upstream = path + engine + queue + other_clients + run_queue + loop_wait_reply; "+
				"the request cycle adds think, proxy, loop_wait_request, injected (fault injection rules' delays) and tls (TLS clients' decryption and encryption; proxy is the rest).", []string{"part"}, nil),
	}
}

type collector struct {
	a                 *Analyzer
	requests, seconds *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.seconds
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.a.mu.Lock()
	n, tot := c.a.sum.Requests, c.a.sum.Totals()
	c.a.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(n))
	// The parts of the one account (split.Account.Parts) summed over the
	// requests: each over the requests is the figure /stats, the table and
	// the live page show, and each only grows.
	for _, p := range tot {
		ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, p.Time.Seconds(), p.Name)
	}
}
