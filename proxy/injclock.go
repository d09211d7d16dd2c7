package proxy

import (
	"container/heap"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// injClock fires the timers of injected delays (inject.go) on time to
// within a few microseconds. Go's own timers do not: the runtime's idle
// threads wait in epoll_wait with a millisecond timeout, so a 2 ms
// time.AfterFunc often fires 2.1 to 3 ms later, which would add a tail of
// its own to every injected delay. One goroutine per proxy, locked to its
// thread with the thread's timer slack lowered to 1 ns, waits in ppoll
// (a nanosecond timeout, and an eventfd that add writes to when a sooner
// timer comes) until spinWindow before the earliest timer, spins for the
// rest, and runs the timer's function, which hands the request back to
// its event loop (EventLoop.Execute). That hand-over takes the loop a
// while to notice; lead, a running median of it, is taken off the due
// times so that the median request is sent when due. The goroutine
// starts with the first delay and spins only within spinWindow of a due
// timer: with no delay pending it sleeps until one is added.
type injClock struct {
	mu      sync.Mutex
	timers  injTimers
	started bool
	efd     int
	now     func() int64
	lead    atomic.Int64 // ns: median hand-over time of a fired timer (handedOver)
	stop    atomic.Bool
}

// spinWindow is how long before a timer is due the clock stops sleeping
// and spins: more than the wake-up latency of a thread with 1 ns of timer
// slack on an idle core.
const spinWindow = 30_000 // ns

// maxLead bounds lead: a loop that takes longer to notice is late.
const maxLead = 200_000 // ns

type injTimer struct {
	due int64
	fn  func()
}

type injTimers []injTimer

func (h injTimers) Len() int           { return len(h) }
func (h injTimers) Less(i, j int) bool { return h[i].due < h[j].due }
func (h injTimers) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *injTimers) Push(x any)        { *h = append(*h, x.(injTimer)) }
func (h *injTimers) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = injTimer{}
	*h = old[:len(old)-1]
	return x
}

// add runs fn at due (p.now's clock), less the hand-over lead.
func (k *injClock) add(due int64, fn func()) {
	k.mu.Lock()
	if !k.started {
		k.started = true
		efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			efd = -1 // ppoll then only times out: within its 1 ms cap
		}
		k.efd = efd
		go k.run()
	}
	sooner := len(k.timers) == 0 || due < k.timers[0].due
	heap.Push(&k.timers, injTimer{due: due, fn: fn})
	if sooner && k.efd >= 0 {
		one := [8]byte{1}
		_, _ = unix.Write(k.efd, one[:])
	}
	k.mu.Unlock()
}

// handedOver records how late (ns past due) a fired timer's request was
// taken up by its loop. The lead moves 2 µs towards the hand-over time per
// timer, up if this one was late, down if early: it settles on the
// median hand-over time (half the requests a little early, half a little
// late), and one slow hand-over (the first, a loop busy with a burst)
// moves it by 2 µs only.
func (k *injClock) handedOver(late int64) {
	const step = 2_000 // ns
	switch l := k.lead.Load(); {
	case late > 0:
		k.lead.Store(min(l+step, maxLead))
	case late < 0:
		k.lead.Store(max(l-step, 0))
	}
}

func (k *injClock) close() {
	k.stop.Store(true)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.started && k.efd >= 0 {
		one := [8]byte{1}
		_, _ = unix.Write(k.efd, one[:])
	}
}

func (k *injClock) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	k.mu.Lock()
	efd := k.efd
	k.mu.Unlock()
	fds := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
	var buf [8]byte
	for !k.stop.Load() {
		k.mu.Lock()
		idle := len(k.timers) == 0
		wait := int64(1_000_000) // without an eventfd: a look every 1 ms
		if !idle {
			wait = k.timers[0].due - k.lead.Load() - k.now()
		}
		k.mu.Unlock()
		if wait > spinWindow {
			ts := unix.NsecToTimespec(min(wait-spinWindow, 1_000_000))
			tp := &ts
			if idle {
				tp = nil // until add or close writes the eventfd
			}
			var err error
			if efd >= 0 {
				_, err = unix.Ppoll(fds, tp, nil)
				_, _ = unix.Read(efd, buf[:])
			} else {
				err = unix.Nanosleep(&ts, nil)
			}
			if err != nil && !errors.Is(err, unix.EINTR) {
				return
			}
			continue
		}
		// Within spinWindow of the earliest timer: spin, then fire every
		// timer due by now.
		k.mu.Lock()
		for len(k.timers) > 0 {
			due := k.timers[0].due - k.lead.Load()
			if now := k.now(); now < due {
				if due-now > spinWindow {
					break // a sooner timer was taken; sleep again
				}
				k.mu.Unlock()
				for k.now() < due {
				}
				k.mu.Lock()
				continue
			}
			t := heap.Pop(&k.timers).(injTimer)
			k.mu.Unlock()
			t.fn()
			k.mu.Lock()
		}
		k.mu.Unlock()
	}
	k.mu.Lock()
	if k.efd >= 0 {
		_ = unix.Close(k.efd)
		k.efd = -1
	}
	k.mu.Unlock()
}
