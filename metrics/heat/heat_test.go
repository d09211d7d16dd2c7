package heat

import (
	"strconv"
	"testing"
	"time"

	"github.com/respmeter/respmeter/routing"
)

// TestSlotsCountEveryRequest records requests in batches of every size
// around the loop's batch (none full, one full, full and some) and checks
// after each that Slots holds every one of them exactly: requests, bytes,
// engine time and shard per slot, whatever is still waiting in the batch.
func TestSlotsCountEveryRequest(t *testing.T) {
	h := NewSet(2, Config{})
	args := [][]byte{[]byte("get"), nil}
	type want struct {
		requests, bytes int64
		engine          time.Duration
		shard           string
	}
	truth := map[int]*want{}
	names := []string{"a", "b", "c"}
	i := 0
	for _, n := range []int{1, batchLen - 2, 1, batchLen, 3 * batchLen, 7} {
		for range n {
			l := h.Loop(i % 2)
			key := []byte("k:" + strconv.Itoa(i*7919))
			args[1] = key
			var p Pending
			l.Begin(&p, "get", args, 1, 20+i%5)
			p.Reply([]byte("$3\r\nabc\r\n"))
			slot := int(routing.Slot(key))
			shard := slot % 3 // a slot's shard, as a cluster's is
			engine := time.Duration(1000 + i)
			l.End(&p, 1, shard, 2*engine, engine)
			w := truth[slot]
			if w == nil {
				w = &want{}
				truth[slot] = w
			}
			w.requests++
			w.bytes += int64(20+i%5) + 9
			w.engine += engine
			w.shard = names[shard]
			i++
		}
		got := h.Slots(names)
		if len(got.Slots) != len(truth) {
			t.Fatalf("after %d requests: %d slots, want %d", i, len(got.Slots), len(truth))
		}
		for _, s := range got.Slots {
			w := truth[s.Slot]
			if w == nil || s.Requests != w.requests || s.Bytes != w.bytes ||
				s.EngineSeconds != w.engine.Seconds() || s.Shard != w.shard {
				t.Fatalf("after %d requests: slot %d = %+v, want %+v", i, s.Slot, s, w)
			}
		}
	}
}
