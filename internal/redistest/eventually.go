package redistest

import (
	"testing"
	"time"
)

// Eventually polls cond every 5 ms until it returns nil, for at most
// timeout, and fails t with cond's last error if it never does. It is the
// one way the tests wait for a condition: never a bare sleep.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
