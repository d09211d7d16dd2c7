package metrics

import (
	"runtime"
	"sync/atomic"
	"time"
)

// InFlight counts the requests in flight (sent by clients, not yet
// answered) and integrates that count over time exactly: Area is the area
// under the step function L(t), in request·nanoseconds, so that the mean
// in flight over an interval is the difference of two Areas divided by the
// interval's length — Little's law's own definition of L (Little, "A
// Proof for the Queuing Formula: L = λW", Operations Research 9(3), 1961:
// L is the time average of the number in the system).
//
// Nothing is sampled. Each Add(delta) at time t adds delta·t to a running
// sum S, and at time t the area since the clock's zero is n·t − S
// (∫₀ᵗ L = Σ deltaᵢ·(t − tᵢ)). A sampler reads the count at moments that a
// busy process chooses for it (a Go timer fires at the process's next
// wake-up, which a request or a reply causes), and even an unbiased one
// needs ~p(1−p)/(0.15p)² samples to tell a share p in flight within 15 %
// (≈ 800 for 5 %: eight seconds at 100 Hz); the area has neither problem.
// It holds the proxy's own view of in flight — a request counts from the
// moment the proxy's loop takes it in to the moment it hands the reply back
// — the same moments the latency phases are timed at, so a late loop shifts
// both sides of Little's law alike.
//
// The arithmetic wraps (two's complement), so a difference of two Areas is
// exact as long as the difference itself fits in an int64: 292 years of one
// request in flight.
//
// A sequence count guards the pair (count, S): a reader that mixed an old
// count with a new S would be off by delta·t, t being the whole time since
// the clock's zero, so Area retries until it has read both between two
// Adds. Add is meant for one goroutine at a time (a proxy loop), Load and
// Area for any goroutine; Add allocates nothing and costs one monotonic
// clock read and four atomic adds. The zero value counts but has no clock:
// call SetClock before the first Add.
type InFlight struct {
	seq  atomic.Uint64 // odd while an Add updates n and wsum
	n    atomic.Int64  // requests in flight
	wsum atomic.Int64  // S = Σ deltaᵢ·tᵢ, tᵢ in ns since base (wraps)
	base time.Time     // the clock's zero (its monotonic reading counts)
}

// SetClock sets the zero of the monotonic clock that Add and Area read
// (e.g. the proxy's start). Call it before any Add.
func (f *InFlight) SetClock(base time.Time) { f.base = base }

// Add adds delta (negative: answered) to the requests in flight and
// returns the new count.
func (f *InFlight) Add(delta int64) int64 {
	f.seq.Add(1)
	// The clock is read inside the odd section: an Area read before it
	// began has its own clock read before this one, so an Add never counts
	// from a moment before a read that did not see it (a thread preempted
	// between its clock read and the update would change the past).
	t := int64(time.Since(f.base))
	n := f.n.Add(delta)
	f.wsum.Add(delta * t)
	f.seq.Add(1)
	return n
}

// AddAt is Add at time t, in nanoseconds since the clock's zero, read by
// the caller: a proxy loop passes the clock reads it times requests with
// (t_in as a request is taken in, t_out as replies are written), so that
// the count changes at the very moments the latencies are measured from
// and Add's own clock read is saved. t precedes the update by the caller's
// work since its read (microseconds): an Area read in between misses
// delta·(its time − t) of this change, which later Areas include, so a
// difference of Areas is off by at most that much (never by delta·t).
func (f *InFlight) AddAt(delta, t int64) int64 {
	f.seq.Add(1)
	n := f.n.Add(delta)
	f.wsum.Add(delta * t)
	f.seq.Add(1)
	return n
}

// Load returns the number of requests in flight.
func (f *InFlight) Load() int64 { return f.n.Load() }

// Area returns the area under the count from the clock's zero to now, in
// request·nanoseconds (wrapping: only differences of Areas mean anything).
func (f *InFlight) Area() int64 {
	for {
		s := f.seq.Load()
		if s&1 == 0 {
			n, w := f.n.Load(), f.wsum.Load()
			t := int64(time.Since(f.base))
			if f.seq.Load() == s {
				return n*t - w
			}
		}
		runtime.Gosched()
	}
}
