package metrics_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/respmeter/respmeter/metrics"
)

// TestInFlightArea: two requests in flight over windows bracketed by clock
// reads; the area must lie between the inner and outer brackets of each
// (truth: ∫L dt), and Load must follow the adds.
func TestInFlightArea(t *testing.T) {
	var f metrics.InFlight
	f.SetClock(time.Now().Add(-time.Hour)) // a large t: a mixed-up S would show
	a0 := f.Area()
	before1 := time.Now()
	f.Add(1)
	after1 := time.Now()
	time.Sleep(20 * time.Millisecond)
	before2 := time.Now()
	f.Add(1)
	after2 := time.Now()
	time.Sleep(30 * time.Millisecond)
	before3 := time.Now()
	if n := f.Add(-2); n != 0 {
		t.Fatalf("Add(-2) = %d, want 0", n)
	}
	after3 := time.Now()
	a1 := f.Area()
	got := time.Duration(a1 - a0)
	// One request from add 1 to add 3, one from add 2 to add 3.
	lo := before3.Sub(after1) + before3.Sub(after2)
	hi := after3.Sub(before1) + after3.Sub(before2)
	if got < lo || got > hi {
		t.Errorf("area %v, want in [%v, %v]", got, lo, hi)
	}
	if f.Load() != 0 {
		t.Errorf("Load %d, want 0", f.Load())
	}
	// Nothing in flight: the area stands still.
	time.Sleep(5 * time.Millisecond)
	if a2 := f.Area(); a2 != a1 {
		t.Errorf("idle area grew by %d", a2-a1)
	}
}

// TestInFlightAreaConcurrent: one goroutine counts requests in and out as
// fast as it can (0 to 3 in flight) while others read the area. The area
// never decreases and grows by at most 3 × the time between two reads; a
// read that mixed the count of one moment with the running sum of another
// would be off by the whole time since the clock's zero (an hour here).
func TestInFlightAreaConcurrent(t *testing.T) {
	var f metrics.InFlight
	f.SetClock(time.Now().Add(-time.Hour))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			f.Add(1)
			f.Add(2)
			f.Add(-3)
		}
	})
	deadline := time.Now().Add(300 * time.Millisecond)
	for range 2 {
		wg.Go(func() {
			// The area's growth between two reads belongs to a window
			// within [the clock read before the first, the one after
			// the second].
			prevT := time.Now()
			prev := f.Area()
			for time.Now().Before(deadline) {
				t0 := time.Now()
				a := f.Area()
				now := time.Now()
				if a < prev || time.Duration(a-prev) > 3*now.Sub(prevT) {
					t.Errorf("area went from %d to %d in %v", prev, a, now.Sub(prevT))
					return
				}
				prev, prevT = a, t0
			}
		})
	}
	time.Sleep(time.Until(deadline))
	close(stop)
	wg.Wait()
	if f.Load() != 0 {
		t.Errorf("Load %d, want 0", f.Load())
	}
}

// BenchmarkInFlightAdd compares an InFlight's Add (a clock read and four
// atomic adds) with the bare atomic counter it replaced in the proxy's
// loops, side by side; each op is one request in and out.
func BenchmarkInFlightAdd(b *testing.B) {
	b.Run("atomic", func(b *testing.B) {
		var n atomic.Int64
		for b.Loop() {
			n.Add(1)
			n.Add(-1)
		}
	})
	b.Run("InFlight", func(b *testing.B) {
		var f metrics.InFlight
		f.SetClock(time.Now())
		for b.Loop() {
			f.Add(1)
			f.Add(-1)
		}
	})
}

// TestInFlightAddAt: changes at given times count from those times, so the
// area of a request in from t=100 ns to t=300 ns is exactly 200 request·ns,
// whatever the clock reads when the area is taken.
func TestInFlightAddAt(t *testing.T) {
	var f metrics.InFlight
	f.SetClock(time.Now().Add(-time.Second))
	f.AddAt(1, 100)
	f.AddAt(2, 150)
	f.AddAt(-2, 250)
	if n := f.AddAt(-1, 300); n != 0 {
		t.Fatalf("count %d after every request left, want 0", n)
	}
	if a := f.Area(); a != 200+2*100 {
		t.Errorf("area %d request·ns, want 400 (1 request for 200 ns, 2 for 100 ns)", a)
	}
}
