package metrics_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/respmeter/respmeter/metrics"
)

func TestWriteTableGolden(t *testing.T) {
	tests := []struct {
		name string
		set  *metrics.Set
	}{
		{"table.txt", populated()},
		{"table_empty.txt", metrics.NewSet(1, testNames)},
		{"table_injected.txt", injectedSet()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tc.set.WriteTable(&buf); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, buf.Bytes())
		})
	}
}

// injectedSet is a Set of GETs a 2 ms delay rule touched (two of three)
// and SETs none did: the table adds an injected block, its percentiles
// over the delayed GETs, and proxy leaves the delay out.
func injectedSet() *metrics.Set {
	s := metrics.NewSet(1, testNames)
	l := s.Loop(0)
	l.Lock()
	l.ObserveInjectedLocked(cmdGet, 2200*time.Microsecond, 150*time.Microsecond, 150*time.Microsecond, 2*time.Millisecond, false)
	l.ObserveInjectedLocked(cmdGet, 2300*time.Microsecond, 200*time.Microsecond, 200*time.Microsecond, 2050*time.Microsecond, false)
	l.ObserveLocked(cmdGet, 210*time.Microsecond, 160*time.Microsecond, 160*time.Microsecond, false)
	l.ObserveLocked(cmdSet, 250*time.Microsecond, 190*time.Microsecond, 190*time.Microsecond, false)
	l.Unlock()
	return s
}
