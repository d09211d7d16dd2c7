package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/heat"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
	"github.com/respmeter/respmeter/routing"
)

// startHeatProxy starts a proxy to upstream (mod, if not nil, changes
// its Config further) whose metrics Set carries heat of cfg, and returns
// its address, its Set and the heat.
func startHeatProxy(t *testing.T, upstream string, cfg heat.Config, mod func(*proxy.Config)) (string, *metrics.Set, *heat.Set) {
	t.Helper()
	var h *heat.Set
	p, set := proxytest.StartProxy(t, upstream, func(c *proxy.Config) {
		c.Loops = 2
		if mod != nil {
			mod(c)
		}
		c.Commands = proxy.FetchCommands(*c, c.Logger)
		c.Metrics = metrics.NewSet(c.Loops, c.Commands.Labels())
		cfg.Commands = c.Commands.Labels()
		h = heat.NewSet(c.Loops, cfg)
		c.Metrics.SetHeat(h)
	})
	return p.Addr(), set, h
}

// getJSON fetches path from the admin mux of set and decodes it into v,
// returning the raw body.
func getJSON(t *testing.T, set *metrics.Set, path string, v any) []byte {
	t.Helper()
	srv := httptest.NewServer(metrics.NewAdminMux(set, prometheus.NewRegistry()))
	defer srv.Close()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v: %s", path, resp.StatusCode, err, body)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}
	return body
}

// awaitSlotRequests waits until the slot counters of h hold n requests
// (the proxy records a request after writing its reply).
func awaitSlotRequests(t *testing.T, h *heat.Set, n int64) {
	t.Helper()
	redistest.Eventually(t, 5*time.Second, func() error {
		var got int64
		for _, sl := range h.Slots(nil).Slots {
			got += sl.Requests
		}
		if got != n {
			return fmt.Errorf("%d requests in the slot counters, want %d", got, n)
		}
		return nil
	})
}

// zipfLoad runs n GETs over keys key:0..key:99999 drawn from Zipf(1.1)
// through addr, pipelined, and returns the generator's own counts.
func zipfLoad(t *testing.T, addr string, n int) map[string]int64 {
	t.Helper()
	c := e2eGoRedis(t, addr)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(33, 1))
	z := rand.NewZipf(rng, 1.1, 1, 99_999)
	truth := map[string]int64{}
	for done := 0; done < n; {
		p := c.Pipeline()
		for i := 0; i < 500 && done < n; i++ {
			k := fmt.Sprintf("key:%d", z.Uint64())
			truth[k]++
			p.Get(ctx, k)
			done++
		}
		if _, err := p.Exec(ctx); err != nil && err != redis.Nil {
			t.Fatalf("pipeline: %v", err)
		}
	}
	return truth
}

type kc struct {
	k string
	n int64
}

func topOf(truth map[string]int64, n int) []kc {
	var all []kc
	for k, v := range truth {
		all = append(all, kc{k, v})
	}
	slices.SortFunc(all, func(a, b kc) int {
		if a.n != b.n {
			return int(b.n - a.n)
		}
		return strings.Compare(a.k, b.k)
	})
	return all[:n]
}

// TestHeatZipfTop20 runs a Zipf(1.1) load over 100,000 keys through the
// proxy to a real redis-server and compares the top 20 keys by requests
// with the generator's own counts: with every request sampled the set is
// exactly the true top 20 and every estimate is within its reported error
// of the true count; at the default 1 in 64, every reported key's true
// count is within the reported error of its estimate, and a true top-20 key
// is missing only where its count is within the error of the 20th
// reported estimate.
//
// With every request sampled the error is Space-Saving's bound alone, which
// holds always. Sampled, it adds three standard deviations of the sampling:
// a 99.7 % interval, which one key in a few hundred leaves by chance (a
// run of 20 keys, in about one run in twenty). So there the checks may miss
// their intervals at most twice per run (three misses of 20 to 40 checks at
// up to 0.5 % each come by chance in about one run in a thousand or fewer),
// and never by twice the error.
func TestHeatZipfTop20(t *testing.T) {
	srv := redistest.Start(t)
	const n = 200_000
	for _, sample := range []int{1, 64} {
		t.Run(fmt.Sprintf("sample=%d", sample), func(t *testing.T) {
			addr, set, h := startHeatProxy(t, srv.Addr(), heat.Config{Sample: sample}, nil)
			truth := zipfLoad(t, addr, n)
			awaitSlotRequests(t, h, n)
			var doc heat.Keys
			getJSON(t, set, "/keys?n=20", &doc)
			got := doc.ByRequests
			if len(got) != 20 {
				t.Fatalf("%d keys by requests, want 20", len(got))
			}
			want := topOf(truth, 20)
			inTop := map[string]bool{}
			for _, w := range want {
				inTop[w.k] = true
			}
			// outside checks a deviation dev against the reported error:
			// beyond it is counted (sampled: chance, see above), beyond
			// twice it fails.
			var misses int
			outside := func(dev, err float64, what string) {
				if dev <= err {
					return
				}
				if misses++; sample == 1 || dev > 2*err {
					t.Errorf("%s", what)
				} else {
					t.Logf("outside the 3-sigma interval (%d of at most 2 by chance): %s", misses, what)
				}
			}
			defer func() {
				if misses > 2 {
					t.Errorf("%d checks outside the reported error, more than 2: the error understates the sampling", misses)
				}
			}()
			reported := map[string]bool{}
			for i, k := range got {
				reported[k.Key] = true
				tr := float64(truth[k.Key])
				t.Logf("#%d %s: estimate %.0f ± %.0f, true %.0f (true rank key %s %d)", i+1, k.Key, k.Estimate, k.Error, tr, want[i].k, want[i].n)
				outside(math.Abs(k.Estimate-tr), k.Error,
					fmt.Sprintf("%s: estimate %.0f ± %.0f, true %.0f: outside the reported error", k.Key, k.Estimate, k.Error, tr))
				if k.Rate <= 0 || math.Abs(k.Rate*doc.Seconds-k.Estimate) > 1e-6*k.Estimate+1 {
					t.Errorf("%s: rate %.1f/s over %.2fs does not give estimate %.0f", k.Key, k.Rate, doc.Seconds, k.Estimate)
				}
				if k.Slot != int(routing.Slot([]byte(k.Key))) {
					t.Errorf("%s: slot %d, want %d", k.Key, k.Slot, routing.Slot([]byte(k.Key)))
				}
				if k.Commands["get"] != 1 {
					t.Errorf("%s: command mix %v, want get only", k.Key, k.Commands)
				}
				if !inTop[k.Key] {
					// Only a key whose true count is within the error of
					// the true 20th may stand in for it.
					what := fmt.Sprintf("%s (true %.0f) reported in the top 20; the true 20th has %d, beyond the error %.0f", k.Key, tr, want[19].n, k.Error)
					if sample == 1 {
						t.Errorf("%s", what)
					} else {
						outside(float64(want[19].n)-tr, k.Error, what)
					}
				}
			}
			last := got[19]
			for _, w := range want {
				if reported[w.k] {
					continue
				}
				what := fmt.Sprintf("true top-20 key %s (%d) not reported; 20th reported %.0f ± %.0f", w.k, w.n, last.Estimate, last.Error)
				if sample == 1 {
					t.Errorf("%s", what)
				} else {
					outside(float64(w.n)-last.Estimate, last.Error, what)
				}
			}
		})
	}
}

// TestHeatBigKeysByBytes mixes small keys with three 1 MiB strings and two
// 100,000-member sets, read far less often, and checks that the top 5 by
// bytes are exactly those five, with their reply sizes and the sets'
// element counts, at the default sampling of 1 in 64.
func TestHeatBigKeysByBytes(t *testing.T) {
	srv := redistest.Start(t)
	addr, set, h := startHeatProxy(t, srv.Addr(), heat.Config{}, nil)
	c := e2eGoRedis(t, addr)
	ctx := context.Background()
	big := strings.Repeat("x", 1<<20)
	bigs := []string{"big:str:1", "big:str:2", "big:str:3"}
	for _, k := range bigs {
		if err := c.Set(ctx, k, big, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	sets := []string{"big:set:1", "big:set:2"}
	for _, k := range sets {
		members := make([]any, 0, 1000)
		for i := range 100_000 {
			members = append(members, i)
			if len(members) == cap(members) {
				if err := c.SAdd(ctx, k, members...).Err(); err != nil {
					t.Fatal(err)
				}
				members = members[:0]
			}
		}
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for round := range 10 {
		p := c.Pipeline()
		for range 3000 {
			k := fmt.Sprintf("small:%d", rng.IntN(10_000))
			p.Set(ctx, k, "v", 0)
			p.Get(ctx, k)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if round%2 == 0 {
			for _, k := range bigs {
				if err := c.Get(ctx, k).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range sets {
				if err := c.SMembers(ctx, k).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	awaitSlotRequests(t, h, int64(len(bigs)+2*100+10*6000+5*(len(bigs)+len(sets))))
	var doc heat.Keys
	body := getJSON(t, set, "/keys?n=10", &doc)
	var top []string
	for _, k := range doc.ByBytes[:5] {
		top = append(top, k.Key)
		t.Logf("%s: %.0f ± %.0f bytes, reply p50 %d max %d, elements max %d", k.Key, k.Estimate, k.Error, k.ReplyBytesP50, k.ReplyBytesMax, k.ElementsMax)
		switch {
		case strings.HasPrefix(k.Key, "big:str:"):
			if k.ReplyBytesMax < 1<<20 || k.ReplyBytesMax > 1<<20+16 {
				t.Errorf("%s: largest reply %d bytes, want 1 MiB and its header", k.Key, k.ReplyBytesMax)
			}
		case strings.HasPrefix(k.Key, "big:set:"):
			if k.ElementsMax != 100_000 {
				t.Errorf("%s: %d elements, want 100000", k.Key, k.ElementsMax)
			}
		}
	}
	slices.Sort(top)
	want := append(append([]string{}, bigs...), sets...)
	slices.Sort(want)
	if !slices.Equal(top, want) {
		t.Errorf("top 5 by bytes %v, want %v\n%s", top, want, body)
	}
}

// TestHeatKeyNamesHash checks that with NamesHash no key name reaches
// /keys, /slots or /metrics, and that binary and long key names keep the
// plain documents valid JSON.
func TestHeatKeyNamesHash(t *testing.T) {
	srv := redistest.Start(t)
	secret := "secret-customer-4711"
	binary := "bin\x00\xff\xfe\"<>&\n"
	long := strings.Repeat("L", 100_000)
	for _, names := range []heat.Names{heat.NamesHash, heat.NamesPlain} {
		t.Run(names.String(), func(t *testing.T) {
			addr, set, h := startHeatProxy(t, srv.Addr(), heat.Config{Sample: 1, Names: names}, nil)
			c := e2eGoRedis(t, addr)
			ctx := context.Background()
			for _, k := range []string{secret, binary, long} {
				for range 5 {
					if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			keys := getJSON(t, set, "/keys", nil)
			slots := getJSON(t, set, "/slots", nil)
			reg := prometheus.NewRegistry()
			reg.MustRegister(h.NewCollector(20, set.ShardNames))
			rec := httptest.NewRecorder()
			promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			metricsText := rec.Body.Bytes()
			if !json.Valid(keys) || !json.Valid(slots) {
				t.Fatalf("invalid JSON:\n%s\n%s", keys, slots)
			}
			if len(keys) > 64<<10 {
				t.Errorf("/keys is %d bytes with a 100,000-byte key", len(keys))
			}
			var doc heat.Keys
			_ = json.Unmarshal(keys, &doc)
			if len(doc.ByRequests) != 3 {
				t.Errorf("%d keys by requests, want 3:\n%s", len(doc.ByRequests), keys)
			}
			for _, out := range [][]byte{keys, slots, metricsText} {
				leak := bytes.Contains(out, []byte("secret-customer")) || bytes.Contains(out, []byte("LLLLLLLL")) || bytes.Contains(out, []byte("bin"))
				if names == heat.NamesHash && leak {
					t.Errorf("a key name leaked:\n%s", out)
				}
			}
			if names == heat.NamesPlain && !bytes.Contains(keys, []byte(secret)) {
				t.Errorf("plain names: %s not shown:\n%s", secret, keys)
			}
		})
	}
}

// hotRangeKeys returns a deterministic load: keys key:0..key:19999 read
// once each, and those whose hash slot lies in [1000, 3000) 20 times: one
// hot slot range, inside the first shard of an even 4-shard layout.
func hotRangeKeys() []string {
	var out []string
	for rep := range 20 {
		for i := range 20_000 {
			k := fmt.Sprintf("key:%d", i)
			if s := routing.Slot([]byte(k)); rep == 0 || s >= 1000 && s < 3000 {
				out = append(out, k)
			}
		}
	}
	return out
}

// getAll sends GET for each key, pipelined, choosing the client of each
// key with pick.
func getAll(t *testing.T, keys []string, clients []*redis.Client, pick func(key string) int) {
	t.Helper()
	ctx := context.Background()
	pipes := make([]redis.Pipeliner, len(clients))
	flush := func() {
		for i, p := range pipes {
			if p != nil && p.Len() > 0 {
				if _, err := p.Exec(ctx); err != nil && err != redis.Nil {
					t.Fatal(err)
				}
			}
			pipes[i] = nil
		}
	}
	for n, k := range keys {
		i := pick(k)
		if pipes[i] == nil {
			pipes[i] = clients[i].Pipeline()
		}
		pipes[i].Get(ctx, k)
		if n%500 == 499 {
			flush()
		}
	}
	flush()
}

// TestHeatWhatIf4Shards measures a load with one hot slot range through a
// proxy in front of one engine, predicts each shard's requests under the
// even 4-shard layout from the slot heat, then runs the same load through
// a proxy routing slots (--route slots) over 4 engines in that layout: each
// engine's own GET count (INFO commandstats) is within 5 % of the
// prediction. The proposed balanced layout is then applied by the test's
// own client, each GET sent to the engine owning its key's slot in that
// layout, over 4 fresh engines: the imbalance their commandstats measure
// is lower than the even layout's, and matches the proposal's prediction.
func TestHeatWhatIf4Shards(t *testing.T) {
	keys := hotRangeKeys()
	one := redistest.Start(t)
	addr, set, h := startHeatProxy(t, one.Addr(), heat.Config{}, nil)
	getAll(t, keys, []*redis.Client{e2eGoRedis(t, addr)}, func(string) int { return 0 })
	awaitSlotRequests(t, h, int64(len(keys)))
	var doc heat.Slots
	getJSON(t, set, "/slots", &doc)
	even, err := heat.EvenLayout(4)
	if err != nil {
		t.Fatal(err)
	}
	pred := heat.Predict(doc.Slots, even)

	measured := func(servers []*redistest.Server) []heat.ShardSum {
		var out []heat.ShardSum
		for i, s := range servers {
			out = append(out, heat.ShardSum{Shard: fmt.Sprint(i), Requests: int64(callsOf(t, s)["get"])})
		}
		return out
	}
	var four []*redistest.Server
	var addrs []string
	for range 4 {
		s := redistest.Start(t)
		four = append(four, s)
		addrs = append(addrs, s.Addr())
	}
	raddr, _, _ := startHeatProxy(t, "", heat.Config{}, func(c *proxy.Config) {
		c.Upstream, c.Route, c.Shards = "", proxy.RouteSlots, addrs
	})
	getAll(t, keys, []*redis.Client{e2eGoRedis(t, raddr)}, func(string) int { return 0 })
	got := measured(four)
	for i := range 4 {
		p, m := float64(pred[i].Requests), float64(got[i].Requests)
		t.Logf("even layout shard %d (%v): predicted %0.f, engine counted %0.f", i, even[i], p, m)
		if math.Abs(p-m) > 0.05*m {
			t.Errorf("shard %d: predicted %.0f requests, the engine counted %.0f (more than 5 %% apart)", i, p, m)
		}
	}
	evenImb := heat.ImbalanceOf(got).Requests

	bal := heat.Balance(doc.Slots, 4, "requests")
	owner := map[int]int{}
	for i, rs := range bal {
		for _, r := range rs {
			for x := r.From; x <= r.To; x++ {
				owner[x] = i
			}
		}
	}
	var fresh []*redistest.Server
	var clients []*redis.Client
	for range 4 {
		s := redistest.Start(t)
		fresh = append(fresh, s)
		clients = append(clients, e2eGoRedis(t, s.Addr()))
	}
	getAll(t, keys, clients, func(k string) int { return owner[int(routing.Slot([]byte(k)))] })
	balGot := measured(fresh)
	balImb := heat.ImbalanceOf(balGot).Requests
	predImb := heat.ImbalanceOf(heat.Predict(doc.Slots, bal)).Requests
	t.Logf("even layout: measured imbalance %.3f; proposed %s: predicted %.3f, measured %.3f (%v)", evenImb, bal, predImb, balImb, balGot)
	if balImb >= evenImb || math.Abs(balImb-predImb) > 0.05*predImb {
		t.Errorf("proposed layout: measured imbalance %.3f (predicted %.3f), even layout %.3f", balImb, predImb, evenImb)
	}
}

// slotStats returns the CLUSTER SLOT-STATS fields of every slot node owns
// (Valkey 8.0 on): slot -> field -> value, from RESP2 arrays or RESP3 maps.
func slotStats(t *testing.T, node *redistest.Server) map[int]map[string]int64 {
	t.Helper()
	out := map[int]map[string]int64{}
	rows, _ := node.Do("CLUSTER", "SLOT-STATS", "SLOTSRANGE", 0, routing.NumSlots-1).([]any)
	for _, row := range rows {
		pair, _ := row.([]any)
		if len(pair) != 2 {
			t.Fatalf("CLUSTER SLOT-STATS row %v", row)
		}
		slot, _ := pair[0].(int64)
		fields := map[string]int64{}
		switch f := pair[1].(type) {
		case []any:
			for i := 0; i+1 < len(f); i += 2 {
				name, _ := f[i].(string)
				fields[name], _ = f[i+1].(int64)
			}
		case map[any]any:
			for k, v := range f {
				name, _ := k.(string)
				fields[name], _ = v.(int64)
			}
		}
		out[int(slot)] = fields
	}
	return out
}

// countKeysInSlots returns every slot's key count on node (CLUSTER
// COUNTKEYSINSLOT, Redis 3.0 on; 0 for slots node does not own).
func countKeysInSlots(t *testing.T, node *redistest.Server) map[int]int64 {
	t.Helper()
	ctx := context.Background()
	p := node.Client().Pipeline()
	cmds := make([]*redis.IntCmd, routing.NumSlots)
	for slot := range cmds {
		cmds[slot] = p.ClusterCountKeysInSlot(ctx, slot)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	out := map[int]int64{}
	for slot, c := range cmds {
		if n := c.Val(); n > 0 {
			out[slot] = n
		}
	}
	return out
}

// TestHeatSlotStats sets 30,000 distinct keys once each through a proxy
// routing slots (--route slots --cluster) over a 3-master cluster and
// compares respmeter's per-slot counts with the engines' own: every slot's
// requests equal its key count, and the shards' imbalance equals the ratio
// of the engines' own SET counts (INFO commandstats). On Valkey 8.0 or
// later (RESPMETER_TEST_ENGINE=valkey-server, as .ci/run sets it) the key
// counts come from CLUSTER SLOT-STATS (key-count), with its
// network-bytes-in + network-bytes-out logged beside respmeter's bytes;
// on Redis, from CLUSTER COUNTKEYSINSLOT.
func TestHeatSlotStats(t *testing.T) {
	probe := redistest.Start(t)
	_, engineName := probe.Version()
	valkey := strings.HasPrefix(engineName, "valkey ") && !strings.HasPrefix(engineName, "valkey 7.")
	var extra []string
	if valkey {
		extra = []string{"--cluster-slot-stats-enabled", "yes"}
	}
	cl := redistest.StartClusterWith(t, 3, extra...)
	addr, set, h := startHeatProxy(t, "", heat.Config{}, func(c *proxy.Config) {
		c.Route, c.Cluster = proxy.RouteSlots, cl.Nodes[0].Addr()
	})
	c := e2eGoRedis(t, addr)
	ctx := context.Background()
	const n = 30_000
	for done := 0; done < n; {
		p := c.Pipeline()
		for i := 0; i < 500 && done < n; i++ {
			p.Set(ctx, fmt.Sprintf("user:%d:profile", done), strings.Repeat("v", done%50), 0)
			done++
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	awaitSlotRequests(t, h, n)
	var doc heat.Slots
	getJSON(t, set, "/slots", &doc)
	ours := map[int]heat.Slot{}
	for _, s := range doc.Slots {
		ours[s.Slot] = s
	}
	engine := map[int]map[string]int64{}
	var calls []heat.ShardSum
	for i, node := range cl.Nodes {
		if valkey {
			for slot, f := range slotStats(t, node) {
				engine[slot] = f
			}
		} else {
			for slot, n := range countKeysInSlots(t, node) {
				engine[slot] = map[string]int64{"key-count": n}
			}
		}
		calls = append(calls, heat.ShardSum{Shard: fmt.Sprint(i), Requests: int64(callsOf(t, node)["set"])})
	}
	compared, bytesDiffer := 0, 0
	for slot := range routing.NumSlots {
		f, o := engine[slot], ours[slot]
		if f["key-count"] != o.Requests {
			t.Errorf("slot %d: respmeter counted %d requests, the engine holds %d keys", slot, o.Requests, f["key-count"])
		}
		if eb := f["network-bytes-in"] + f["network-bytes-out"]; valkey && eb != o.Bytes {
			bytesDiffer++
			if bytesDiffer <= 5 {
				t.Logf("slot %d: respmeter counted %d bytes, the engine %d in + %d out", slot, o.Bytes, f["network-bytes-in"], f["network-bytes-out"])
			}
		}
		if o.Requests > 0 {
			compared++
		}
	}
	t.Logf("%s: %d slots compared; bytes differ from SLOT-STATS network bytes in %d slots", engineName, compared, bytesDiffer)
	if compared < 10_000 {
		t.Errorf("only %d slots with keys", compared)
	}
	want := heat.ImbalanceOf(calls).Requests
	t.Logf("imbalance respmeter %.4f, engines' commandstats %.4f (%v)", doc.Imbalance.Requests, want, calls)
	if math.Abs(doc.Imbalance.Requests-want) > 1e-9 {
		t.Errorf("imbalance %.6f, the engines' commandstats give %.6f", doc.Imbalance.Requests, want)
	}
}
