package verdict

import (
	"testing"
	"time"

	engstats "github.com/respmeter/respmeter/metrics/engine"
	"github.com/respmeter/respmeter/metrics/split"
)

// rowMean is Rows' engine mean of a label from a table of means.
func rowMean(means map[string]time.Duration) func(string) (time.Duration, bool) {
	return func(label string) (time.Duration, bool) { m, ok := means[label]; return m, ok }
}

// checkRows checks that an interval's rows add up to its account: their
// requests to its requests, their upstream times to its upstream, and
// each part weighted by their requests to the verdict's part times the
// interval's requests (within the nanosecond per request of rounding);
// and that each row's upstream is its path, engine parts and the replies'
// loop wait.
func checkRows(t *testing.T, rows []Row, iv split.Interval, v split.Verdict) {
	t.Helper()
	if iv.Requests == 0 {
		if rows != nil {
			t.Errorf("rows %+v of an idle interval", rows)
		}
		return
	}
	var n int64
	var up time.Duration
	var sums [len(split.PartNames)]time.Duration
	for _, r := range rows {
		n += r.Requests
		up += r.Upstream * time.Duration(r.Requests)
		for i, p := range r.Parts {
			sums[i] += p * time.Duration(r.Requests)
		}
		u := r.Parts[partPath] + r.Parts[partEngine] + r.Parts[partQueue] + r.Parts[partOthers] + r.Parts[partRunQueue] + r.Parts[partLoopReply]
		if d := u - r.Upstream; d < -5 || d > 5 {
			t.Errorf("%s: path, engine parts and loop wait of replies add up to %v, upstream %v: %+v", r.Name, u, r.Upstream, r)
		}
	}
	if n != iv.Requests {
		t.Errorf("rows of %d requests, the interval's %d", n, iv.Requests)
	}
	if d := up - iv.Upstream; d < -time.Duration(n) || d > time.Duration(n) {
		t.Errorf("rows' upstream %v, the interval's %v", up, iv.Upstream)
	}
	for i, p := range v.Parts() {
		want := p.Time * time.Duration(n)
		if d := sums[i] - want; d < -2*time.Duration(n) || d > 2*time.Duration(n) {
			t.Errorf("%s: rows add up to %v, the account's %v × %d = %v", p.Name, sums[i], p.Time, n, want)
		}
	}
}

// TestRowsHostStarved: the per-command rows of an interval in which
// respmeter's threads waited for a CPU (host-starved), the loop wait moved
// out of the path and the think time into the proxy's part. Each row
// carries its part of it, so that the table's rows add up to its Totals row
// (the account): GETs and SETs with 200 and 400 µs upstream, the engine 2
// and 10 µs each (no thread witnesses: its means alone), 300 ms of
// run-queue wait over 2000 requests against 100 ms on a CPU. A row whose
// path were its upstream less the engine's parts (the account's before the
// loop wait) would hold 150 µs per request the Totals row gives the loop.
func TestRowsHostStarved(t *testing.T) {
	set, observe := testSet()
	prev := set.Sums()
	observe(1, 1000, 250*us, 200*us, 50*us) // get
	observe(2, 1000, 450*us, 400*us, 50*us) // set
	means := map[string]time.Duration{"get": 2 * us, "set": 10 * us}
	in := Input{Prev: prev, Cur: set.Sums(), Length: time.Second, InFlightArea: int64(0.5 * float64(time.Second)), Labels: labels,
		EngineMean:     func(cmd string, n int64) (time.Duration, int64, bool) { m, ok := means[cmd]; return m, n, ok },
		ProxyHostKnown: true, ProxyCPU: 100 * ms, ProxyRunQueue: 300 * ms}
	iv := Build(in)
	v := iv.Verdict()
	if v.Bound != "host-starved" {
		t.Fatalf("bound %q, want host-starved: %s", v.Bound, v)
	}
	rows := Rows(in.Prev, in.Cur, v, rowMean(means))
	checkRows(t, rows, iv, v)
	if len(rows) != 2 {
		t.Fatalf("rows %+v", rows)
	}
	get, set2 := rows[0], rows[1]
	// The engine's 6 µs mean shared 2:10 by its own means.
	near(t, "GET engine (µs)", float64(get.Parts[partEngine])/1e3, 2, 0.001)
	near(t, "SET engine (µs)", float64(set2.Parts[partEngine])/1e3, 10, 0.001)
	// 150 µs of run-queue wait per request: a request waits unread up
	// to that long (all of its 50 µs of think time) and a reply too (of
	// the 294 µs path), the replies' shared by the rows' rooms 198:390.
	near(t, "loop wait of requests (µs)", float64(v.Parts()[partLoopRequest].Time)/1e3, 50, 0.01)
	near(t, "loop wait of replies (µs)", float64(v.LoopReply)/1e3, 150, 0.01)
	near(t, "GET loop wait of replies (µs)", float64(get.Parts[partLoopReply])/1e3, 150*198/294.0, 0.01)
	near(t, "SET loop wait of replies (µs)", float64(set2.Parts[partLoopReply])/1e3, 150*390/294.0, 0.01)
	for _, r := range rows {
		if r.Parts[partPath] < 0 || r.Parts[partPath] >= r.Upstream-r.Parts[partEngine] {
			t.Errorf("%s: path %v, want at least 0 and less than its upstream less the engine (%v)", r.Name,
				r.Parts[partPath], r.Upstream-r.Parts[partEngine])
		}
	}
}

// TestRowsClasses: with the engine's thread witnesses, each label's row
// takes its class's execution and waits (split.ClassWait): 600 GETs and
// 400 SETs behind another client's DEBUG SLEEPs (800 ms of 2 ms each).
func TestRowsClasses(t *testing.T) {
	set, observe := testSet()
	prev := set.Sums()
	observe(1, 600, 2600*us, 2550*us, 0) // get
	observe(2, 400, 300*us, 250*us, 0)   // set
	means := map[string]time.Duration{"get": 2 * us, "set": 3 * us}
	in := Input{Prev: prev, Cur: set.Sums(), Length: time.Second, InFlightArea: int64(1.5 * float64(time.Second)), Labels: labels,
		EngineMean: func(cmd string, n int64) (time.Duration, int64, bool) { m, ok := means[cmd]; return m, n, ok },
		WitnessOK:  true, Witness: engstats.Witness{Interval: time.Second, Commands: 1000, MainCPU: 810 * ms, HasMainCPU: true,
			Exec: 801200 * us, Work: work(map[string]int64{"get": 600, "set": 400, "debug": 400},
				map[string]time.Duration{"get": 1200 * us, "set": 1200 * us, "debug": 800 * ms})}}
	iv := Build(in)
	v := iv.Verdict()
	if len(v.Classes) != 2 || v.Classes[0].Name != "get" || v.Classes[1].Name != "set" {
		t.Fatalf("classes %+v, want get's and set's", v.Classes)
	}
	rows := Rows(in.Prev, in.Cur, v, rowMean(means))
	checkRows(t, rows, iv, v)
	for i, c := range v.Classes {
		r := rows[i]
		if r.Parts[partEngine] != c.Exec || r.Parts[partOthers] != c.Others || r.Parts[partRunQueue] != c.RunQueue ||
			r.Parts[partQueue] != c.Wait-c.Others-c.RunQueue {
			t.Errorf("%s row %+v, its class %+v", r.Name, r, c)
		}
	}
	// GET's wait behind the DEBUGs is most of its 2.5 ms; SET's is capped
	// by its own 250 µs round trip, not averaged with GET's.
	if rows[0].Parts[partOthers] < 2*time.Millisecond || rows[1].Parts[partOthers] > 250*us {
		t.Errorf("waits behind the DEBUGs: GET %v, SET %v", rows[0].Parts[partOthers], rows[1].Parts[partOthers])
	}
	t.Logf("%s; rows %+v", v, rows)
}

// TestFill: a wait shared out over groups up to their caps keeps its sum
// (requests × wait) whatever the caps.
func TestFill(t *testing.T) {
	for _, tc := range []struct {
		w            float64
		caps, counts []float64
		want         []float64
	}{
		{1, []float64{5, 5}, []float64{1, 3}, []float64{1, 1}},               // the caps hold it: alike
		{1, []float64{0.2, 5}, []float64{1, 1}, []float64{0.2, 1.8}},         // one capped, the other takes the rest
		{2, []float64{0.5, 1, 10}, []float64{2, 2, 1}, []float64{0.5, 1, 7}}, // two capped in turn
		{3, []float64{1, 1}, []float64{1, 1}, []float64{3, 3}},               // every group capped: the rest alike
	} {
		got := fill(tc.w, tc.caps, tc.counts)
		var sum, n float64
		for i := range got {
			near(t, "wait", got[i], tc.want[i], 1e-12)
			sum += got[i] * tc.counts[i]
			n += tc.counts[i]
		}
		near(t, "sum", sum, tc.w*n, 1e-12)
	}
}

// TestRowsWaitCapped: the engine's wait of the requests of no class (the
// thread's witnesses without per-label work) is shared out alike, each
// label's up to what its own round trip leaves beside its execution: GETs
// of 100 µs upstream do not wait the 2 ms SETs' wait, and no row's path
// goes below 0.
func TestRowsWaitCapped(t *testing.T) {
	set, observe := testSet()
	prev := set.Sums()
	observe(1, 1000, 150*us, 100*us, 0)   // get
	observe(2, 1000, 2100*us, 2000*us, 0) // set
	means := map[string]time.Duration{"get": 2 * us, "set": 3 * us}
	in := Input{Prev: prev, Cur: set.Sums(), Length: time.Second, InFlightArea: int64(10 * float64(time.Second)), Labels: labels,
		EngineMean: func(cmd string, n int64) (time.Duration, int64, bool) { m, ok := means[cmd]; return m, n, ok },
		WitnessOK:  true, Witness: engstats.Witness{Interval: time.Second, Commands: 2000, MainCPU: 950 * ms, HasMainCPU: true, Exec: 900 * ms}}
	iv := Build(in)
	v := iv.Verdict()
	if len(v.Classes) != 0 || v.EngineWait < 200*us {
		t.Fatalf("want a wait of no class above the GETs' round trip: %s, classes %+v", v, v.Classes)
	}
	rows := Rows(in.Prev, in.Cur, v, rowMean(means))
	checkRows(t, rows, iv, v)
	for _, r := range rows {
		w := r.Parts[partQueue] + r.Parts[partOthers] + r.Parts[partRunQueue]
		if r.Parts[partPath] < 0 || w > r.Upstream-r.Parts[partEngine] {
			t.Errorf("%s: wait %v, path %v of upstream %v", r.Name, w, r.Parts[partPath], r.Upstream)
		}
	}
	t.Logf("%s; rows %+v", v, rows)
}

// TestRowsTLS: a TLS client's crypto time (the tls phase, inside its proxy
// phase) is its row's tls part and the rest of its proxy phase its proxy
// part, so that the rows add up to the account's tls and proxy parts: 1000
// GETs with 50 µs of proxy time of which 20 µs tls, 1000 SETs of a
// plaintext client with 50 µs of proxy time and no tls.
func TestRowsTLS(t *testing.T) {
	set, observe := testSet()
	prev := set.Sums()
	observe(1, 1000, 250*us, 200*us, 50*us) // get
	observe(2, 1000, 250*us, 200*us, 50*us) // set
	l := set.Loop(0)
	l.Lock()
	for range 1000 {
		l.TLSLocked(1, 20*us)
	}
	l.Unlock()
	means := map[string]time.Duration{"get": 2 * us, "set": 2 * us}
	in := Input{Prev: prev, Cur: set.Sums(), Length: time.Second, InFlightArea: int64(0.5 * float64(time.Second)), Labels: labels,
		EngineMean: func(cmd string, n int64) (time.Duration, int64, bool) { m, ok := means[cmd]; return m, n, ok }}
	iv := Build(in)
	v := iv.Verdict()
	rows := Rows(in.Prev, in.Cur, v, rowMean(means))
	checkRows(t, rows, iv, v)
	if len(rows) != 2 {
		t.Fatalf("rows %+v", rows)
	}
	get, set2 := rows[0], rows[1]
	near(t, "GET tls (µs)", float64(get.Parts[partTLS])/1e3, 20, 0.001)
	near(t, "GET proxy (µs)", float64(get.Parts[partProxy])/1e3, 30, 0.001)
	near(t, "SET tls (µs)", float64(set2.Parts[partTLS])/1e3, 0, 0.001)
	near(t, "SET proxy (µs)", float64(set2.Parts[partProxy])/1e3, 50, 0.001)
	near(t, "account tls (µs)", float64(v.Parts()[partTLS].Time)/1e3, 10, 0.001)
}
