package split

import (
	"strings"
	"testing"
	"time"
)

func TestVerdict(t *testing.T) {
	const us = time.Microsecond
	for _, tc := range []struct {
		name  string
		iv    Interval
		bound string
		cycle time.Duration
		want  string
	}{
		{
			name: "client-bound",
			// 100 requests: total 100µs each (upstream 80, proxy 20), think 300µs each, engine 10µs.
			iv: Interval{Length: time.Second, Requests: 100, Total: 10000 * us, Upstream: 8000 * us,
				Proxy: 2000 * us, Think: 30000 * us, ThinkCount: 100, EngineMean: 10 * us, InFlight: 0.01},
			bound: "client-bound", cycle: 400 * us,
			want: "cycle 400µs: client 75% | path 18% | engine 2% | proxy 5% — client-bound; Little: L 0.01 vs λW 0.01",
		},
		{
			name: "engine-bound",
			iv: Interval{Length: time.Second, Requests: 10, Total: 60000 * us, Upstream: 55000 * us,
				Proxy: 5000 * us, EngineMean: 5000 * us, InFlight: -1},
			bound: "engine-bound", cycle: 6000 * us,
		},
		{
			name:  "engine unknown",
			iv:    Interval{Requests: 1, Total: 100 * us, Upstream: 90 * us, Proxy: 10 * us, InFlight: -1},
			bound: "path-bound", cycle: 100 * us,
			want: "cycle 100µs: client 0% | path 90% | engine n/a (no engine stats for these commands) | proxy 10% — path-bound",
		},
		{
			name:  "engine capped at upstream",
			iv:    Interval{Requests: 1, Total: 100 * us, Upstream: 90 * us, Proxy: 10 * us, EngineMean: time.Second, InFlight: -1},
			bound: "engine-bound", cycle: 100 * us,
		},
		{name: "idle", iv: Interval{}, bound: "idle", want: "no requests in the interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.iv.Verdict()
			if v.Bound != tc.bound || v.Cycle != tc.cycle {
				t.Errorf("bound %q cycle %v, want %q %v", v.Bound, v.Cycle, tc.bound, tc.cycle)
			}
			if v.Bound != "idle" {
				if sum := v.Client + v.Path + v.Engine + v.Proxy; sum < 0.999 || sum > 1.001 {
					t.Errorf("shares sum to %v", sum)
				}
			}
			if tc.want != "" && v.String() != tc.want {
				t.Errorf("String() = %q\n want %q", v.String(), tc.want)
			}
			if !strings.Contains(v.String(), tc.bound) && tc.bound != "idle" {
				t.Errorf("String() lacks %q", tc.bound)
			}
		})
	}
}
