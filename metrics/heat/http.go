package heat

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultTop is the number of keys of each ranking /keys lists unless
// ?n= asks for another (1..Capacity).
const DefaultTop = 50

// KeysHandler returns a handler answering GET with the Keys document as
// indented JSON: the top ?n= keys (default DefaultTop, at most the
// summaries' capacity) of each ranking. shardNames gives the shard labels
// by index (metrics.Set.ShardNames). Keys are escaped, hashed or rolled up
// per Config.Names, and cut to MaxKeyBytes, so binary or huge key names
// keep the document valid and small.
func (s *Set) KeysHandler(shardNames func() []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := DefaultTop
		if v := r.URL.Query().Get("n"); v != "" {
			x, err := strconv.Atoi(v)
			if err != nil || x < 1 {
				http.Error(w, "n: want a positive integer", http.StatusBadRequest)
				return
			}
			n = min(x, s.cfg.Capacity)
		}
		writeJSON(w, s.Keys(n, shardNames()))
	})
}

// SlotsHandler returns a handler answering GET with the Slots document as
// indented JSON: every slot with requests, the shards' sums and their
// imbalance.
func (s *Set) SlotsHandler(shardNames func() []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, s.Slots(shardNames()))
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Collector exports the top keys of each ranking and the shards'
// imbalance to Prometheus, with a bounded label set: at most top keys per
// ranking (never the full key list), labelled by their shown name.
//
//	respmeter_heat_key_requests{key}        estimated requests since start
//	respmeter_heat_key_bytes{key}           estimated request+reply bytes since start
//	respmeter_heat_key_engine_seconds{key}  estimated engine time since start
//	respmeter_heat_shard_imbalance{by}      max over mean of the shards' sums (requests, bytes, engine)
//
// Key estimates are gauges: a key may leave the top list, and its
// estimate carries the error /keys reports.
type Collector struct {
	s          *Set
	top        int
	shardNames func() []string
	req, byt   *prometheus.Desc
	eng, imb   *prometheus.Desc
}

// NewCollector returns s's collector exporting top keys per ranking (0:
// only the imbalance).
func (s *Set) NewCollector(top int, shardNames func() []string) *Collector {
	return &Collector{
		s: s, top: top, shardNames: shardNames,
		req: prometheus.NewDesc("respmeter_heat_key_requests", "Estimated requests to a top key since start: an unbiased estimate from 1 request in --heat-sample, kept in a Space-Saving summary (/keys gives the error).", []string{"key"}, nil),
		byt: prometheus.NewDesc("respmeter_heat_key_bytes", "Estimated request plus reply bytes of a top key since start: an unbiased estimate by threshold sampling (/keys gives the error).", []string{"key"}, nil),
		eng: prometheus.NewDesc("respmeter_heat_key_engine_seconds", "Estimated engine (service) time of a top key since start, in seconds: an unbiased estimate by threshold sampling (/keys gives the error).", []string{"key"}, nil),
		imb: prometheus.NewDesc("respmeter_heat_shard_imbalance", "Max over mean of the shards' exact per-slot sums (1 is balanced).", []string{"by"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.req
	ch <- c.byt
	ch <- c.eng
	ch <- c.imb
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	names := c.shardNames()
	if c.top > 0 {
		k := c.s.Keys(c.top, names)
		for _, l := range []struct {
			d    *prometheus.Desc
			keys []Key
		}{{c.req, k.ByRequests}, {c.byt, k.ByBytes}, {c.eng, k.ByEngineTime}} {
			seen := map[string]bool{} // patterns and cut keys may show alike
			for _, key := range l.keys {
				if seen[key.Key] {
					continue
				}
				seen[key.Key] = true
				ch <- prometheus.MustNewConstMetric(l.d, prometheus.GaugeValue, key.Estimate, key.Key)
			}
		}
	}
	im := c.s.Slots(names).Imbalance
	ch <- prometheus.MustNewConstMetric(c.imb, prometheus.GaugeValue, im.Requests, "requests")
	ch <- prometheus.MustNewConstMetric(c.imb, prometheus.GaugeValue, im.Bytes, "bytes")
	ch <- prometheus.MustNewConstMetric(c.imb, prometheus.GaugeValue, im.Engine, "engine")
}
