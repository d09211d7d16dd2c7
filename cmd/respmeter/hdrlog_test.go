package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/heaptest"
	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/hdrlog"
	"github.com/respmeter/respmeter/proxy/proxytest"
	"github.com/respmeter/respmeter/routing/command"
)

// Command IDs of hdrTestNames.
const (
	_ = iota // other
	hdrGet
	hdrSet
	hdrPing
)

var hdrTestNames = []string{"other", "get", "set", "ping"}

// phaseTags returns the interval-log tags of cmd's phases, but injected and
// tls: only commands a fault injection rule delayed and TLS clients'
// commands have them (none here).
func phaseTags(cmd string) []string {
	var tags []string
	for p := range metrics.NumPhases {
		if p != metrics.PhaseInjected && p != metrics.PhaseTLS {
			tags = append(tags, cmd+"."+p.String())
		}
	}
	return tags
}

// timedPhases is the number of phases every timed command has: all but
// injected (a fault injection rule's) and tls (a TLS client's).
const timedPhases = int(metrics.NumPhases) - 2

// batch is what one test step records on loop 0 of a Set, under one lock,
// so that a Snapshot (and so an interval of the log) sees all of it or
// none of it.
type batch struct {
	cmd   int
	n     int     // timed commands
	scale float64 // latency factor; 0 means 1
	think int     // think times
	count int     // untimed commands (CountLocked)
}

// feed records the batches on loop 0 of set. Latencies are deterministic:
// a body between 50 µs and ~3 ms with a tail of one in 97 above 25 ms, not
// whole microseconds (the Set rounds them up), upstream 3/5 of total and
// service all or half of upstream.
func feed(set *metrics.Set, batches ...batch) {
	l := set.Loop(0)
	l.Lock()
	defer l.Unlock()
	for _, b := range batches {
		scale := b.scale
		if scale == 0 {
			scale = 1
		}
		for i := range b.n {
			total := time.Duration(50+(i*7919)%3000)*time.Microsecond + time.Duration(i%1000)
			if i%97 == 0 {
				total += 25 * time.Millisecond
			}
			total = time.Duration(float64(total) * scale)
			upstream := total * 3 / 5
			service := upstream
			if i%3 == 0 {
				service /= 2
			}
			l.ObserveLocked(b.cmd, total, upstream, service, i%50 == 0)
		}
		for i := range b.think {
			l.ThinkLocked(time.Duration(200+i*13) * time.Microsecond)
		}
		for range b.count {
			l.CountLocked(b.cmd, false)
		}
	}
}

// countLines returns how many interval lines of the log at path carry tag.
func countLines(t *testing.T, path, tag string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\nTag="+tag+",")
}

// waitLines polls the log at path until it has n interval lines tagged tag.
func waitLines(t *testing.T, path, tag string, n int) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, func() error {
		if got := countLines(t, path, tag); got < n {
			return fmt.Errorf("%s: %d lines tagged %s, want %d", path, got, tag, n)
		}
		return nil
	})
}

// snapshotHist returns sn's cumulative histogram for tag, nil if none.
func snapshotHist(sn *metrics.Snapshot, tag string) *hdrhistogram.Histogram {
	if tag == thinkTag {
		return sn.Think.Hist
	}
	for _, c := range sn.Commands {
		for p := range metrics.NumPhases {
			if c.Name+"."+p.String() == tag {
				return c.Phases[p].Hist
			}
		}
	}
	return nil
}

// checkMerged checks that the log at path merged per tag equals sn: the
// same tags as want, and per tag the same counts bucket for bucket, so the
// same count, percentiles and max.
func checkMerged(t *testing.T, path string, sn *metrics.Snapshot, want []string) *hdrlog.Log {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lg, err := hdrlog.Load(f)
	if err != nil {
		t.Fatalf("hdrlog.Load(%s): %v", path, err)
	}
	want = slices.Sorted(slices.Values(want))
	if got := lg.Tags(); !slices.Equal(got, want) {
		t.Fatalf("tags %q, want %q", got, want)
	}
	for _, tag := range want {
		got, exp := lg.Histogram(tag), snapshotHist(sn, tag)
		if exp == nil {
			t.Errorf("%s: not in the snapshot", tag)
			continue
		}
		if got.TotalCount() != exp.TotalCount() {
			t.Errorf("%s: count %d, snapshot %d", tag, got.TotalCount(), exp.TotalCount())
		}
		for _, pct := range []float64{50, 90, 99, 99.9, 99.99} {
			if g, e := got.ValueAtQuantile(pct), exp.ValueAtQuantile(pct); g != e {
				t.Errorf("%s: p%g = %d µs, snapshot %d µs", tag, pct, g, e)
			}
		}
		if got.Max() != exp.Max() {
			t.Errorf("%s: max %d µs, snapshot %d µs", tag, got.Max(), exp.Max())
		}
		if !got.Equals(exp) {
			t.Errorf("%s: merged histogram differs from the snapshot's", tag)
		}
	}
	return lg
}

// logInterval is one interval of a log: the counts of its lines by tag.
type logInterval struct {
	start, end int64 // ms since the epoch
	counts     map[string]int64
}

// readIntervals reads the log at path with hdrhistogram-go's reader and
// groups its lines by interval.
func readIntervals(t *testing.T, path string) []logInterval {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd := hdrhistogram.NewHistogramLogReader(f)
	var out []logInterval
	for {
		h, err := rd.NextIntervalHistogram()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h == nil {
			return out
		}
		if n := len(out); n == 0 || out[n-1].start != h.StartTimeMs() || out[n-1].end != h.EndTimeMs() {
			out = append(out, logInterval{start: h.StartTimeMs(), end: h.EndTimeMs(), counts: map[string]int64{}})
		}
		iv := out[len(out)-1]
		if _, dup := iv.counts[h.Tag()]; dup {
			t.Errorf("%s: tag %s twice in interval %d", path, h.Tag(), len(out))
		}
		iv.counts[h.Tag()] = h.TotalCount()
	}
}

// tagCounts returns a tag -> count map giving n to every tag.
func tagCounts(n int64, tags ...string) map[string]int64 {
	m := make(map[string]int64, len(tags))
	for _, tag := range tags {
		m[tag] = n
	}
	return m
}

func union(maps ...map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestHDRLogIntervals(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	set := metrics.NewSet(1, hdrTestNames)
	path := filepath.Join(t.TempDir(), "run.hlog")
	var logs syncBuffer
	stop, err := startHDRLog(context.Background(), set, path, 5*time.Millisecond, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(path); err != nil || !strings.HasPrefix(string(data), "#[Histogram log format version 1.3]\n") {
		t.Fatalf("header not written at start: %q, %v", data, err)
	}

	// Three intervals; ticks with nothing new between them write nothing.
	feed(set, batch{cmd: hdrGet, n: 500}, batch{cmd: hdrPing, count: 3})
	waitLines(t, path, "get.total", 1)
	time.Sleep(20 * time.Millisecond) // empty ticks
	feed(set, batch{cmd: hdrGet, n: 300, scale: 2}, batch{cmd: hdrSet, n: 200, think: 50})
	waitLines(t, path, "set.total", 1)
	feed(set, batch{cmd: hdrSet, n: 100, scale: 0.5})
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}

	want := []map[string]int64{
		tagCounts(500, phaseTags("get")...),
		union(tagCounts(300, phaseTags("get")...), tagCounts(200, phaseTags("set")...), tagCounts(50, thinkTag)),
		tagCounts(100, phaseTags("set")...),
	}
	got := readIntervals(t, path)
	if len(got) != len(want) {
		t.Fatalf("%d intervals, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if fmt.Sprint(got[i].counts) != fmt.Sprint(want[i]) {
			t.Errorf("interval %d: counts %v, want %v", i+1, got[i].counts, want[i])
		}
		if got[i].end < got[i].start || (i > 0 && got[i].start < got[i-1].end) {
			t.Errorf("interval %d: %d..%d after %d..%d", i+1, got[i].start, got[i].end, got[i-1].start, got[i-1].end)
		}
	}
	tags := append(append(phaseTags("get"), phaseTags("set")...), thinkTag)
	checkMerged(t, path, set.Snapshot(), tags)
	if logs.String() != "" {
		t.Errorf("logged:\n%s", logs.String())
	}
}

// TestHDRLogStop checks that stop writes what the ticks have not (with an
// hour-long interval, everything) and that cancelling ctx ends the ticks
// but leaves the rest to stop.
func TestHDRLogStop(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	for _, cancelFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancel=%v", cancelFirst), func(t *testing.T) {
			set := metrics.NewSet(1, hdrTestNames)
			feed(set, batch{cmd: hdrGet, n: 10}) // before the log: in its first interval
			path := filepath.Join(t.TempDir(), "run.hlog")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stop, err := startHDRLog(ctx, set, path, time.Hour, nil)
			if err != nil {
				t.Fatal(err)
			}
			feed(set, batch{cmd: hdrGet, n: 20})
			wantIntervals := 1
			if cancelFirst {
				cancel()
				waitLines(t, path, "get.total", 1) // written and flushed on cancel
				feed(set, batch{cmd: hdrSet, n: 5, think: 2})
				wantIntervals = 2
			}
			if err := stop(); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if got := readIntervals(t, path); len(got) != wantIntervals || got[0].counts["get.total"] != 30 {
				t.Errorf("intervals %v, want %d, the first with 30 get.total", got, wantIntervals)
			}
			tags := phaseTags("get")
			if cancelFirst {
				tags = append(append(tags, phaseTags("set")...), thinkTag)
			}
			checkMerged(t, path, set.Snapshot(), tags)
		})
	}
}

// failingFile fails every write once fail is set, and records Close.
type failingFile struct {
	fail   atomic.Bool
	closed atomic.Bool
	mu     sync.Mutex
	buf    bytes.Buffer
}

var errDiskFull = errors.New("disk full")

func (f *failingFile) Write(p []byte) (int, error) {
	if f.fail.Load() {
		return 0, errDiskFull
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf.Write(p)
}

func (f *failingFile) Close() error {
	f.closed.Store(true)
	return nil
}

func TestHDRLogWriteErrorLoggedOnce(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	set := metrics.NewSet(1, hdrTestNames)
	var logs syncBuffer
	f := &failingFile{}
	stop, err := startHDRLogTo(context.Background(), set, f, "/full/run.hlog", time.Millisecond, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	f.fail.Store(true)
	for i := range 5 { // several intervals' worth of new observations
		feed(set, batch{cmd: hdrGet, n: 10 + i})
		time.Sleep(5 * time.Millisecond)
	}
	err = stop()
	if !errors.Is(err, errDiskFull) || !strings.Contains(err.Error(), "/full/run.hlog") {
		t.Errorf("stop: %v, want %v naming the file", err, errDiskFull)
	}
	if !f.closed.Load() {
		t.Error("file not closed")
	}
	out := logs.String()
	if n := strings.Count(out, "\n"); n != 1 || !strings.Contains(out, "level=ERROR") ||
		!strings.Contains(out, "disk full") || !strings.Contains(out, "path=/full/run.hlog") || !strings.Contains(out, "component=hdrlog") {
		t.Errorf("want one error record naming the file, got %d lines:\n%s", n, out)
	}
}

func TestHDRLogStartErrors(t *testing.T) {
	set := metrics.NewSet(1, hdrTestNames)
	missing := filepath.Join(t.TempDir(), "no", "such", "dir", "run.hlog")
	for _, tc := range []struct {
		name     string
		path     string
		interval time.Duration
		want     string
	}{
		{"missing dir", missing, time.Second, missing + ": no such file or directory"},
		{"zero interval", filepath.Join(t.TempDir(), "x.hlog"), 0, "interval must be > 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stop, err := startHDRLog(context.Background(), set, tc.path, tc.interval, nil)
			if err == nil || stop != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got stop %v, err %v; want an error containing %q", stop != nil, err, tc.want)
			}
		})
	}
	t.Run("header write fails", func(t *testing.T) {
		f := &failingFile{}
		f.fail.Store(true)
		stop, err := startHDRLogTo(context.Background(), set, f, "x.hlog", time.Second, nil)
		if !errors.Is(err, errDiskFull) || stop != nil || !f.closed.Load() {
			t.Errorf("err %v, closed %v", err, f.closed.Load())
		}
	})
}

// TestHDRLogEndToEnd logs a proxy in front of redis-server while go-redis
// drives GET and SET through it, and checks that the log, merged, says
// exactly what the proxy's metrics.Set says.
func TestHDRLogEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped with -short")
	}
	srv := redistest.Start(t) // skips without redis-server in PATH
	p, set := proxytest.StartProxy(t, srv.Addr(), nil)
	path := filepath.Join(t.TempDir(), "proxy.hlog")
	stop, err := startHDRLog(context.Background(), set, path, 100*time.Millisecond, slog.New(slog.NewTextHandler(&tbLog{t: t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = stop()
		}
	}()

	const conns, rounds, perRound = 4, 10, 25 // 1000 SET + 1000 GET
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), DisableIdentity: true, PoolSize: conns, MaxRetries: -1})
	defer c.Close()
	errs := make(chan error, conns)
	for w := range conns {
		go func() {
			for r := range rounds {
				for i := range perRound {
					key := fmt.Sprintf("k:%d:%d", w, i)
					if err := c.Set(ctx, key, r, 0).Err(); err != nil {
						errs <- err
						return
					}
					if err := c.Get(ctx, key).Err(); err != nil {
						errs <- err
						return
					}
				}
				time.Sleep(40 * time.Millisecond) // spread over several intervals
			}
			errs <- nil
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatalf("through the proxy: %v", err)
		}
	}
	const want = conns * rounds * perRound
	redistest.Eventually(t, 10*time.Second, func() error {
		sn := set.Snapshot()
		gets := sn.Commands[cmdID(t, set, "get")].Phases[metrics.PhaseTotal].Count()
		sets := sn.Commands[cmdID(t, set, "set")].Phases[metrics.PhaseTotal].Count()
		if gets != want || sets != want {
			return fmt.Errorf("the Set counted %d GET and %d SET, want %d of each", gets, sets, want)
		}
		return nil
	})
	stopped = true
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	sn := set.Snapshot()
	lg, err := func() (*hdrlog.Log, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return hdrlog.Load(f)
	}()
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range append(phaseTags("get"), phaseTags("set")...) {
		got, exp := lg.Histogram(tag), snapshotHist(sn, tag)
		if got == nil || exp == nil {
			t.Errorf("%s: log %v, snapshot %v", tag, got != nil, exp != nil)
			continue
		}
		if got.TotalCount() != want || exp.TotalCount() != want {
			t.Errorf("%s: count %d in the log, %d in the snapshot, want %d", tag, got.TotalCount(), exp.TotalCount(), want)
		}
		for _, pct := range []float64{50, 99, 99.9} {
			if g, e := got.ValueAtQuantile(pct), exp.ValueAtQuantile(pct); g != e {
				t.Errorf("%s: p%g = %d µs in the log, %d µs in the snapshot", tag, pct, g, e)
			}
		}
		if got.Max() != exp.Max() {
			t.Errorf("%s: max %d µs in the log, %d µs in the snapshot", tag, got.Max(), exp.Max())
		}
		if !got.Equals(exp) {
			t.Errorf("%s: merged histogram differs from the snapshot's", tag)
		}
	}
	if n := countLines(t, path, "get.total"); n < 2 {
		t.Errorf("get.total in %d intervals, want several", n)
	}
	t.Logf("%d interval lines; get.total p50 %d µs, p99 %d µs, max %d µs", lg.Intervals(),
		lg.Histogram("get.total").ValueAtQuantile(50), lg.Histogram("get.total").ValueAtQuantile(99), lg.Histogram("get.total").Max())
}

// cmdID returns the command ID of name in set.
func cmdID(t *testing.T, set *metrics.Set, name string) int {
	t.Helper()
	i := slices.Index(set.Names(), name)
	if i < 0 {
		t.Fatalf("no command %q", name)
	}
	return i
}

// tbLog writes log records to t.Log.
type tbLog struct{ t *testing.T }

func (w *tbLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = (*tbLog)(nil)

// hdrRound records, on loop 0 of set, n timed commands (feed's latencies
// times scale) and one think time for each command ID below ids.
func hdrRound(set *metrics.Set, ids, n int, scale float64) {
	bs := make([]batch, ids)
	for id := range bs {
		bs[id] = batch{cmd: id, n: n, scale: scale, think: 1}
	}
	feed(set, bs...)
}

// hdrScale is the latency factor of interval i of the tests below, so that
// intervals differ and the cumulative histograms hold more buckets than one
// interval.
func hdrScale(i int) float64 { return 1 + float64(i%7)/3 }

// TestHDRLogSameAsSnapshotDeltas checks that the log written from the
// Set's interval histograms is byte for byte the log respmeter wrote
// before them, from the difference of two dense cumulative Snapshots per
// tag and interval: same lines, same encoded histograms. Some intervals
// have nothing new, some follow other scrapes, and values recorded before
// the log started are in its first interval.
func TestHDRLogSameAsSnapshotDeltas(t *testing.T) {
	names := command.Names()[:16]
	set := metrics.NewSet(1, names)
	hdrRound(set, len(names), 40, 1) // before the log
	start := time.Unix(1_700_000_000, 0)
	var got, want bytes.Buffer
	l, err := newHDRLog(set, &got, "test", start, nil)
	if err != nil {
		t.Fatal(err)
	}
	ww, err := hdrlog.NewWriter(&want, start)
	if err != nil {
		t.Fatal(err)
	}
	prev := map[string]*hdrhistogram.Histogram{} // by tag
	last := start
	for i := range 12 {
		switch i % 4 {
		case 1: // nothing new
		case 2: // a scrape in between
			hdrRound(set, len(names)/2, 30, hdrScale(i))
			if err := set.WriteTable(io.Discard); err != nil {
				t.Fatal(err)
			}
		default:
			hdrRound(set, len(names), 30, hdrScale(i))
		}
		end := start.Add(time.Duration(i+1) * time.Second)
		l.write(end)
		if l.err != nil {
			t.Fatal(l.err)
		}
		// The oracle: the former hdrLog.write.
		sn := set.Snapshot()
		emit := func(tag string, d metrics.Durations) {
			cur := d.Hist
			if cur == nil || (prev[tag] != nil && prev[tag].TotalCount() == cur.TotalCount()) {
				return
			}
			if err := ww.WriteInterval(last, end, tag, hdrlog.Delta(cur, prev[tag])); err != nil {
				t.Fatal(err)
			}
			prev[tag] = cur
		}
		for _, c := range sn.Commands {
			if c.Observed() {
				for p, d := range c.Phases {
					emit(c.Name+"."+metrics.Phase(p).String(), d)
				}
			}
		}
		emit(thinkTag, sn.Think)
		last = end
	}
	// 6 intervals with every name, 3 with half of them, 3 with nothing new;
	// one think line in each of the 9.
	if lines, exp := strings.Count(want.String(), "\nTag="), (6*len(names)+3*(len(names)/2))*timedPhases+9; lines != exp {
		t.Fatalf("the oracle wrote %d interval lines, want %d", lines, exp)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		gl, wl := strings.Split(got.String(), "\n"), strings.Split(want.String(), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("line %d differs:\n got %.200s\nwant %.200s", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("%d lines, want %d", len(gl), len(wl))
	}
}

// TestHDRLogHeapBounded writes 30 intervals of an HDR log for a Set with
// 32 command names in use (a line per command and phase in every interval,
// as with an operator's --hdr-log under mixed load) and checks what the log
// keeps: the live heap then is at most 2 KiB per distribution (5 phases
// per name, plus think time) above that of a Set given the same recordings
// and scraped as often without a log, and at most 16 KiB per distribution
// in all, as TestScrapeHeapBounded bounds the scrapes. Before the Set had
// interval histograms, the log kept a dense cumulative copy per tag
// (~188 KB each).
func TestHDRLogHeapBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 30 intervals")
	}
	const numNames, intervals = 32, 30
	names := command.Names()[:numNames]
	start := time.Unix(1_700_000_000, 0)
	// build records intervals rounds of 20 commands per name, each followed
	// by an interval of the log (withLog) or a scrape, and returns the live
	// heap held then.
	build := func(withLog bool) uint64 {
		base := heaptest.Live()
		set := metrics.NewSet(1, names)
		var l *hdrLog
		if withLog {
			var err error
			if l, err = newHDRLog(set, io.Discard, "test", start, nil); err != nil {
				t.Fatal(err)
			}
		}
		for i := range intervals {
			hdrRound(set, numNames, 20, hdrScale(i))
			if withLog {
				l.write(start.Add(time.Duration(i+1) * time.Second))
				if l.err != nil {
					t.Fatal(l.err)
				}
			} else if err := set.WriteTable(io.Discard); err != nil {
				t.Fatal(err)
			}
		}
		live := heaptest.Live() - base
		runtime.KeepAlive(set)
		runtime.KeepAlive(l)
		return live
	}
	without := build(false)
	with := build(true)
	series := uint64(numNames*timedPhases + 1)
	t.Logf("live heap: %d B scraped, %d B with the log (%d B per distribution, %d B more)", without, with, with/series, int64(with)-int64(without))
	if limit := series * 16 << 10; with > limit {
		t.Errorf("live heap %d B after %d intervals, want <= %d (16 KiB per distribution)", with, intervals, limit)
	}
	if limit := without + series*2<<10; with > limit {
		t.Errorf("live heap %d B with the log, %d B without: the log keeps %d B, want at most %d (2 KiB per distribution)",
			with, without, with-without, series*2<<10)
	}
}
