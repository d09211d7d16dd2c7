package redistest

import (
	"slices"
	"testing"
)

// TestRetry: a failed attempt (Errorf, then Fatal ending it) has its
// cleanups run, last first, before the next attempt starts; a passing
// attempt ends the retries and the test passes.
func TestRetry(t *testing.T) {
	var events []string
	attempts := 0
	Retry(t, 3, func(tb testing.TB) {
		attempts++
		n := string(rune('0' + attempts))
		events = append(events, "start "+n)
		tb.Cleanup(func() { events = append(events, "cleanup a"+n) })
		tb.Cleanup(func() { events = append(events, "cleanup b"+n) })
		if attempts == 1 {
			tb.Errorf("first attempt fails")
			tb.Fatal("and ends here")
			events = append(events, "after Fatal") // never reached
		}
	})
	want := []string{"start 1", "cleanup b1", "cleanup a1", "start 2", "cleanup b2", "cleanup a2"}
	if attempts != 2 || !slices.Equal(events, want) {
		t.Errorf("%d attempts, events %q; want 2, %q", attempts, events, want)
	}
}
