package redistest

import (
	"testing"
	"time"
)

// Eventually polls cond every 5 ms until it returns nil, for at most
// timeout, and fails t with cond's last error if it never does. It is the
// one way the tests wait for a condition: never a bare sleep, never a
// deadline loop of their own. EventuallyEvery polls at another period;
// Await waits the same way and leaves the verdict to the caller.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	EventuallyEvery(t, timeout, 5*time.Millisecond, cond)
}

// EventuallyEvery is Eventually polling every every: for a condition that
// is costly to evaluate (a page in a browser, an engine's INFO) or one
// that compares a reading with the one a period before (a count that has
// stopped changing).
func EventuallyEvery(t testing.TB, timeout, every time.Duration, cond func() error) {
	t.Helper()
	if err := Await(timeout, every, cond); err != nil {
		t.Fatalf("after %v: %v", timeout, err)
	}
}

// Await polls cond every every until it returns nil, for at most timeout,
// and returns nil then, or cond's last error: for a wait after which the
// test asserts what it found itself (a count that may legitimately fall
// short, a check that is an Errorf, not a Fatalf). cond runs at least
// once.
func Await(timeout, every time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(every)
	}
}
