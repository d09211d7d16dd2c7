package replay

import (
	"context"
	"runtime"
	"time"
)

// The sender waits for a batch's intended time in three steps, so that it
// sends within about 0.1 ms of it on a quiet machine without burning a
// core per connection:
//   - a runtime timer up to timerSlack before it: Go's timers fire up to
//     about 1 ms late (the scheduler's idle sleep is in whole
//     milliseconds; 0.6 ms late at the median on a 2-core machine);
//   - a sleep of the OS thread (nanosleep, high-resolution kernel timers:
//     about 0.05-0.2 ms late) up to spinFor before it;
//   - a loop yielding to other goroutines until it.
//
// The CPU this costs per batch is the yield loop (at most spinFor) and one
// system call; BENCHMARKS.md has the figures.
const (
	timerSlack = time.Millisecond
	spinFor    = 100 * time.Microsecond
)

// waitUntil returns once t has come (or at once when it has passed), or
// with ctx's error when ctx ends first. tm is the caller's timer, reused
// (stopped or fired).
func waitUntil(ctx context.Context, t time.Time, tm *time.Timer) error {
	if d := time.Until(t) - timerSlack; d > 0 {
		tm.Reset(d)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		}
	}
	for d := time.Until(t) - spinFor; d > 0; d = time.Until(t) - spinFor {
		threadSleep(d)
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
	return ctx.Err()
}
