package replay

import (
	"syscall"
	"time"
)

// threadSleep blocks the calling OS thread for about d (nanosleep(2),
// which may return early on a signal: callers loop).
func threadSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
