package replay

import (
	"fmt"
	"sort"
	"time"

	"github.com/respmeter/respmeter/internal/capture"
)

// minRaceWindow is the shortest window (replayed time) in which two
// connections' commands are taken to be possibly reordered by a paced
// replay.
const minRaceWindow = 10 * time.Millisecond

// write is one captured write of a key: the connection's index in the
// workload and the batch's time (ns since the workload's start).
type write struct {
	conn int
	t    int64
}

// classify marks the mismatches whose key another captured connection
// wrote within the race window (Report.PossibleRaces), and says so in
// their samples. It reads the whole workload twice, after the replay: once
// to find where each mismatching command was, once for the writes of the
// keys they touched.
func (rep *Report) classify(w *capture.Workload, o Options) {
	defer func() {
		// The report keeps nothing of the workload.
		rep.mismatched = nil
		for _, ss := range [][]Sample{rep.MismatchSamples, rep.NewErrorSamples, rep.GoneErrSamples} {
			for i := range ss {
				ss[i].cmd = nil
			}
		}
	}()
	if o.Keys == nil || len(rep.mismatched) == 0 {
		return
	}
	window := w.Duration
	if o.Speed > 0 {
		lag := time.Duration(2*rep.SendLagP99US) * time.Microsecond
		window = int64(float64(max(minRaceWindow, lag)) * o.Speed)
	}
	rep.RaceWindowSeconds = float64(window) / 1e9
	type at struct {
		write
		keys []string
	}
	where := make(map[*capture.Cmd]*at, len(rep.mismatched))
	for _, c := range rep.mismatched {
		where[c] = nil
	}
	keys := map[string][]write{} // keys of mismatching commands: their writes
	for ci, c := range w.Conns {
		for bi := range c.Batches {
			b := &c.Batches[bi]
			for i := range b.Cmds {
				cmd := &b.Cmds[i]
				if _, ok := where[cmd]; !ok {
					continue
				}
				ks, _ := o.Keys(cmd.Name, cmd.Req)
				a := &at{write: write{ci, b.T}}
				for _, k := range ks {
					a.keys = append(a.keys, string(k))
					keys[string(k)] = nil
				}
				where[cmd] = a
			}
		}
	}
	for ci, c := range w.Conns {
		for _, b := range c.Batches {
			for i := range b.Cmds {
				ks, wr := o.Keys(b.Cmds[i].Name, b.Cmds[i].Req)
				if !wr {
					continue
				}
				for _, k := range ks {
					if ws, ok := keys[string(k)]; ok {
						keys[string(k)] = append(ws, write{ci, b.T})
					}
				}
			}
		}
	}
	// race returns the key of cmd another connection wrote within the
	// window and how far apart, or false.
	race := func(cmd *capture.Cmd) (string, time.Duration, bool) {
		a := where[cmd]
		if a == nil {
			return "", 0, false
		}
		for _, k := range a.keys {
			for _, wr := range keys[k] {
				d := wr.t - a.t
				if wr.conn != a.conn && max(d, -d) <= window {
					return k, time.Duration(max(d, -d)), true
				}
			}
		}
		return "", 0, false
	}
	for _, c := range rep.mismatched {
		if _, _, ok := race(c); ok {
			rep.PossibleRaces++
			rep.PerCommand[c.Name].PossibleRaces++
		}
	}
	for i := range rep.MismatchSamples {
		s := &rep.MismatchSamples[i]
		if k, d, ok := race(s.cmd); ok {
			s.Class = fmt.Sprintf("possible race: key %q also written by another captured connection %v apart", trunc([]byte(k)), d.Round(time.Microsecond))
		} else if where[s.cmd] != nil {
			s.Class = "not a race: no other captured connection wrote its keys within the window"
		}
	}
}

// Refused reports whether the target refused the replay rather than
// answering it: every replayed command was answered with an error the
// capture did not have (NOAUTH without --auth, NOPERM, LOADING, ...), or
// every connection failed before a command was answered. why says which,
// with the most frequent new error first.
func (rep *Report) Refused() (why string, refused bool) {
	switch {
	case rep.Commands > 0 && rep.ErrorReplies == rep.Commands && rep.NewErrors > 0:
		kinds := make([]string, 0, len(rep.NewErrorKinds))
		for k := range rep.NewErrorKinds {
			kinds = append(kinds, k)
		}
		sort.Slice(kinds, func(i, j int) bool {
			a, b := rep.NewErrorKinds[kinds[i]], rep.NewErrorKinds[kinds[j]]
			return a > b || a == b && kinds[i] < kinds[j]
		})
		why = fmt.Sprintf("every one of the %d replayed commands was answered with an error", rep.Commands)
		if len(kinds) > 0 {
			why += fmt.Sprintf(" (%s %d", kinds[0], rep.NewErrorKinds[kinds[0]])
			for _, k := range kinds[1:] {
				why += fmt.Sprintf(", %s %d", k, rep.NewErrorKinds[k])
			}
			why += ")"
		}
		return why, true
	case rep.Commands == 0 && rep.Connections > 0 && len(rep.ConnErrors) >= rep.Connections:
		return fmt.Sprintf("all %d connections failed before a reply: %s", rep.Connections, rep.ConnErrors[0]), true
	}
	return "", false
}

// MostlyLate reports whether more than half of the batches were sent more
// than LateAfter after their intended time: the replayer, not the target,
// set the pace, and the replayed latencies (from the intended time) are
// mostly its own delay, so their ratios to the captured ones say nothing
// about the target.
func (rep *Report) MostlyLate() bool {
	return rep.Batches > 0 && 2*rep.LateBatches > rep.Batches
}
