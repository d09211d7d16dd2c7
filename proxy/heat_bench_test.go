package proxy

import (
	"fmt"
	"testing"

	"github.com/respmeter/respmeter/metrics/heat"
)

// heatPair is pair with key and slot heat of one loop sampling one request
// in sample attached (sample 0: heat off), and GETs of nkeys distinct
// keys to send.
func heatPair(tb testing.TB, sample, nkeys int) (*client, *memConn, *link, [][]byte) {
	tb.Helper()
	s, cl, up := pair(tb, true, nil)
	if sample > 0 {
		s.p.cfg.Metrics.SetHeat(heat.NewSet(1, heat.Config{Sample: sample}))
	}
	reqs := make([][]byte, nkeys)
	for i := range reqs {
		k := fmt.Sprintf("user:%08d", i)
		reqs[i] = fmt.Appendf(nil, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(k), k)
	}
	return s, cl, up, reqs
}

// TestHeatHotPathAllocs pins the per-command path with heat on (every
// request sampled, so the top-K summaries take every one, and 100,000
// distinct keys, so they evict all the time) at zero allocations.
func TestHeatHotPathAllocs(t *testing.T) {
	s, cl, up, reqs := heatPair(t, 1, 100_000)
	for i := range 5000 {
		roundTrip(s, cl, up, reqs[i%len(reqs)], getReply)
	}
	i := 0
	allocs := testing.AllocsPerRun(5000, func() {
		roundTrip(s, cl, up, reqs[i%len(reqs)], getReply)
		i++
	})
	if allocs != 0 {
		t.Errorf("%v allocations per command with heat on, want 0", allocs)
	}
	if got := s.p.cfg.Metrics.Heat().Keys(1, nil).ByRequests; len(got) != 1 {
		t.Errorf("no top key recorded: %v", got)
	}
}

// BenchmarkHeat is BenchmarkHotPath's per-command path over 100,000
// distinct keys with heat off, at the default sampling (1 in 64) and with
// every request sampled; cpu-ns/op is the process's CPU time per command
// (getrusage). Run the variants side by side (-count N interleaves them)
// and compare heat-64 with heat-off per pair.
func BenchmarkHeat(b *testing.B) {
	for _, bc := range []struct {
		name   string
		sample int
	}{{"heat-off", 0}, {"heat-64", 64}, {"heat-1", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			s, cl, up, reqs := heatPair(b, bc.sample, 100_000)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			for i := 0; i < b.N; i++ {
				roundTrip(s, cl, up, reqs[i%len(reqs)], getReply)
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
