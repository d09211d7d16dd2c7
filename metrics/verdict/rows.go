package verdict

import (
	"math"
	"time"

	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/split"
)

// Row is one command label's part of an account: its requests and, per
// request, its total and upstream times and the account's parts
// (split.PartNames), so that the request-weighted mean of an interval's
// rows is the interval's account (split.Verdict.Parts) and that of the
// rows since start (RowSum) the account since start (Sum.Account): the
// exit's "where the time went" table prints the rows above the Totals row
// they add up to.
type Row struct {
	Name            string
	Requests        int64
	Total, Upstream time.Duration
	Parts           [len(split.PartNames)]time.Duration
}

// Rows splits the account of the interval whose verdict is v over the
// command labels of the requests timed between the snapshots prev (nil:
// since start) and cur (those left out of the totals, blocking and
// pub/sub, are left out here too). Per label: the proxy's processing, its
// TLS clients' crypto (tls) and the injected delays are the label's own; the engine's execution, its
// wait, run-queue wait and wait behind other clients are the label's class
// (split.ClassWait) where the verdict has one, and else those the verdict
// leaves for the requests of no class, the execution shared out among
// them by the engine's own mean of each label (mean; nil or !ok: alike);
// the think time and the loop waits are the interval's per request (a
// request waits unread for the loops whatever its command); the path is
// what is left of the label's upstream time, as the interval's is. Each
// part of the rows weighted by their requests adds up to the verdict's
// part times the interval's requests (to the nanosecond's rounding).
// Rows is nil when the interval has no requests.
func Rows(prev, cur *metrics.Snapshot, v split.Verdict, mean func(label string) (time.Duration, bool)) []Row {
	if cur == nil || v.Bound == "idle" {
		return nil
	}
	var rows []Row
	var n int64
	var up time.Duration
	for i := range cur.Commands {
		if i < len(cur.Excluded) && cur.Excluded[i] {
			continue
		}
		c := &cur.Commands[i]
		r := Row{Name: c.Name, Requests: c.Phases[metrics.PhaseTotal].Count()}
		r.Total, r.Upstream = c.Phases[metrics.PhaseTotal].Sum, c.Phases[metrics.PhaseUpstream].Sum
		proxy, injected, tls := c.Phases[metrics.PhaseProxy].Sum, c.Phases[metrics.PhaseInjected].Sum, c.Phases[metrics.PhaseTLS].Sum
		if prev != nil && i < len(prev.Commands) {
			p := &prev.Commands[i]
			r.Requests -= p.Phases[metrics.PhaseTotal].Count()
			r.Total -= p.Phases[metrics.PhaseTotal].Sum
			r.Upstream -= p.Phases[metrics.PhaseUpstream].Sum
			proxy -= p.Phases[metrics.PhaseProxy].Sum
			injected -= p.Phases[metrics.PhaseInjected].Sum
			tls -= p.Phases[metrics.PhaseTLS].Sum
		}
		if r.Requests <= 0 {
			continue
		}
		n += r.Requests
		up += r.Upstream
		k := time.Duration(r.Requests)
		r.Total, r.Upstream = r.Total/k, r.Upstream/k
		// The proxy phase holds the tls phase; the account's proxy part
		// is the rest (split.Account.Parts).
		r.Parts[partTLS] = min(max(tls/k, 0), max(proxy/k, 0))
		r.Parts[partProxy], r.Parts[partInjected] = max(proxy/k, 0)-r.Parts[partTLS], max(injected/k, 0)
		rows = append(rows, r)
	}
	if n == 0 {
		return nil
	}
	all := v.Parts()
	part := func(i int) float64 { return all[i].Time.Seconds() }
	// The engine's parts of the requests of no class: the interval's
	// less its classes'.
	restN := float64(n)
	rest := [4]float64{part(partEngine), part(partQueue), part(partOthers), part(partRunQueue)}
	for i := range rest {
		rest[i] *= float64(n)
	}
	class := map[string]split.ClassWait{}
	for _, c := range v.Classes {
		class[c.Name] = c
		cn := float64(c.Requests)
		restN -= cn
		rest[0] -= c.Exec.Seconds() * cn
		rest[1] -= (c.Wait - c.Others - c.RunQueue).Seconds() * cn
		rest[2] -= c.Others.Seconds() * cn
		rest[3] -= c.RunQueue.Seconds() * cn
	}
	if restN > 0 {
		for i := range rest {
			rest[i] /= restN
		}
	}
	// The execution of the requests of no class, shared out by the
	// engine's mean of each label: weights whose request-weighted mean is
	// 1 (a label the engine knows nothing of weighs the mean).
	weight := make([]float64, len(rows))
	var known, knownN, wsum float64
	for i, r := range rows {
		if _, ok := class[lower(r.Name)]; ok || mean == nil {
			continue
		}
		if m, ok := mean(r.Name); ok && m > 0 {
			weight[i] = m.Seconds()
			known += weight[i] * float64(r.Requests)
			knownN += float64(r.Requests)
		}
	}
	for i, r := range rows {
		if _, ok := class[lower(r.Name)]; ok {
			continue
		}
		if weight[i] == 0 {
			weight[i] = 1
			if knownN > 0 {
				weight[i] = known / knownN
			}
		}
		wsum += weight[i] * float64(r.Requests)
	}
	N := float64(n)
	// The engine's execution of each row; the requests of no class wait
	// the rest's wait per request, up to what their upstream time leaves
	// beside their execution, the wait a row cannot hold shared out over
	// the others (fill): a wait above a label's own round trip is no
	// label's.
	eng := make([]float64, len(rows))
	var ids []int
	var caps []float64
	for i := range rows {
		r := &rows[i]
		if c, ok := class[lower(r.Name)]; ok {
			r.Parts[partEngine], r.Parts[partOthers], r.Parts[partRunQueue] = c.Exec, c.Others, c.RunQueue
			r.Parts[partQueue] = c.Wait - c.Others - c.RunQueue
			continue
		}
		eng[i] = rest[0]
		if wsum > 0 {
			eng[i] = rest[0] * weight[i] * restN / wsum
		}
		r.Parts[partEngine] = seconds(eng[i])
		ids = append(ids, i)
		caps = append(caps, max(r.Upstream.Seconds()-eng[i], 0))
	}
	if wait := rest[1] + rest[2] + rest[3]; wait > 0 && len(ids) > 0 {
		counts := make([]float64, len(ids))
		for k, i := range ids {
			counts[k] = float64(rows[i].Requests)
		}
		waits := fill(wait, caps, counts)
		for k, i := range ids {
			f := waits[k] / wait
			rows[i].Parts[partQueue], rows[i].Parts[partOthers], rows[i].Parts[partRunQueue] = seconds(rest[1]*f), seconds(rest[2]*f), seconds(rest[3]*f)
		}
	}
	// The path: what the label's upstream time leaves beside the
	// engine's parts (its room) less the label's part of the replies'
	// loop wait, which is shared out by the rooms (a reply waits unread
	// in the upstream phase, out of what the engine left of it: the
	// interval's loop wait of replies is at most its mean room, so no
	// label's path goes below 0 for it), corrected alike for every request
	// by what the interval's own path was corrected (its floor at 0), so
	// that the rows add up to it.
	room := make([]float64, len(rows))
	var roomSum float64
	for i := range rows {
		r := &rows[i]
		room[i] = (r.Upstream - r.Parts[partEngine] - r.Parts[partQueue] - r.Parts[partOthers] - r.Parts[partRunQueue]).Seconds()
		roomSum += max(room[i], 0) * float64(r.Requests)
	}
	reply := part(partLoopReply)
	corr := part(partPath) - (up.Seconds()/N - part(partEngine) - part(partQueue) - part(partOthers) - part(partRunQueue) - reply)
	for i := range rows {
		r := &rows[i]
		lr := reply
		if roomSum > 0 {
			lr = reply * max(room[i], 0) * N / roomSum
		}
		r.Parts[partThink] = all[partThink].Time
		r.Parts[partPath] = seconds(room[i] - lr + corr)
		r.Parts[partLoopRequest], r.Parts[partLoopReply] = all[partLoopRequest].Time, seconds(lr)
	}
	return rows
}

// fill shares out a wait of w per request over groups of counts[i]
// requests, each group's wait per request at most caps[i]: alike where the
// caps allow (water-filling); Σ counts[i]·waits[i] is w·Σ counts always,
// what the caps cannot hold shared out alike over every request.
func fill(w float64, caps, counts []float64) []float64 {
	waits := make([]float64, len(caps))
	var total, n float64
	for i := range caps {
		total += w * counts[i]
		n += counts[i]
	}
	all := n
	open := make([]bool, len(caps))
	for i := range open {
		open[i] = true
	}
	// Each round caps the groups the level overflows and raises the
	// level of the others by what they gave up.
	for range caps {
		level := total / n
		capped := false
		for i := range caps {
			if open[i] && caps[i] < level {
				waits[i], open[i] = caps[i], false
				total -= caps[i] * counts[i]
				n -= counts[i]
				capped = true
			}
		}
		if n <= 0 {
			break
		}
		if !capped {
			for i := range caps {
				if open[i] {
					waits[i] = level
				}
			}
			return waits
		}
	}
	// Every group capped: the rest alike over all of them.
	for i := range waits {
		waits[i] += total / all
	}
	return waits
}

// The indexes of split.PartNames.
const (
	partThink = iota
	partPath
	partEngine
	partQueue
	partOthers
	partRunQueue
	partProxy
	partLoopRequest
	partLoopReply
	partInjected
	partTLS
)

// seconds converts s seconds to a Duration, rounded to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// RowSum adds up a command label's rows (Rows) over intervals: each part
// per request times the interval's requests of the label, as Sum does for
// the account. The zero RowSum is empty.
type RowSum struct {
	Name     string
	Requests int64
	// total and upstream are sums; parts seconds·requests.
	total, upstream time.Duration
	parts           [len(split.PartNames)]float64
	// engineKnown, waitKnown, loopKnown: some interval the label had
	// requests in knew the engine's execution, its wait, the loop wait.
	engineKnown, waitKnown, loopKnown bool
}

// Add adds the label's row of an interval whose verdict is v.
func (s *RowSum) Add(r Row, v split.Verdict) {
	if r.Requests <= 0 {
		return
	}
	s.Name = r.Name
	s.Requests += r.Requests
	k := time.Duration(r.Requests)
	s.total += r.Total * k
	s.upstream += r.Upstream * k
	for i, p := range r.Parts {
		s.parts[i] += p.Seconds() * float64(r.Requests)
	}
	s.engineKnown = s.engineKnown || v.EngineKnown
	s.waitKnown = s.waitKnown || v.WaitKnown
	s.loopKnown = s.loopKnown || v.LoopWaitKnown
}

// Mean returns the label's means per request since the first row added:
// its Row, and whether its engine execution, engine wait and loop wait
// were ever known (a Totals row's "-" where never).
func (s *RowSum) Mean() (r Row, engineKnown, waitKnown, loopKnown bool) {
	r = Row{Name: s.Name, Requests: s.Requests}
	if s.Requests <= 0 {
		return r, false, false, false
	}
	k := time.Duration(s.Requests)
	r.Total, r.Upstream = s.total/k, s.upstream/k
	for i, p := range s.parts {
		r.Parts[i] = seconds(p / float64(s.Requests))
	}
	return r, s.engineKnown, s.waitKnown, s.loopKnown
}
