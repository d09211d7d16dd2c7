package redistest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// Retry runs a timing measurement up to attempts times and passes if one
// attempt passes: on a shared 2-core machine a neighbour's burst can starve
// the clients, a relay or the engine for a second, which tests the
// neighbours, not the code. Each attempt runs body on a goroutine of its
// own with a testing.TB whose failures are collected (Fatal and Skip end
// the attempt) and whose cleanups run, last first, when the attempt ends,
// before the next one starts. Each attempt's failures are logged; only the
// last attempt's are reported as errors. A Skip inside an attempt skips the
// test. Call it from the test's goroutine; use it only with an oracle
// measured in the same attempt.
func Retry(t *testing.T, attempts int, body func(testing.TB)) {
	t.Helper()
	for i := 1; ; i++ {
		a := &attempt{TB: t}
		onGoroutine(func() { body(a) })
		for j := len(a.cleanups) - 1; j >= 0; j-- {
			onGoroutine(a.cleanups[j])
		}
		switch {
		case a.skip != "":
			t.Skip(a.skip)
		case len(a.errs) == 0:
			if i > 1 {
				t.Logf("passed on attempt %d of %d", i, attempts)
			}
			return
		case i >= attempts:
			for _, e := range a.errs {
				t.Error(e)
			}
			return
		}
		t.Logf("attempt %d of %d failed, retrying:\n%s", i, attempts, strings.Join(a.errs, "\n"))
	}
}

// onGoroutine runs f on a goroutine of its own (where an attempt's Fatal
// may end it) and waits for it.
func onGoroutine(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// attempt is the testing.TB of one Retry attempt.
type attempt struct {
	testing.TB
	errs     []string
	skip     string
	cleanups []func()
}

func (a *attempt) Cleanup(f func())  { a.cleanups = append(a.cleanups, f) }
func (a *attempt) Error(args ...any) { a.errs = append(a.errs, fmt.Sprint(args...)) }
func (a *attempt) Errorf(format string, args ...any) {
	a.errs = append(a.errs, fmt.Sprintf(format, args...))
}
func (a *attempt) Fatal(args ...any)                 { a.Error(args...); runtime.Goexit() }
func (a *attempt) Fatalf(format string, args ...any) { a.Errorf(format, args...); runtime.Goexit() }
func (a *attempt) FailNow()                          { a.errs = append(a.errs, "FailNow"); runtime.Goexit() }
func (a *attempt) Fail()                             { a.errs = append(a.errs, "Fail") }
func (a *attempt) Failed() bool                      { return len(a.errs) > 0 }
func (a *attempt) Skip(args ...any)                  { a.skip = fmt.Sprint(args...); runtime.Goexit() }
func (a *attempt) Skipf(format string, args ...any) {
	a.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (a *attempt) SkipNow() { a.Skip("skipped") }
