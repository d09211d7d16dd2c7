package heat

import (
	"testing"
)

func TestEvenAndParseLayout(t *testing.T) {
	l, err := EvenLayout(3)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.String(); got != "0-5460;5461-10922;10923-16383" {
		t.Errorf("EvenLayout(3) = %s", got)
	}
	p, err := ParseLayout(l.String())
	if err != nil || p.String() != l.String() {
		t.Errorf("ParseLayout round trip: %v %v", p, err)
	}
	for _, bad := range []string{"0-100", "0-16383;5", "0-16384", "x"} {
		if _, err := ParseLayout(bad); err == nil {
			t.Errorf("ParseLayout(%q) accepted", bad)
		}
	}
}

// TestBalanceHotRange: a hot range inside the first shard of the even
// 4-shard layout; the balanced layout's predicted imbalance is lower and
// its largest shard is no heavier than the heaviest slot allows.
func TestBalanceHotRange(t *testing.T) {
	var slots []Slot
	for x := range NumSlots {
		r := int64(10)
		if x >= 1000 && x < 2000 {
			r = 200
		}
		slots = append(slots, Slot{Slot: x, Requests: r})
	}
	even, _ := EvenLayout(4)
	before := ImbalanceOf(Predict(slots, even)).Requests
	bal := Balance(slots, 4, "requests")
	if len(bal) != 4 {
		t.Fatalf("%d shards: %v", len(bal), bal)
	}
	pred := Predict(slots, bal)
	after := ImbalanceOf(pred).Requests
	t.Logf("even %s: imbalance %.3f; balanced %s: %.3f; moves %v", even, before, bal, after, Moves(even, bal))
	if after >= before || after > 1.01 {
		t.Errorf("balanced imbalance %.3f, even %.3f", after, before)
	}
	var total int64
	for _, s := range pred {
		total += s.Requests
	}
	if want := int64(NumSlots-1000)*10 + 1000*200; total != want {
		t.Errorf("predicted total %d, want %d", total, want)
	}
	for _, m := range Moves(even, bal) {
		if m.From == m.To {
			t.Errorf("move to itself: %v", m)
		}
	}
}
