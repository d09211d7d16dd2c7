package verdict

import "github.com/prometheus/client_golang/prometheus"

// Collector returns a prometheus.Collector of the account since start as
// counters, the sums over the verdict's intervals (Sum), so that a rate of
// each over the requests' rate is the mean part per request over any
// window, and the parts add up as the verdict's do:
//
//   - respmeter_verdict_requests_total: the requests the intervals held;
//   - respmeter_verdict_seconds_total{part}: the parts summed over those
//     requests, in seconds: think, path (the network), engine (execution),
//     queue (waiting for the engine's command thread behind the proxy's own
//     requests), other_clients (behind other clients' commands),
//     run_queue (the engine's thread waiting for a CPU), proxy
//     (processing), loop_wait_request and loop_wait_reply (a request or a
//     reply waiting unread for a busy or starved proxy loop).
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
				"the request cycle adds think, proxy and loop_wait_request.", []string{"part"}, nil),
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
	s := c.a.sum
	c.a.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(s.Requests))
	for _, p := range []struct {
		part string
		v    float64
	}{
		{"think", s.think}, {"path", s.path}, {"engine", s.exec},
		{"queue", max(s.wait-s.runq-s.others, 0)}, {"other_clients", s.others}, {"run_queue", s.runq},
		{"proxy", s.proxy}, {"loop_wait_request", max(s.loop-s.loopReply, 0)}, {"loop_wait_reply", s.loopReply},
	} {
		ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, p.v, p.part)
	}
}
