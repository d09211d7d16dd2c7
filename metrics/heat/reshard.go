package heat

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/respmeter/respmeter/routing"
)

// Range is an inclusive range of hash slots.
type Range struct{ From, To int }

func (r Range) String() string {
	if r.From == r.To {
		return strconv.Itoa(r.From)
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// Layout assigns hash slots to shards: Layout[i] are shard i's ranges.
type Layout [][]Range

// EvenLayout returns the layout "redis-cli --cluster create" gives n
// shards (routing.EvenSplit; 3 shards: 0-5460, 5461-10922, 10923-16383).
func EvenLayout(n int) (Layout, error) {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("shard%d:%d", i, i+1)
	}
	t, err := routing.EvenSplit(addrs)
	if err != nil {
		return nil, err
	}
	l := make(Layout, n)
	for i := range n {
		for _, r := range t.Ranges(i) {
			l[i] = append(l[i], Range{int(r[0]), int(r[1])})
		}
	}
	return l, nil
}

// ParseLayout parses a slot map: one entry per shard, separated by ';',
// each a comma-separated list of slots and inclusive ranges
// ("0-8000;8001-12000,16000;12001-15999,16001-16383"). Every slot must
// belong to exactly one shard.
func ParseLayout(s string) (Layout, error) {
	var owner [NumSlots]int
	var l Layout
	for i, sh := range strings.Split(s, ";") {
		var rs []Range
		for _, part := range strings.Split(strings.TrimSpace(sh), ",") {
			lo, hi, found := strings.Cut(strings.TrimSpace(part), "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a < 0 || b >= NumSlots || a > b {
				return nil, fmt.Errorf("slot map: shard %d: bad range %q", i, part)
			}
			for x := a; x <= b; x++ {
				if owner[x] != 0 {
					return nil, fmt.Errorf("slot map: slot %d given to shards %d and %d", x, owner[x]-1, i)
				}
				owner[x] = i + 1
			}
			rs = append(rs, Range{a, b})
		}
		l = append(l, rs)
	}
	for x, o := range owner {
		if o == 0 {
			return nil, fmt.Errorf("slot map: slot %d has no shard", x)
		}
	}
	return l, nil
}

// String formats l as ParseLayout reads it.
func (l Layout) String() string {
	var b strings.Builder
	for i, rs := range l {
		if i > 0 {
			b.WriteByte(';')
		}
		for j, r := range rs {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(r.String())
		}
	}
	return b.String()
}

// owners returns the shard of every slot.
func (l Layout) owners() (o [NumSlots]int) {
	for i, rs := range l {
		for _, r := range rs {
			for x := r.From; x <= r.To; x++ {
				o[x] = i
			}
		}
	}
	return o
}

// Predict returns each shard's sums under l of the observed slot heat:
// a slot's requests, bytes and engine time go where l puts the slot (the
// engine time as the engine spent it, whatever shard the slot moves to).
func Predict(slots []Slot, l Layout) []ShardSum {
	o := l.owners()
	out := make([]ShardSum, len(l))
	for i := range out {
		out[i].Shard = strconv.Itoa(i)
	}
	for _, s := range slots {
		if s.Slot < 0 || s.Slot >= NumSlots {
			continue
		}
		sh := &out[o[s.Slot]]
		sh.Slots++
		sh.Requests += s.Requests
		sh.Bytes += s.Bytes
		sh.EngineSeconds += s.EngineSeconds
	}
	return out
}

// weight returns slot s's weight by "requests", "bytes" or "engine".
func weight(s Slot, by string) float64 {
	switch by {
	case "bytes":
		return float64(s.Bytes)
	case "engine":
		return s.EngineSeconds
	}
	return float64(s.Requests)
}

// Balance returns the layout of n shards of contiguous slot ranges (as
// "redis-cli --cluster create" lays them out) whose largest shard, by
// weight ("requests", "bytes" or "engine"), is the smallest possible: the
// linear partition problem, solved by bisecting on the largest shard's
// weight with a greedy cut. A hot slot cannot be split, so the imbalance
// it causes is a floor no layout lowers.
func Balance(slots []Slot, n int, by string) Layout {
	var w [NumSlots]float64
	var total, heaviest float64
	for _, s := range slots {
		if s.Slot >= 0 && s.Slot < NumSlots {
			w[s.Slot] += weight(s, by)
		}
	}
	for _, x := range w {
		total += x
		heaviest = max(heaviest, x)
	}
	// parts returns the number of shards a greedy cut at capacity c needs.
	parts := func(c float64) int {
		k, acc := 1, 0.0
		for _, x := range w {
			if acc+x > c {
				k++
				acc = 0
			}
			acc += x
		}
		return k
	}
	lo, hi := max(heaviest, total/float64(n)), total
	for range 100 {
		mid := (lo + hi) / 2
		if parts(mid) <= n {
			hi = mid
		} else {
			lo = mid
		}
	}
	// Cut at capacity hi, then split the slot count evenly where the
	// greedy cut left fewer than n shards (trailing slots with no weight).
	cuts := []int{0}
	acc := 0.0
	for x, v := range w {
		if acc+v > hi && len(cuts) < n {
			cuts = append(cuts, x)
			acc = 0
		}
		acc += v
	}
	for len(cuts) < n {
		// The widest range gives its upper half to a new shard.
		best, bw := 0, 0
		for i, c := range cuts {
			end := NumSlots
			if i+1 < len(cuts) {
				end = cuts[i+1]
			}
			if end-c > bw {
				best, bw = i, end-c
			}
		}
		if bw < 2 {
			break
		}
		cuts = append(cuts[:best+1], append([]int{cuts[best] + bw/2}, cuts[best+1:]...)...)
	}
	l := make(Layout, len(cuts))
	for i, c := range cuts {
		end := NumSlots - 1
		if i+1 < len(cuts) {
			end = cuts[i+1] - 1
		}
		l[i] = []Range{{c, end}}
	}
	return l
}

// Move is a range of slots to move from one shard to another.
type Move struct {
	Slots    Range `json:"slots"`
	From, To int
}

// Moves returns the slot ranges that change shard from layout a to b, in
// slot order, as "redis-cli --cluster reshard --cluster-from A
// --cluster-to B --cluster-slots N" would be asked to move them.
func Moves(a, b Layout) []Move {
	oa, ob := a.owners(), b.owners()
	var out []Move
	for x := 0; x < NumSlots; x++ {
		if oa[x] == ob[x] {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Slots.To == x-1 && out[n-1].From == oa[x] && out[n-1].To == ob[x] {
			out[n-1].Slots.To = x
			continue
		}
		out = append(out, Move{Slots: Range{x, x}, From: oa[x], To: ob[x]})
	}
	return out
}
