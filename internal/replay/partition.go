package replay

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/respmeter/respmeter/internal/capture"
)

// Partitioned replay: N workers (processes, usually on N machines) each
// replay one share of the same capture, started together at one
// wall-clock instant (Options.StartAt), and their reports are merged
// afterwards (Merge). No coordinator is needed: every worker loads the
// whole capture and computes the same assignment from it.

// Partitioning modes (Partition.By).
const (
	// ByConnection gives each captured connection, whole, to one worker:
	// the workload's connections (in its order: by first batch, then by
	// file and record order) are dealt round-robin, connection k to
	// worker k mod N. Each connection's commands keep their order and
	// batches, so its replies compare as in an unpartitioned replay.
	ByConnection = "connection"
	// BySlot gives each command to the worker owning its key's hash slot
	// (slot*N/16384, contiguous slot ranges as a cluster's masters hold
	// them; keyless commands to their connection's ByConnection worker).
	// Caveat: a connection's commands on different workers are no longer
	// ordered with each other, pipelines are split, and MULTI/EXEC, WATCH
	// and commands whose keys lie in several ranges run apart from their
	// neighbours: replies that depend on the order across slots (a GET
	// after a SET of another slot in one transaction, a blocking pop
	// woken by another connection) may differ from the captured ones.
	BySlot = "slot"
)

// numSlots is the Redis cluster's hash slot count (cluster spec).
const numSlots = 16384

// Partition is one worker's share of a workload: Index of Count
// (0 ≤ Index < Count), assigned By ByConnection or BySlot.
type Partition struct {
	Index, Count int
	By           string
}

// ParsePartition parses "I/N" (0 ≤ I < N, both decimal) and by (""
// meaning ByConnection).
func ParsePartition(s, by string) (Partition, error) {
	if by == "" {
		by = ByConnection
	}
	if by != ByConnection && by != BySlot {
		return Partition{}, fmt.Errorf("partition by %q: %s or %s", by, ByConnection, BySlot)
	}
	is, ns, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(is)
	n, err2 := strconv.Atoi(ns)
	if !ok || err1 != nil || err2 != nil || n < 1 {
		return Partition{}, fmt.Errorf("partition %q: want I/N, worker I of N counted from 0, such as 0/4", s)
	}
	if i < 0 || i >= n {
		return Partition{}, fmt.Errorf("partition %q: the index must be 0 to %d for %d workers", s, n-1, n)
	}
	if by == BySlot && n > numSlots {
		return Partition{}, fmt.Errorf("partition %q: at most %d workers by slot", s, numSlots)
	}
	return Partition{Index: i, Count: n, By: by}, nil
}

// String is "I/N".
func (p Partition) String() string { return fmt.Sprintf("%d/%d", p.Index, p.Count) }

// ConnName names a captured connection stably across workers: "F:ID",
// the index of its file among those loaded and its id in that file (as
// "respmeter capture info" lists them).
func ConnName(c *capture.Conn) string { return fmt.Sprintf("%d:%d", c.File, c.ID) }

// Select returns the part of w that p replays, and the names (ConnName)
// of all of w's connections, in w's order. w is not changed; the result
// shares its requests. slotOf gives a request's hash slot, ok false for
// a keyless one; only BySlot calls it.
func (p Partition) Select(w *capture.Workload, slotOf func(name string, req []byte) (slot int, ok bool)) (part *capture.Workload, all []string) {
	part = &capture.Workload{Start: w.Start, Flags: w.Flags}
	for k, c := range w.Conns {
		all = append(all, ConnName(c))
		mine := k%p.Count == p.Index
		if p.By == ByConnection {
			if mine {
				part.Conns = append(part.Conns, c)
			}
			continue
		}
		nc := &capture.Conn{File: c.File, ID: c.ID, State: c.State}
		for _, b := range c.Batches {
			nb := capture.Batch{T: b.T}
			for _, cmd := range b.Cmds {
				s, ok := slotOf(cmd.Name, cmd.Req)
				if ok && s*p.Count/numSlots == p.Index || !ok && mine {
					nb.Cmds = append(nb.Cmds, cmd)
				}
			}
			if len(nb.Cmds) > 0 {
				nc.Batches = append(nc.Batches, nb)
			}
		}
		if len(nc.Batches) > 0 || mine && len(nc.State) > 0 {
			part.Conns = append(part.Conns, nc)
		}
	}
	for _, c := range part.Conns {
		if len(c.Batches) > 0 {
			part.Duration = max(part.Duration, c.Batches[len(c.Batches)-1].T)
		}
	}
	return part, all
}

// Start is when a replay given Options.StartAt started its schedule.
type Start struct {
	// At is Options.StartAt.
	At time.Time `json:"at"`
	// SkewUS is how late, in microseconds by this machine's clock, the
	// replay started after At (connections are made before; it is more
	// than a few hundred µs only when they took past At). Between
	// machines add their clocks' offsets (chronyc tracking).
	SkewUS int64 `json:"skew_us"`
	// ReadyUS is how long before At the replay was ready to start
	// (connected, connection state sent), in microseconds; negative when
	// it was ready only after At, which then is most of the skew: a later
	// At leaves the workers time to load the capture and connect.
	ReadyUS int64 `json:"ready_before_us"`
}

// startAt waits for at and records the skew in rep.Start. It returns the
// schedule's start: at, with this process's monotonic clock reading.
func (rep *Report) startAt(ctx context.Context, at time.Time) (time.Time, error) {
	ready := time.Until(at)
	tm := time.NewTimer(time.Hour)
	tm.Stop()
	if err := waitUntil(ctx, at, tm); err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	skew := now.Sub(at)
	rep.Start = &Start{At: at, SkewUS: int64(skew / time.Microsecond), ReadyUS: int64(ready / time.Microsecond)}
	return now.Add(-skew), nil
}

// Histograms returns command name's histograms (µs): captured total time,
// replayed from the intended send time and from the actual send; nil when
// name was not replayed. They belong to rep.
func (rep *Report) Histograms(name string) (captured, replayed, sent *hdrhistogram.Histogram) {
	if s := rep.PerCommand[name]; s != nil {
		return s.captured, s.replayed, s.sent
	}
	return nil, nil, nil
}

// SendLag returns the histogram (µs) of how late batches were sent.
func (rep *Report) SendLag() *hdrhistogram.Histogram { return rep.lag }
