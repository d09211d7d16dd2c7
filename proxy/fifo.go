package proxy

import (
	"unsafe"

	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/routing/command"
)

// entry kinds: how a pending request is answered.
const (
	kindReply   uint8 = iota // one reply from the engine
	kindSub                  // (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE: one confirmation per channel
	kindLocal                // answered by the proxy itself (a protocol error), then close
	kindDiscard              // a replayed state command after a handoff: its reply is dropped
	kindBarrier              // the proxy's own ECHO after requests without replies: its reply ('$' or '-') is dropped
)

// pending is one request sent (or about to be sent) upstream and not yet
// answered. Times are nanoseconds on the loop's monotonic clock.
type pending struct {
	tIn   int64 // request complete from the client
	tSent int64 // written to the upstream (0 while held for a dialing upstream)
	cmd   command.ID
	kind  uint8
	// expect is, for kindSub, the confirmations still to come; 0 means "until
	// the subscription count of subFamily drops to 0" (UNSUBSCRIBE with no
	// channel names).
	expect    int32
	subFamily uint8
	flags     uint8
	argc      int32          // arguments including the command name (for the slow log)
	key       slowlog.KeyBuf // first key, only when the slow log is on
}

// pendingSize is the memory one queued request costs, counted against the
// client's query limit.
const pendingSize = int(unsafe.Sizeof(pending{}))

// pending.flags
const (
	flagQuit     uint8 = 1 << iota // QUIT: close the client after its reply
	flagMonitor                    // MONITOR: the connection turns into a feed
	flagBlocking                   // may block in the engine (BLPOP, WAIT, ...)
	flagReset                      // RESET: leaves subscribe and monitor mode
	flagSync                       // SYNC/PSYNC: the connection turns into a replication stream
	flagSetName                    // sets the client name (s.names holds it) if it succeeds
)

// fifo is a ring of pending requests in the order they were sent; the engine
// answers in that order. It grows by doubling and never shrinks, so the
// steady state allocates nothing.
type fifo struct {
	buf  []pending
	head int
	n    int
}

func (q *fifo) len() int { return q.n }

// push appends e and returns a pointer to the stored copy (valid until the
// next push).
func (q *fifo) push(e pending) *pending {
	if q.n == len(q.buf) {
		nb := make([]pending, max(8, 2*len(q.buf)))
		for i := 0; i < q.n; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	i := (q.head + q.n) % len(q.buf)
	q.buf[i] = e
	q.n++
	return &q.buf[i]
}

// front returns the oldest entry; q must not be empty.
func (q *fifo) front() *pending { return &q.buf[q.head] }

// at returns the i-th oldest entry.
func (q *fifo) at(i int) *pending { return &q.buf[(q.head+i)%len(q.buf)] }

func (q *fifo) pop() pending {
	e := q.buf[q.head]
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return e
}
