package proxy

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestInjectDistributions: 20,000 draws of each delay distribution give
// back its percentiles within 5 % (lognormal p50 = median, p99 = median ×
// e^(2.326 σ); Pareto pN = min / (1 - N/100)^(1/α); uniform and normal by
// their quantiles), and the same seed gives the same draws.
func TestInjectDistributions(t *testing.T) {
	const n = 20_000
	ms := float64(time.Millisecond)
	for _, tc := range []struct {
		name string
		d    dist
		pcts map[float64]float64 // percentile -> want (ns)
	}{
		{"fixed", dist{kind: "fixed", a: 2 * ms}, map[float64]float64{50: 2 * ms, 99: 2 * ms}},
		{"uniform", dist{kind: "uniform", a: 1 * ms, b: 3 * ms}, map[float64]float64{10: 1.2 * ms, 50: 2 * ms, 99: 2.98 * ms}},
		{"normal", dist{kind: "normal", a: 5 * ms, b: 1 * ms}, map[float64]float64{50: 5 * ms, 99: 5*ms + 2.326*ms, 10: 5*ms - 1.2816*ms}},
		{"lognormal", dist{kind: "lognormal", a: 1 * ms, s: 0.5}, map[float64]float64{50: 1 * ms, 99: ms * math.Exp(2.326*0.5)}},
		{"pareto", dist{kind: "pareto", a: 1 * ms, s: 2}, map[float64]float64{50: ms / math.Sqrt(0.5), 99: ms / math.Sqrt(0.01)}},
	} {
		r := rand.New(rand.NewPCG(1, 0))
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(tc.d.sample(r))
		}
		slices.Sort(xs)
		for p, want := range tc.pcts {
			got := xs[int(p/100*n)]
			if math.Abs(got-want) > 0.05*want {
				t.Errorf("%s p%v = %.0f ns, want %.0f ± 5 %%", tc.name, p, got, want)
			}
		}
	}
	a, b := rand.New(rand.NewPCG(9, 1)), rand.New(rand.NewPCG(9, 1))
	d := dist{kind: "lognormal", a: float64(time.Millisecond), s: 1}
	for range 100 {
		if d.sample(a) != d.sample(b) {
			t.Fatal("the same seed gave different draws")
		}
	}
}

// BenchmarkInjectHotPath: the per-command cost of fault injection on the
// in-memory pair (GET round trips of key:a, hash slot 244): off (no rule
// file: one branch), and with a rule file whose rules do not touch GET
// (each request is matched against every rule: a command scope, a key
// glob, a slot range, a shard, clients by address and name, the write
// flag and a window not yet open).
func BenchmarkInjectHotPath(b *testing.B) {
	miss, err := ParseInjection("rules.yaml", []byte(`rules:
- name: slow-set
  commands: [SET]
  delay: 1ms
- name: hot
  keys: "hot:*"
  error: "ERR injected"
- name: other-slots
  slots: [245, 16383]
  error: "ERR injected"
- name: other-shard
  shards: ["10.0.0.1:6379"]
  error: "ERR injected"
- name: other-clients
  clients: [{addr: 10.0.0.0/8}, {addr: "192.168.*"}, {name: "worker-*"}]
  error: "ERR injected"
- name: writes
  write: true
  error: "ERR injected"
- name: later
  after: 1h
  error: "ERR injected"
`))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		in   *Injection
	}{{"off", nil}, {"rules-miss", miss}} {
		b.Run(bc.name, func(b *testing.B) {
			s, cl, up := memPair(b, Config{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:1", Measure: true, Inject: bc.in}, nil)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				roundTrip(s, cl, up, getReq, getReply)
			}
		})
	}
}
