package heat

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Key is one top key of a ranking, as /keys shows it.
type Key struct {
	// Key is the key (NamesPlain: escaped as strconv.Quote does, without
	// the quotes), its pattern (NamesPattern) or its keyed hash
	// (NamesHash).
	Key       string `json:"key"`
	Truncated bool   `json:"truncated,omitempty"` // the key was longer than MaxKeyBytes bytes
	// Estimate is the ranking's estimated total: requests, bytes or
	// engine seconds. Error bounds it: the true total lies in
	// [Estimate-Error, Estimate+Error] (Space-Saving's bound, which only
	// overestimates, plus three standard deviations of the sampling).
	Estimate float64 `json:"estimate"`
	Error    float64 `json:"error"`
	// Rate and RateError are Estimate and Error per second since start.
	Rate      float64 `json:"rate"`
	RateError float64 `json:"rate_error"`
	Slot      int     `json:"slot"`
	Shard     string  `json:"shard,omitempty"`
	// Samples is the number of sampled requests behind the statistics
	// below: every request of the key that any ranking sampled since the
	// key last entered one of a loop's summaries (the three rankings of a
	// loop keep one set of statistics per key), summed over loops.
	Samples int64 `json:"samples"`
	// Commands is the command mix of the samples: fraction by label (at
	// most 4 labels, the rest under "other").
	Commands map[string]float64 `json:"commands"`
	// ReplyBytesP50 is the median reply size (the upper bound of its
	// power-of-two bucket), ReplyBytesMax the largest, in bytes.
	ReplyBytesP50 int64 `json:"reply_bytes_p50"`
	ReplyBytesMax int64 `json:"reply_bytes_max"`
	// ElementsMax and ElementsMean are the element counts of the key's
	// collection (array, set, map) replies, if any.
	ElementsMax  int64   `json:"elements_max,omitempty"`
	ElementsMean float64 `json:"elements_mean,omitempty"`
	// TotalMicros and EngineMicros are small histograms of the samples'
	// total and engine times: [upper bound µs, count] pairs of power-of-
	// two buckets, empty ones left out.
	TotalMicros  [][2]int64 `json:"total_us_hist"`
	EngineMicros [][2]int64 `json:"engine_us_hist"`
}

// Slot is one hash slot's exact counters.
type Slot struct {
	Slot          int     `json:"slot"`
	Requests      int64   `json:"requests"`
	Bytes         int64   `json:"bytes"`
	EngineSeconds float64 `json:"engine_seconds"`
	Shard         string  `json:"shard,omitempty"` // the shard that answered its last request
}

// ShardSum is one shard's sums over its slots.
type ShardSum struct {
	Shard         string  `json:"shard"`
	Slots         int     `json:"slots"` // slots with requests
	Requests      int64   `json:"requests"`
	Bytes         int64   `json:"bytes"`
	EngineSeconds float64 `json:"engine_seconds"`
}

// Imbalance is max over mean of the shards' sums (1 is balanced).
type Imbalance struct {
	Requests float64 `json:"requests"`
	Bytes    float64 `json:"bytes"`
	Engine   float64 `json:"engine"`
}

// Keys is the /keys document.
type Keys struct {
	Names    string  `json:"key_names"`
	Sample   int     `json:"sample"` // one request in Sample
	Capacity int     `json:"capacity"`
	Seconds  float64 `json:"seconds"` // since start
	// Requests are the requests with a key the loops have counted, and
	// Sampled those some ranking took (about one in Sample, plus every
	// one at or over the slow log's threshold).
	Requests     int64 `json:"requests"`
	Sampled      int64 `json:"sampled"`
	ByRequests   []Key `json:"by_requests"`
	ByBytes      []Key `json:"by_bytes"`
	ByEngineTime []Key `json:"by_engine_time"`
}

// Slots is the /slots document: the slots with requests, in slot order,
// the shards' sums and their imbalance.
type Slots struct {
	Seconds   float64    `json:"seconds"`
	Slots     []Slot     `json:"slots"`
	Shards    []ShardSum `json:"shards"`
	Imbalance Imbalance  `json:"imbalance"`
}

// SlotTable returns the slot counters summed over loops, all NumSlots of
// them, with the shard index + 1 of each slot's last request (0 none).
func (s *Set) slotTable() (t [NumSlots]slotCounts) {
	for _, l := range s.loops {
		l.mu.Lock()
		l.applyBatch()
		for i := range l.narrow {
			c, w := &l.narrow[i], &l.wide[i]
			if c.requests == 0 && w.requests == 0 {
				continue
			}
			d := &t[i]
			d.requests += w.requests + int64(c.requests)
			d.bytes += w.bytes + int64(c.bytes)
			d.engineNs += w.engineNs + int64(c.engineNs)
			if c.shard != 0 {
				d.shard = c.shard
			}
		}
		l.mu.Unlock()
	}
	return t
}

// Slots returns the slot heat; shardNames maps shard indexes to names
// (metrics.Set.ShardNames); a slot whose shard is unknown counts under
// "".
func (s *Set) Slots(shardNames []string) Slots {
	t := s.slotTable()
	out := Slots{Seconds: s.cfg.Now().Sub(s.start).Seconds(), Slots: []Slot{}}
	idx := map[string]int{}
	for i := range t {
		c := &t[i]
		if c.requests == 0 {
			continue
		}
		name := shardName(shardNames, c.shard)
		out.Slots = append(out.Slots, Slot{Slot: i, Requests: c.requests, Bytes: c.bytes,
			EngineSeconds: float64(c.engineNs) / 1e9, Shard: name})
		j, ok := idx[name]
		if !ok {
			j = len(out.Shards)
			idx[name] = j
			out.Shards = append(out.Shards, ShardSum{Shard: name})
		}
		sh := &out.Shards[j]
		sh.Slots++
		sh.Requests += c.requests
		sh.Bytes += c.bytes
		sh.EngineSeconds += float64(c.engineNs) / 1e9
	}
	slices.SortFunc(out.Shards, func(a, b ShardSum) int { return cmp.Compare(a.Shard, b.Shard) })
	out.Imbalance = ImbalanceOf(out.Shards)
	return out
}

// ImbalanceOf returns max over mean of the shards' sums, 0 with no shard.
func ImbalanceOf(shards []ShardSum) Imbalance {
	var r, b, e []float64
	for _, sh := range shards {
		r = append(r, float64(sh.Requests))
		b = append(b, float64(sh.Bytes))
		e = append(e, sh.EngineSeconds)
	}
	return Imbalance{Requests: maxOverMean(r), Bytes: maxOverMean(b), Engine: maxOverMean(e)}
}

func maxOverMean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var sum, mx float64
	for _, x := range v {
		sum += x
		mx = max(mx, x)
	}
	if sum == 0 {
		return 0
	}
	return mx / (sum / float64(len(v)))
}

func shardName(names []string, idx1 int32) string {
	if i := int(idx1) - 1; i >= 0 && i < len(names) {
		return names[i]
	}
	return ""
}

// merged is one key of a ranking merged over loops.
type merged struct {
	ranked
	missing int64 // sum of the smallest counts of the loops that do not monitor it
}

// Keys returns the top n keys of each ranking, merged over loops.
func (s *Set) Keys(n int, shardNames []string) Keys {
	secs := s.cfg.Now().Sub(s.start).Seconds()
	out := Keys{Names: s.cfg.Names.String(), Sample: s.cfg.Sample, Capacity: s.cfg.Capacity, Seconds: secs}
	var scratch []ranked
	for r := range numRankings {
		var mins []int64
		var z int64 // the largest sampling threshold of any loop
		all := map[keyID]*merged{}
		for li, l := range s.loops {
			l.mu.Lock()
			l.applySamples()
			if r == 0 {
				out.Requests += l.seen + int64(l.nbatch)
				out.Sampled += l.taken
			}
			var m int64
			scratch, m = l.sum.view(r, scratch[:0])
			z = max(z, l.zMax[r])
			l.mu.Unlock()
			mins = append(mins, m)
			here := make(map[keyID]bool, len(scratch))
			for i := range scratch {
				e := &scratch[i]
				mk := e.id
				mk.slot = 0 // a pattern's keys span slots: the first one seen stands
				here[mk] = true
				g, ok := all[mk]
				if !ok {
					g = &merged{ranked: ranked{id: e.id}}
					// Absent from the loops before this one.
					for _, pm := range mins[:li] {
						g.missing += pm
					}
					all[mk] = g
				}
				g.count += e.count
				g.err += e.err
				g.st.merge(&e.st)
			}
			// Absent from this loop: the keys merged so far that it lacks.
			if m > 0 {
				for id, g := range all {
					if !here[id] {
						g.missing += m
					}
				}
			}
		}
		list := make([]*merged, 0, len(all))
		for _, g := range all {
			list = append(list, g)
		}
		slices.SortFunc(list, func(a, b *merged) int {
			if c := cmp.Compare(b.count+b.missing, a.count+a.missing); c != 0 {
				return c
			}
			return cmp.Compare(a.id.hash, b.id.hash)
		})
		keys := make([]Key, 0, min(n, len(list)))
		for _, g := range list[:min(n, len(list))] {
			keys = append(keys, s.key(r, z, g, secs, shardNames))
		}
		switch r {
		case ByRequests:
			out.ByRequests = keys
		case ByBytes:
			out.ByBytes = keys
		case ByEngine:
			out.ByEngineTime = keys
		}
	}
	return out
}

// key builds ranking r's Key of g; z is the ranking's largest sampling
// threshold.
func (s *Set) key(r int, z int64, g *merged, secs float64, shardNames []string) Key {
	st := &g.st
	name, cut := s.cfg.Names.show(&g.id, s.seed)
	count := float64(g.count + g.missing)
	// Space-Saving: the count overestimates by at most err (+ missing).
	ssErr := float64(g.err + g.missing)
	// Sampling (threshold sampling, see sampled): the variance of a
	// key's estimate is at most z x its total, z the largest threshold
	// its requests met; three standard deviations.
	var smpErr float64
	if z > 1 {
		smpErr = 3 * math.Sqrt(float64(z)*count)
	}
	unit := 1.0
	if r == ByEngine {
		unit = 1e-9 // ns to seconds
	}
	k := Key{
		Key: name, Truncated: cut,
		Estimate: count * unit, Error: (ssErr + smpErr) * unit,
		Slot: int(g.id.slot), Shard: shardName(shardNames, st.shard),
		Samples:       st.n,
		Commands:      map[string]float64{},
		ReplyBytesMax: st.repMax,
		ReplyBytesP50: min(p50(st.rep[:]), st.repMax),
		ElementsMax:   st.elemsMax,
		TotalMicros:   histPairs(st.total[:]),
		EngineMicros:  histPairs(st.engine[:]),
	}
	if s.cfg.Names == NamesPattern || s.cfg.Names == NamesHash {
		k.Slot = -1 // a pattern spans slots; a slot would narrow a hashed key down
	}
	if secs > 0 {
		k.Rate, k.RateError = k.Estimate/secs, k.Error/secs
	}
	if st.elemsN > 0 {
		k.ElementsMean = float64(st.elemsSum) / float64(st.elemsN)
	}
	if st.n > 0 {
		for _, c := range st.cmds {
			if c.n > 0 {
				k.Commands[s.cmdName(int(c.id))] += float64(c.n) / float64(st.n)
			}
		}
		if st.cmdOther > 0 {
			k.Commands["other"] += float64(st.cmdOther) / float64(st.n)
		}
	}
	return k
}

func (s *Set) cmdName(id int) string {
	if id >= 0 && id < len(s.cfg.Commands) {
		return s.cfg.Commands[id]
	}
	return "other"
}

// merge adds o's statistics, a summary entry's, to s.
func (s *keyStats) merge(o *keyStats) {
	if o.n == 1 {
		var one keyStats // o's body is stale: its one observation is first
		one.add(&o.first)
		o = &one
	}
	s.n += o.n
	for _, c := range o.cmds {
		if c.n == 0 {
			continue
		}
		done := false
		for i := range s.cmds {
			d := &s.cmds[i]
			if d.n > 0 && d.id == c.id || d.n == 0 {
				d.id = c.id
				d.n += c.n
				done = true
				break
			}
		}
		if !done {
			s.cmdOther += c.n
		}
	}
	s.cmdOther += o.cmdOther
	if o.shard != 0 {
		s.shard = o.shard
	}
	s.repMax = max(s.repMax, o.repMax)
	for i := range o.rep {
		s.rep[i] += o.rep[i]
	}
	s.elemsMax = max(s.elemsMax, o.elemsMax)
	s.elemsSum += o.elemsSum
	s.elemsN += o.elemsN
	for i := range o.total {
		s.total[i] += o.total[i]
		s.engine[i] += o.engine[i]
	}
}

// p50 returns the upper bound of the bucket holding the median.
func p50(h []int32) int64 {
	var n int64
	for _, c := range h {
		n += int64(c)
	}
	if n == 0 {
		return 0
	}
	var acc int64
	for i, c := range h {
		acc += int64(c)
		if 2*acc >= n {
			return bucketTop(i)
		}
	}
	return bucketTop(len(h) - 1)
}

func bucketTop(i int) int64 {
	if i == 0 {
		return 1
	}
	return 1 << i
}

func histPairs(h []int32) [][2]int64 {
	out := [][2]int64{}
	for i, c := range h {
		if c > 0 {
			out = append(out, [2]int64{bucketTop(i), int64(c)})
		}
	}
	return out
}

// Elapsed returns the time since the Set was created.
func (s *Set) Elapsed() time.Duration { return s.cfg.Now().Sub(s.start) }
