package heat

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rssBytes returns the process's resident set size (VmRSS of
// /proc/self/status).
func rssBytes(tb testing.TB) int64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Skip("no /proc/self/status:", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}

// BenchmarkDistinctKeysRSS records 10 million distinct keys (one GET each,
// default sampling and capacity, slow threshold 10 ms crossed by one
// request in 100) into a Set of one loop and reports the process's RSS
// growth from just after NewSet to the end, which must stay within 16 MiB:
// the memory is the slot table and the summaries, whatever the number of
// keys. Run it with -benchtime 1x.
func BenchmarkDistinctKeysRSS(b *testing.B) {
	const keys = 10_000_000
	for range b.N {
		runtime.GC()
		h := NewSet(1, Config{SlowThreshold: 10 * time.Millisecond})
		l := h.Loop(0)
		args := [][]byte{[]byte("get"), nil}
		buf := make([]byte, 0, 32)
		var p Pending
		before := rssBytes(b)
		for i := range keys {
			buf = strconv.AppendInt(append(buf[:0], "session:"...), int64(i), 10)
			args[1] = buf
			k := l.Begin(&p, "get", args, 1, 30)
			p.Reply([]byte("$5\r\nvalue\r\n"))
			total := 200 * time.Microsecond
			if i%100 == 0 {
				total = 20 * time.Millisecond
			}
			l.End(&p, k, 1, 0, total, 50*time.Microsecond)
		}
		growth := rssBytes(b) - before
		b.ReportMetric(float64(growth)/(1<<20), "rss-growth-MiB")
		b.ReportMetric(float64(keys), "keys")
		if growth > 16<<20 {
			b.Errorf("RSS grew by %.1f MiB over %d distinct keys, want <= 16 MiB", float64(growth)/(1<<20), keys)
		}
		if k := h.Keys(5, nil); len(k.ByRequests) != 5 {
			b.Errorf("top keys: %d", len(k.ByRequests))
		}
		runtime.KeepAlive(h)
	}
}

// TestBeginEndAllocs pins Begin, Reply and End at zero allocations, the
// summaries full and evicting.
func TestBeginEndAllocs(t *testing.T) {
	h := NewSet(1, Config{Sample: 1, Capacity: 64})
	l := h.Loop(0)
	args := [][]byte{[]byte("get"), nil}
	var buf []byte
	var p Pending
	i := 0
	rec := func() {
		buf = strconv.AppendInt(append(buf[:0], "k:"...), int64(i), 10)
		args[1] = buf
		k := l.Begin(&p, "get", args, 1, 20)
		p.Reply([]byte("*2\r\n$1\r\na\r\n$1\r\nb\r\n"))
		l.End(&p, k, 1, 0, time.Millisecond, 100*time.Microsecond)
		i++
	}
	for range 1000 {
		rec()
	}
	if a := testing.AllocsPerRun(1000, rec); a != 0 {
		t.Errorf("%v allocations per request", a)
	}
}

// BenchmarkRecord is heat's own work for one request as the proxy does
// it (BeginKey, Reply, EndLocked under the lock the proxy holds anyway;
// the key is found and kept by the slow log's code, outside heat): GETs
// of 100,000 distinct keys named as redis-benchmark -r names them, taken
// in turn so that each slot is hit as a uniform workload does, at the
// default sampling and with every request sampled. cpu-ns/op is the
// benchmark thread's CPU time per request (CLOCK_THREAD_CPUTIME_ID),
// which other processes' time slices do not inflate.
func BenchmarkRecord(b *testing.B) {
	for _, sample := range []int{64, 1} {
		b.Run("sample-"+strconv.Itoa(sample), func(b *testing.B) { benchRecord(b, sample) })
	}
}

func benchRecord(b *testing.B, sample int) {
	h := NewSet(1, Config{Sample: sample, SlowThreshold: time.Second})
	l := h.Loop(0)
	const keys = 100_000
	// One buffer, read in order, as a pipeline's requests are: the keys'
	// own cache misses are not heat's.
	key := make([][]byte, keys)
	var all []byte
	for i := range key {
		all = append(all, "key:"+strconv.FormatInt(1e12+int64(i), 10)[1:]...)
	}
	for i := range key {
		key[i] = all[16*i : 16*i+16 : 16*i+16]
	}
	reply := []byte("$100\r\n" + strings.Repeat("x", 100) + "\r\n")
	var p Pending
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	t0 := threadCPU(b)
	for i := range b.N {
		k := key[i%keys]
		l.BeginKey(&p, k, true, 36)
		p.Reply(reply)
		l.EndLocked(&p, k, 1, 0, 50*time.Microsecond, 10*time.Microsecond)
	}
	b.ReportMetric(float64(threadCPU(b)-t0)/float64(b.N), "cpu-ns/op")
}

// threadCPU returns the CPU time of the calling OS thread in nanoseconds.
func threadCPU(tb testing.TB) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		tb.Fatal(err)
	}
	return ts.Nano()
}

// BenchmarkApplySamples is how long applying a full sample batch holds a
// loop: the wait of the request whose End fills it, one request in some
// 8,000 at the default sampling. Every request is sampled into all three
// rankings (3 x sampleBatchLen additions), each of a key new to the
// summaries, which are full and evict at each one, and the summaries are
// out of the CPU's caches (16 MiB written in between, as a loop's system
// calls and other work would). ns/op is one batch's application.
func BenchmarkApplySamples(b *testing.B) {
	h := NewSet(1, Config{Sample: 1})
	l := h.Loop(0)
	var p Pending
	var key []byte
	i := 0
	record := func() {
		key = strconv.AppendInt(append(key[:0], "key:"...), int64(i), 10)
		i++
		l.BeginKey(&p, key, true, 36)
		p.Reply([]byte("+OK\r\n"))
		l.EndLocked(&p, key, 1, 0, 50*time.Microsecond, 10*time.Microsecond)
	}
	for range 10 * 1024 { // the summaries full
		record()
	}
	junk := make([]byte, 16<<20)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for l.nsamples < sampleBatchLen-1 {
			record()
		}
		for j := 0; j < len(junk); j += 64 {
			junk[j]++
		}
		b.StartTimer()
		record() // fills the batch: applies it
	}
	b.StopTimer()
	if l.nsamples != 0 {
		b.Fatalf("the batch holds %d samples after the timed End, want it applied", l.nsamples)
	}
}
