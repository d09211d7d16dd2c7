package redistest

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Geometry of a DelayRelay direction.
const (
	// delayReadSize is the largest chunk one read takes off a socket.
	delayReadSize = 64 << 10
	// delayQueueLen bounds the chunks held per direction: a reader that
	// finds the queue full waits (back-pressure on the sender, as a full
	// link would), so a fast sender cannot make the relay grow.
	delayQueueLen = 256
	// spinWindow is how long before a due time a sleeper stops sleeping
	// and spins: it absorbs the wake-up latency of the kernel (a halted
	// vCPU takes tens of µs to wake) and of the Go runtime (the woken
	// thread must get a P back after its syscall). Measured on a 2-core
	// VM: clock_nanosleep(1 ms) alone ends 25-35 µs late at the median.
	spinWindow = 50 * time.Microsecond
)

// StartDelayRelay listens on a free loopback port and relays every
// accepted connection to upstream, holding every chunk for a known time in
// each direction: a chunk is stamped when its read returns and written at
// stamp+oneWay, so a request-reply round trip through the relay takes
// 2*oneWay more than through a relay with oneWay 0. Chunks are never
// reordered and never merged; a direction holds at most 256 of them (a
// reader waits while its queue is full, which pushes back on the sender).
//
// Each direction is a reader goroutine and a writer goroutine joined by a
// queue; oneWay 0 is a plain relay with exactly the same structure (the
// chunk is stamped, queued, and written at once), so the relay's own
// overhead is the same with and without the delay and a difference of two
// measurements is the delay alone.
//
// Why not time.Sleep: the Go runtime parks an idle thread in epoll_wait,
// whose timeout is in whole milliseconds, and runs a due timer at the next
// wake-up, so a 1 ms sleep ends 80-150 µs late typically and up to ~1 ms
// late. The writer instead runs on a goroutine locked to its own OS thread,
// with that thread's timer slack (PR_SET_TIMERSLACK, default 50 µs) lowered
// to 1 ns, sleeps with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) until
// 50 µs before the chunk is due and spins for the rest (see sleepUntil): a
// chunk goes out within a few µs of its due time. The thread is never
// unlocked, so it exits with the goroutine and its timer slack never
// reaches another goroutine. While it sleeps the thread keeps its P (see
// sleepUntil); timing tests should raise GOMAXPROCS.
//
// A half-close (EOF) is passed on after the queued chunks; the relay
// closes both sockets when both directions have ended or a write fails.
// Everything is closed, and the goroutines waited for, by t.Cleanup.
func StartDelayRelay(t testing.TB, upstream string, oneWay time.Duration) (addr string) {
	t.Helper()
	return startDelayRelay(t, upstream, oneWay, true).ln.Addr().String()
}

// delayRelay is the relay behind StartDelayRelay. precise false makes the
// writers sleep with time.Sleep on ordinary goroutines instead: kept only so
// that the tests can show why that is not good enough.
type delayRelay struct {
	ln       net.Listener
	upstream string
	oneWay   time.Duration
	precise  bool

	mu     sync.Mutex
	conns  map[*delayConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func startDelayRelay(t testing.TB, upstream string, oneWay time.Duration, precise bool) *delayRelay {
	t.Helper()
	if oneWay < 0 {
		t.Fatalf("redistest: delay relay: negative delay %v", oneWay)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: delay relay listen: %v", err)
	}
	r := &delayRelay{ln: ln, upstream: upstream, oneWay: oneWay, precise: precise, conns: map[*delayConn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

// delayConn is one relayed connection: the client side and its upstream.
type delayConn struct {
	client, up net.Conn
	once       sync.Once
	mu         sync.Mutex
	ended      int // directions whose writer has finished
}

// kill closes both sockets; the readers then fail and end their queues.
func (c *delayConn) kill() {
	c.once.Do(func() {
		_ = c.client.Close()
		_ = c.up.Close()
	})
}

// directionEnded closes both sockets once both writers are done.
func (c *delayConn) directionEnded() {
	c.mu.Lock()
	c.ended++
	both := c.ended == 2
	c.mu.Unlock()
	if both {
		c.kill()
	}
}

// delayChunk is one read, stamped with the time (nowNs) at which it is due
// to be written.
type delayChunk struct {
	b   []byte
	due int64
}

func (r *delayRelay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.DialTimeout("tcp", r.upstream, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		dc := &delayConn{client: c, up: u}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			dc.kill()
			return
		}
		r.conns[dc] = struct{}{}
		r.wg.Add(4)
		r.mu.Unlock()
		toUp := make(chan delayChunk, delayQueueLen)
		toClient := make(chan delayChunk, delayQueueLen)
		go r.read(c, toUp)
		go r.write(dc, u, toUp)
		go r.read(u, toClient)
		go r.write(dc, c, toClient)
	}
}

// read stamps every chunk read from src and queues it; it closes q when src
// ends (EOF, error, or the relay closing it).
func (r *delayRelay) read(src net.Conn, q chan<- delayChunk) {
	defer r.wg.Done()
	defer close(q)
	buf := make([]byte, delayReadSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- delayChunk{b: append([]byte(nil), buf[:n]...), due: nowNs() + int64(r.oneWay)}
		}
		if err != nil {
			return
		}
	}
}

// write writes every queued chunk to dst when it is due, in order. After
// the queue ends it half-closes dst; after a failed write it closes the
// connection and discards the rest of the queue, so that its reader never
// waits on a full queue.
func (r *delayRelay) write(dc *delayConn, dst net.Conn, q <-chan delayChunk) {
	defer r.wg.Done()
	if r.precise {
		// Never unlocked: the thread exits with this goroutine, and with it
		// the lowered timer slack.
		runtime.LockOSThread()
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	}
	failed := false
	for c := range q {
		if failed {
			continue
		}
		r.sleepUntil(c.due)
		if _, err := dst.Write(c.b); err != nil {
			failed = true
			dc.kill()
		}
	}
	if !failed {
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	dc.directionEnded()
}

// sleepUntil returns once the clock (nowNs) has reached due. It does not
// sleep at all for a chunk already due, which is every chunk of a relay
// with no delay.
func (r *delayRelay) sleepUntil(due int64) {
	now := nowNs()
	if now >= due {
		return
	}
	if !r.precise {
		time.Sleep(time.Duration(due - now))
		return
	}
	sleepUntil(due)
}

// sleepUntil returns at due (nowNs) to within a few µs: it sleeps in
// clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) until spinWindow before
// due (the caller has lowered its thread's timer slack), then spins, which
// absorbs the thread's wake-up latency.
//
// A thread in a system call keeps its P (the Go runtime's right to run Go
// code) until the runtime's monitor takes it back, which it does only when
// other goroutines need it, after 20 µs to 10 ms; in a process with few Ps
// (GOMAXPROCS) whose other threads also block in system calls (gnet's event
// loops wait in epoll_wait), goroutines woken meanwhile may wait for a P.
// Timing tests that sleep this way should raise GOMAXPROCS.
func sleepUntil(due int64) {
	if wake := due - int64(spinWindow); wake > nowNs() {
		ts := unix.NsecToTimespec(monoBase + wake)
		for {
			// Absolute, so an interruption (the Go runtime's preemption
			// signal) is retried without drift.
			err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
	}
	for nowNs() < due {
	}
}

// MoreProcs raises GOMAXPROCS to at least 8 for the rest of t (restored by
// t.Cleanup). Precise sleepers (StartDelayRelay's writers, SleepPrecise,
// samplers) sleep in clock_nanosleep, and a thread in a system call keeps
// its P until the runtime's monitor takes it back (after 20 µs to 10 ms,
// and only when another goroutine needs it); gnet's event loops, blocked
// in epoll_wait, hold theirs the same way. With GOMAXPROCS=2 the proxy's
// and the clients' goroutines then wait for a P: measured, a closed loop
// of DEBUG SLEEP 0.002 slowed from 2.3 to 3.1 ms per request while a
// sampler slept beside it, and a relay set to 2 ms each way added 9-15 ms
// to a client beside three sleeping clients. Extra Ps cost nothing while
// idle.
func MoreProcs(t testing.TB) {
	if old := runtime.GOMAXPROCS(0); old < 8 {
		runtime.GOMAXPROCS(8)
		t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	}
}

// The relay's clock: nanoseconds since clockBase on Go's monotonic clock
// (vDSO, no system call, so it can be spun on), and monoBase, the
// CLOCK_MONOTONIC reading taken at the same moment, to convert a due time
// for clock_nanosleep (to within the ~1 µs between the two readings).
var (
	clockBase = time.Now()
	monoBase  = func() int64 {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		return ts.Nano()
	}()
)

func nowNs() int64 { return int64(time.Since(clockBase)) }

// SleepPrecise pauses the calling goroutine for d with the precision of
// the kernel's high-resolution timers rather than the Go runtime's (whose
// idle threads wait in epoll_wait with a millisecond timeout, so that
// time.Sleep(3*time.Millisecond) often lasts 3.1 to 4 ms): it locks the
// goroutine to its thread, lowers the thread's timer slack to 1 ns, sleeps
// with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) until 50 µs before
// the end, spins for the rest, and restores the slack before unlocking. It
// occupies a thread for d and a CPU for the last 50 µs; meant for tests
// that need a client with a known think time.
func SleepPrecise(d time.Duration) {
	if d <= 0 {
		return
	}
	due := nowNs() + int64(d)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err == nil {
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
		defer func() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(old), 0, 0, 0) }()
	}
	sleepUntil(due)
}

// close stops accepting, closes every relayed connection and waits for the
// relay's goroutines (a writer asleep wakes within oneWay and fails its
// write).
func (r *delayRelay) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.kill()
	}
	r.mu.Unlock()
	_ = r.ln.Close()
	r.wg.Wait()
}
