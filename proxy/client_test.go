package proxy

import "testing"

// TestOutputGuardHardLimit: queued replies past the limit plus a fixed
// 16 MiB (twice the limit for limits under 16 MiB) evict at once, even for
// a client that keeps taking bytes; below that such a client stays.
func TestOutputGuardHardLimit(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		lim, queued int
		want        bool
	}{
		{64 * mib, 64 * mib, false},
		{64 * mib, 80 * mib, false},
		{64 * mib, 80*mib + 1, true},
		{64 * mib, 128 * mib, true}, // the old hard limit, 2 x 64 MiB
		{1 * mib, 2 * mib, false},
		{1 * mib, 2*mib + 1, true},
	} {
		var g outputGuard
		// the client took bytes: the previous write left more queued
		g.prev = tc.queued + 1
		if got := g.exceeded(tc.queued, 0, 0, tc.lim); got != tc.want {
			t.Errorf("limit %d MiB, %d bytes queued: evict=%v, want %v", tc.lim/mib, tc.queued, got, tc.want)
		}
	}
}
