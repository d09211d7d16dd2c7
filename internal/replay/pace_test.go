package replay

import (
	"context"
	"sort"
	"syscall"
	"testing"
	"time"
)

// TestWaitUntil: waitUntil never returns before its time, and returns the
// context's error when the context ends first.
func TestWaitUntil(t *testing.T) {
	tm := time.NewTimer(time.Hour)
	tm.Stop()
	ctx := context.Background()
	for i := range 20 {
		at := time.Now().Add(time.Duration(i) * 150 * time.Microsecond)
		if err := waitUntil(ctx, at, tm); err != nil {
			t.Fatal(err)
		}
		if now := time.Now(); now.Before(at) {
			t.Fatalf("wait %d returned %v early", i, at.Sub(now))
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	t0 := time.Now()
	if err := waitUntil(cctx, t0.Add(time.Minute), tm); err != context.Canceled {
		t.Fatalf("error %v, want %v", err, context.Canceled)
	}
	if d := time.Since(t0); d > 30*time.Second {
		t.Fatalf("cancel took %v", d)
	}
}

// BenchmarkWaitUntil waits for deadlines 2 ms apart, as a sender does
// between batches, with waitUntil and with a runtime timer alone (the
// replayer before): cpu-ns/op is the process's CPU time per wait
// (getrusage), late-p50-µs and late-p99-µs how late the waits returned.
func BenchmarkWaitUntil(b *testing.B) {
	for _, bc := range []struct {
		name string
		wait func(ctx context.Context, t time.Time, tm *time.Timer) error
	}{{"paced", waitUntil}, {"timer-only", func(ctx context.Context, t time.Time, tm *time.Timer) error {
		if d := time.Until(t); d > 0 {
			tm.Reset(d)
			<-tm.C
		}
		return nil
	}}} {
		b.Run(bc.name, func(b *testing.B) {
			tm := time.NewTimer(time.Hour)
			tm.Stop()
			late := make([]time.Duration, 0, b.N)
			cpu0 := cpuNow(b)
			start := time.Now()
			for i := range b.N {
				at := start.Add(time.Duration(i+1) * 2 * time.Millisecond)
				_ = bc.wait(context.Background(), at, tm)
				late = append(late, time.Since(at))
			}
			b.ReportMetric(float64(cpuNow(b)-cpu0)/float64(b.N), "cpu-ns/op")
			sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
			b.ReportMetric(float64(late[len(late)/2].Microseconds()), "late-p50-µs")
			b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "late-p99-µs")
		})
	}
}

func cpuNow(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
