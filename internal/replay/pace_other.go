//go:build !linux

package replay

import "time"

// threadSleep sleeps for about d: off Linux on a runtime timer, so the
// sender is as late as Go's timers are (up to about 1 ms).
func threadSleep(d time.Duration) { time.Sleep(d) }
