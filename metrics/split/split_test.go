package split

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/respmeter/respmeter/metrics"
)

func TestVerdict(t *testing.T) {
	const us = time.Microsecond
	for _, tc := range []struct {
		name  string
		iv    Interval
		bound string
		cycle time.Duration // 0: not checked
		want  string
		// With the engine thread's witnesses (iv.BusyKnown): the engine
		// wait, its run-queue part and the network path per request.
		wait, runq, path time.Duration
	}{
		{
			name: "client-bound",
			// 100 requests: total 100µs each (upstream 80, proxy 20), think 300µs each, engine 10µs.
			iv: Interval{Length: time.Second, Requests: 100, Total: 10000 * us, Upstream: 8000 * us,
				Proxy: 2000 * us, Think: 30000 * us, ThinkCount: 100, EngineMean: 10 * us, InFlight: 0.01},
			bound: "client-bound", cycle: 400 * us,
			want: "cycle 400µs: client 75% | path 18% | engine 2% | proxy 5% — client-bound; Little: L 0.01 vs λW 0.01",
		},
		{
			name: "engine-bound",
			iv: Interval{Length: time.Second, Requests: 10, Total: 60000 * us, Upstream: 55000 * us,
				Proxy: 5000 * us, EngineMean: 5000 * us, InFlight: -1},
			bound: "engine-bound", cycle: 6000 * us,
		},
		{
			name:  "engine unknown",
			iv:    Interval{Requests: 1, Total: 100 * us, Upstream: 90 * us, Proxy: 10 * us, InFlight: -1},
			bound: "path-bound", cycle: 100 * us,
			want: "cycle 100µs: client 0% | path 90% | engine n/a (no engine stats for these commands) | proxy 10% — path-bound",
		},
		{
			name:  "engine capped at upstream",
			iv:    Interval{Requests: 1, Total: 100 * us, Upstream: 90 * us, Proxy: 10 * us, EngineMean: time.Second, InFlight: -1},
			bound: "engine-bound", cycle: 100 * us,
		},
		{name: "idle", iv: Interval{}, bound: "idle", want: "no requests in the interval"},
		{
			// 200 closed-loop connections through a proxy loop that never
			// idles: a task handed to it waits 19 ms, as does each request
			// unread in its client socket (booked as think: 20 ms) and each
			// reply unread in its upstream socket (booked as path: 20 ms).
			name: "proxy saturated",
			iv: Interval{Length: time.Second, Requests: 5000, Total: 5000 * 20100 * us, Upstream: 5000 * 20 * time.Millisecond,
				Proxy: 5000 * 100 * us, Think: 5000 * 20 * time.Millisecond, ThinkCount: 5000, EngineMean: 2 * us, InFlight: 100.5,
				LoopWait: 19 * time.Millisecond, LoopWaitKnown: true},
			bound: "proxy-saturated", cycle: 40100 * us,
			want: "cycle 40.1ms: client 2% | path 2% | engine 0% | proxy 95% (loop wait 95%) — proxy-saturated; Little: L 100.50 vs λW 100.50",
		},
		{
			// The same loop wait with 2 ms each way on the network: what
			// the loop kept a reply unread comes out of the path, which
			// still holds most of the cycle.
			name: "path with loop wait",
			iv: Interval{Length: time.Second, Requests: 200, Total: 200 * 4600 * us, Upstream: 200 * 4500 * us,
				Proxy: 200 * 100 * us, EngineMean: 2 * us, InFlight: 0.92, LoopWait: 500 * us, LoopWaitKnown: true},
			bound: "path-bound", cycle: 4600 * us,
			want: "cycle 4.6ms: client 0% | path 87% | engine 0% | proxy 13% (loop wait 11%) — path-bound; Little: L 0.92 vs λW 0.92",
		},
		{
			// The same, one shard of several under routing, whose fastest
			// shard's path held only 100 µs above its floor: the replies of
			// every shard wait for the same loops, so no more than that
			// comes out of this shard's path (4.4 ms of its 4.5 stay).
			name: "shard path with a capped loop wait",
			iv: Interval{Length: time.Second, Requests: 200, Total: 200 * 4600 * us, Upstream: 200 * 4500 * us,
				Proxy: 200 * 100 * us, EngineMean: 2 * us, InFlight: -1, LoopWait: 500 * us, LoopWaitKnown: true,
				LoopPathCap: 100 * us, LoopPathCapped: true},
			bound: "path-bound", cycle: 4600 * us,
			want: "cycle 4.6ms: client 0% | path 96% | engine 0% | proxy 4% (loop wait 2%) — path-bound",
		},
		{
			// 10 closed-loop clients of 2 ms commands: 500 requests/s, 20 ms
			// upstream each, the thread saturated.
			name: "saturated",
			iv: Interval{Length: time.Second, Requests: 500, Total: 500 * 20200 * time.Microsecond, Upstream: 500 * 20 * time.Millisecond,
				Proxy: 500 * 200 * time.Microsecond, EngineMean: 2 * time.Millisecond, InFlight: 10.1,
				Utilization: 1, Demand: 2 * time.Millisecond, BusyKnown: true, RTTFloor: 50 * time.Microsecond},
			bound: "engine-saturated", wait: 17950 * time.Microsecond, path: 50 * time.Microsecond,
		},
		{
			// The same on an engine that counts its event loop's busy time
			// (INFO stats eventloop_duration_sum): the verdict names it.
			name: "saturated, event loop counted",
			iv: Interval{Length: time.Second, Requests: 500, Total: 500 * 20200 * time.Microsecond, Upstream: 500 * 20 * time.Millisecond,
				Proxy: 500 * 200 * time.Microsecond, EngineMean: 2 * time.Millisecond, InFlight: 10.1,
				Utilization: 1, Demand: 2 * time.Millisecond, BusyKnown: true, RTTFloor: 50 * time.Microsecond,
				EventLoopBusy: 0.97, EventLoopKnown: true},
			bound: "engine-saturated", wait: 17950 * time.Microsecond, path: 50 * time.Microsecond,
			want: "cycle 20.2ms: client 0% | path 0% | engine 10% | engine wait 89% | proxy 1% — engine-saturated; " +
				"engine thread 100% busy (event loop 97% by the engine's own count); Little: L 10.10 vs λW 10.10",
		},
		{
			// One client through a 4 ms round-trip network: the engine idle.
			name: "network",
			iv: Interval{Length: time.Second, Requests: 240, Total: 240 * 4100 * time.Microsecond, Upstream: 240 * 4 * time.Millisecond,
				Proxy: 240 * 100 * time.Microsecond, EngineMean: 2 * time.Microsecond, InFlight: 1,
				Utilization: 0.001, Demand: 4 * time.Microsecond, BusyKnown: true, HostKnown: true},
			bound: "path-bound", path: 3998 * time.Microsecond,
		},
		{
			// One client; the engine waits 3 ms per command for a CPU.
			name: "starved",
			iv: Interval{Length: time.Second, Requests: 300, Total: 300 * 3300 * time.Microsecond, Upstream: 300 * 3200 * time.Microsecond,
				Proxy: 300 * 100 * time.Microsecond, EngineMean: 10 * time.Microsecond, InFlight: 1,
				Utilization: 0.9, Demand: 3 * time.Millisecond, BusyKnown: true, HostKnown: true,
				Commands: 300, ExecTime: 3 * time.Millisecond, CPUTime: 3*time.Millisecond + 300*20*time.Microsecond, RunQueueTime: 900 * time.Millisecond},
			bound: "engine-starved", wait: 3 * time.Millisecond, runq: 3 * time.Millisecond, path: 200 * time.Microsecond,
		},
		{
			// One client of 1 ms CPU-bound commands, the engine getting a
			// quarter of a core: 4 ms of execution by the engine's clock,
			// 3 ms of it in the run queue.
			name: "starved while executing",
			iv: Interval{Length: time.Second, Requests: 240, Total: 240 * 4100 * time.Microsecond, Upstream: 240 * 4050 * time.Microsecond,
				Proxy: 240 * 50 * time.Microsecond, EngineMean: 4 * time.Millisecond, InFlight: 1,
				Utilization: 0.97, Demand: 4 * time.Millisecond, BusyKnown: true, HostKnown: true,
				Commands: 240 + 50, ExecTime: 240 * 4 * time.Millisecond, CPUTime: 240 * time.Millisecond, RunQueueTime: 720 * time.Millisecond},
			bound: "engine-starved", wait: 3 * time.Millisecond, runq: 3 * time.Millisecond, path: 50 * time.Microsecond,
		},
		{
			// One closed-loop client of GETs through a 2 ms delay rule:
			// 100 µs round trip to an engine of 2 µs commands, 20 µs of
			// proxy, 2 ms injected before each is forwarded. The 2 ms are
			// the injected part, none of it path, engine or proxy.
			name: "injected delay",
			iv: Interval{Length: time.Second, Requests: 470, Total: 470 * 2120 * us, Upstream: 470 * 100 * us,
				Proxy: 470 * 20 * us, Injected: 470 * 2000 * us, EngineMean: 2 * us, InFlight: 0.996,
				Utilization: 0.01, Demand: 4 * us, BusyKnown: true},
			bound: "injected-bound", cycle: 2120 * us, path: 98 * us,
			want: "cycle 2.12ms: client 0% | path 5% | engine 0% | engine wait 0% | proxy 1% | injected 94% — injected-bound; " +
				"engine thread 1% busy; Little: L 1.00 vs λW 1.00",
		},
		{
			// One client of DEBUG SLEEP 0.002: the thread ~95% busy, but no
			// queue can form with one request in flight.
			name: "slow command",
			iv: Interval{Length: time.Second, Requests: 470, Total: 470 * 2100 * time.Microsecond, Upstream: 470 * 2050 * time.Microsecond,
				Proxy: 470 * 50 * time.Microsecond, EngineMean: 2 * time.Millisecond, InFlight: 0.98,
				Utilization: 0.95, Demand: 2 * time.Millisecond, BusyKnown: true},
			bound: "engine-bound", path: 50 * time.Microsecond,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.iv.Verdict()
			if v.Bound != tc.bound || tc.cycle != 0 && v.Cycle != tc.cycle {
				t.Errorf("bound %q cycle %v, want %q %v", v.Bound, v.Cycle, tc.bound, tc.cycle)
			}
			near := func(a, b time.Duration) bool { return a-b < 2*time.Microsecond && b-a < 2*time.Microsecond }
			if tc.iv.BusyKnown && (!near(v.EngineWait, tc.wait) || !near(v.RunQueueWait, tc.runq) || !near(v.Network, tc.path) ||
				!strings.Contains(v.String(), "engine wait")) {
				t.Errorf("%s: wait %v runq %v path %v; want %v %v %v", v, v.EngineWait, v.RunQueueWait, v.Network, tc.wait, tc.runq, tc.path)
			}
			if v.Bound != "idle" {
				if sum := v.Client + v.Path + v.Engine + v.Wait + v.Proxy + v.Injected; sum < 0.999 || sum > 1.001 {
					t.Errorf("shares sum to %v", sum)
				}
			}
			if tc.want != "" && v.String() != tc.want {
				t.Errorf("String() = %q\n want %q", v.String(), tc.want)
			}
			var parts time.Duration
			for _, p := range v.Parts() {
				parts += p.Time
			}
			if near := parts - v.Cycle; near > time.Microsecond || near < -time.Microsecond {
				t.Errorf("parts add up to %v, cycle %v", parts, v.Cycle)
			}
			if inj := v.Parts()[9]; inj.Name != "injected" || inj.Time != v.InjectedTime ||
				v.InjectedTime != time.Duration(int64(tc.iv.Injected)/max(tc.iv.Requests, 1)) {
				t.Errorf("injected part %v, InjectedTime %v; want %v per request", inj, v.InjectedTime, tc.iv.Injected/time.Duration(max(tc.iv.Requests, 1)))
			}
			if !strings.Contains(v.String(), tc.bound) && tc.bound != "idle" {
				t.Errorf("String() lacks %q", tc.bound)
			}
		})
	}
}

func TestQueueWait(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		u        float64
		d        time.Duration
		inFlight float64
		want     time.Duration
	}{
		{0.5, ms, 10, ms},                                       // M/M/1: d·u/(1−u)
		{0.8, ms, 10, 4 * time.Millisecond},                     // 4d
		{0.99, 2 * time.Millisecond, 10, 18 * time.Millisecond}, // 99d capped at (10−1)·d
		{1, 2 * time.Millisecond, 10, 18 * time.Millisecond},    // saturated: the cap
		{0.95, 2 * time.Millisecond, 1, 0},                      // one client in a closed loop waits behind nobody
		{0, ms, 10, 0}, {0.5, 0, 10, 0},
	} {
		if got := QueueWait(tc.u, tc.d, tc.inFlight); got < tc.want-time.Microsecond || got > tc.want+time.Microsecond {
			t.Errorf("QueueWait(%v, %v, %v) = %v, want %v", tc.u, tc.d, tc.inFlight, got, tc.want)
		}
	}
}

func TestCollector(t *testing.T) {
	iv := Interval{Length: time.Second, Requests: 300, Total: 300 * 3300 * time.Microsecond, Upstream: 300 * 3200 * time.Microsecond,
		Proxy: 300 * 100 * time.Microsecond, EngineMean: 10 * time.Microsecond, InFlight: 1,
		Utilization: 0.9, Demand: 3 * time.Millisecond, BusyKnown: true, HostKnown: true,
		Commands: 300, ExecTime: 3 * time.Millisecond, CPUTime: 3*time.Millisecond + 300*20*time.Microsecond, RunQueueTime: 900 * time.Millisecond,
		ProbeWait: 2 * time.Millisecond, ProbeKnown: true, LoopWait: 20 * time.Microsecond, LoopWaitKnown: true}
	v, ok := iv.Verdict(), true
	reg := prometheus.NewPedanticRegistry()
	// The engine's own gauges carry its run_id, as the poller's series do.
	const runID = "4f1ae0b0c3d3b8a5e0e1d2c3b4a5968778695a4b"
	reg.MustRegister(NewCollector(func() (Verdict, bool) { return v, ok }, func() string { return runID }))
	want := `
# HELP respmeter_engine_utilization Busy share (0..1) of the engine's command thread over the latest engine poll interval: max(CPU + run-queue wait, command execution) / interval.
# TYPE respmeter_engine_utilization gauge
respmeter_engine_utilization{engine="4f1ae0b0c3d3b8a5e0e1d2c3b4a5968778695a4b"} 0.9
# HELP respmeter_engine_wait_seconds Mean engine wait per request over the latest verdict interval in seconds, the verdict account's parts: queue = waiting for the engine's command thread behind the proxy's own requests (from its utilisation and demand, capped by the requests in flight), other_clients = behind other clients' commands, run_queue = the thread waiting for a CPU (/proc schedstat).
# TYPE respmeter_engine_wait_seconds gauge
respmeter_engine_wait_seconds{engine="4f1ae0b0c3d3b8a5e0e1d2c3b4a5968778695a4b",part="other_clients"} 0
respmeter_engine_wait_seconds{engine="4f1ae0b0c3d3b8a5e0e1d2c3b4a5968778695a4b",part="queue"} 0
respmeter_engine_wait_seconds{engine="4f1ae0b0c3d3b8a5e0e1d2c3b4a5968778695a4b",part="run_queue"} 0.003
# HELP respmeter_network_path_seconds Mean network part of the upstream phase per request over the latest verdict interval in seconds, the verdict account's path: upstream - engine execution - engine wait - the replies' loop wait.
# TYPE respmeter_network_path_seconds gauge
respmeter_network_path_seconds 0.000179901
# HELP respmeter_proxy_loop_wait_seconds Mean time per request over the latest verdict interval, in seconds, that its request and reply waited unread for a busy proxy event loop (from tasks handed to the loops at fixed times).
# TYPE respmeter_proxy_loop_wait_seconds gauge
respmeter_proxy_loop_wait_seconds 2e-05
# HELP respmeter_upstream_probe_wait_seconds Median PING probe round trip over the latest verdict interval minus its unloaded baseline, in seconds.
# TYPE respmeter_upstream_probe_wait_seconds gauge
respmeter_upstream_probe_wait_seconds 0.002
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
	// Behind another client's 2 ms commands: the gauges' parts are the
	// account's, the wait behind them other_clients, not queue.
	iv = Interval{Length: time.Second, Requests: 400, Total: 400 * 2100 * time.Microsecond, Upstream: 400 * 2 * time.Millisecond,
		Proxy: 400 * 100 * time.Microsecond, EngineMean: 2 * time.Microsecond, InFlight: 1, Utilization: 0.8,
		Demand: 2 * time.Microsecond, BusyKnown: true, Commands: 800, OthersResidual: 800 * time.Microsecond, RTTFloor: 50 * time.Microsecond}
	v = iv.Verdict()
	parts := v.Parts()
	if parts[4].Time < time.Millisecond {
		t.Fatalf("other_clients %v: %s", parts[4].Time, v)
	}
	for _, i := range []int{3, 4, 5} {
		m := fmt.Sprintf(`respmeter_engine_wait_seconds{engine="%s",part="%s"}`, runID, parts[i].Name)
		if got := gaugeValue(t, reg, m); math.Abs(got-parts[i].Time.Seconds()) > 1e-12 {
			t.Errorf("%s %v, the account's %s %v", m, got, parts[i].Name, parts[i].Time)
		}
	}
	ok = false
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("before the first interval: %d series, %v", n, err)
	}
}

// TestFromShard: a shard's sums between two snapshots are its own
// sub-requests' (upstream each its own round trip, total its command's),
// not the other shard's nor the commands' totals; a shard the snapshots
// lack gives an empty interval.
func TestFromShard(t *testing.T) {
	const ms = time.Millisecond
	set := metrics.NewSet(1, []string{"get", "mget"})
	a, b := set.Shard("127.0.0.1:7000"), set.Shard("127.0.0.1:7001")
	l := set.Loop(0)
	l.Lock()
	l.ShardObserveLocked(a, 2*ms, 1*ms, 1*ms, false)
	l.Unlock()
	prev := set.Sums()
	l.Lock()
	// An MGET split over both shards: total 10 ms, 8 ms to a, 3 ms to b;
	// and a GET to a: total 3 ms, upstream 2 ms.
	l.ShardObserveLocked(a, 10*ms, 8*ms, 8*ms, false)
	l.ShardObserveLocked(b, 10*ms, 3*ms, 3*ms, false)
	l.ShardObserveLocked(a, 3*ms, 2*ms, 2*ms, false)
	// The GET's client is a TLS one: 0.5 ms of its proxy time is crypto.
	l.ShardTLSLocked(a, ms/2)
	l.Unlock()
	cur := set.Sums()

	got := FromShard(prev, cur, "127.0.0.1:7000")
	want := Interval{Requests: 2, Total: 13 * ms, Upstream: 10 * ms, Proxy: 3 * ms, TLS: ms / 2, InFlight: -1}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("shard a: %+v, want %+v", got, want)
	}
	got = FromShard(nil, cur, "127.0.0.1:7001")
	want = Interval{Requests: 1, Total: 10 * ms, Upstream: 3 * ms, Proxy: 7 * ms, InFlight: -1}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("shard b since start: %+v, want %+v", got, want)
	}
	if got := FromShard(prev, cur, "127.0.0.1:7002"); !reflect.DeepEqual(got, Interval{InFlight: -1}) {
		t.Errorf("unknown shard: %+v, want empty", got)
	}
	// The shard's verdict names its TLS clients' crypto as the overall
	// one does: a quarter of shard a's 2 ms of proxy time per request.
	iv := FromShard(prev, cur, "127.0.0.1:7000")
	v := iv.Verdict()
	if want := 0.5 / 13.0; math.Abs(v.TLS-want) > 1e-9 {
		t.Errorf("shard a's verdict: tls share %.4f, want %.4f", v.TLS, want)
	}
	if txt := v.String(); !strings.Contains(txt, "(tls 4%") {
		t.Errorf("shard a's verdict does not name tls: %q", txt)
	}
}

// gaugeValue returns the value of the series (name{labels}, labels in
// order) that reg exports, failing t when there is none.
func gaugeValue(t *testing.T, reg *prometheus.Registry, series string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if mf.GetName()+"{"+strings.Join(labels, ",")+"}" == series {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s", series)
	return 0
}
