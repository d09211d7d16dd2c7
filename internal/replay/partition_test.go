package replay

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/respmeter/respmeter/internal/capture"
)

func TestParsePartition(t *testing.T) {
	for _, tc := range []struct {
		s, by string
		want  Partition
		err   string
	}{
		{"0/4", "", Partition{0, 4, ByConnection}, ""},
		{"3/4", "slot", Partition{3, 4, BySlot}, ""},
		{"0/1", "connection", Partition{0, 1, ByConnection}, ""},
		{"5/4", "", Partition{}, "0 to 3"},
		{"4/4", "", Partition{}, "0 to 3"},
		{"-1/4", "", Partition{}, "0 to 3"},
		{"0/0", "", Partition{}, "want I/N"},
		{"1", "", Partition{}, "want I/N"},
		{"a/b", "", Partition{}, "want I/N"},
		{"0/4", "key", Partition{}, "connection or slot"},
		{"0/16385", "slot", Partition{}, "at most 16384"},
	} {
		got, err := ParsePartition(tc.s, tc.by)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParsePartition(%q, %q) = %v, %v; want an error with %q", tc.s, tc.by, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParsePartition(%q, %q) = %v, %v; want %v", tc.s, tc.by, got, err, tc.want)
		}
	}
}

// partWorkload is conns connections of two files, each of batches batches
// of one command on key "c<conn>:<batch>" and one keyless PING.
func partWorkload(conns, batches int) *capture.Workload {
	w := &capture.Workload{Start: 1}
	for c := range conns {
		cn := &capture.Conn{File: c % 2, ID: uint64(100 + c)}
		for b := range batches {
			cn.Batches = append(cn.Batches, capture.Batch{T: int64(c + b*conns), Cmds: []capture.Cmd{
				{Seq: uint64(2*b + 1), Name: "get", Req: []byte(fmt.Sprintf("c%d:%d", c, b))},
				{Seq: uint64(2*b + 2), Name: "ping"},
			}})
		}
		w.Conns = append(w.Conns, cn)
	}
	return w
}

// TestSelectByConnection: N partitions of a workload hold every
// connection exactly once, whole (its batches, in order), the same each
// time they are computed, dealt round-robin.
func TestSelectByConnection(t *testing.T) {
	w := partWorkload(10, 5)
	const n = 4
	owner := map[string]int{}
	for i := range n {
		p := Partition{i, n, ByConnection}
		part, all := p.Select(w, nil)
		again, _ := p.Select(w, nil)
		if len(all) != 10 || !slices.Equal(connNamesOf(part), connNamesOf(again)) {
			t.Fatalf("%v: %d names, selections %v and %v", p, len(all), connNamesOf(part), connNamesOf(again))
		}
		if want := (10 - i + n - 1) / n; len(part.Conns) != want {
			t.Errorf("%v: %d connections, want %d (round-robin)", p, len(part.Conns), want)
		}
		for _, c := range part.Conns {
			name := ConnName(c)
			if j, dup := owner[name]; dup {
				t.Errorf("connection %s in partitions %d and %d", name, j, i)
			}
			owner[name] = i
			orig := w.Conns[slices.IndexFunc(w.Conns, func(o *capture.Conn) bool { return ConnName(o) == name })]
			if len(c.Batches) != len(orig.Batches) || &c.Batches[0] != &orig.Batches[0] {
				t.Errorf("connection %s not whole in partition %d", name, i)
			}
		}
	}
	if len(owner) != 10 {
		t.Errorf("%d of 10 connections in some partition", len(owner))
	}
}

func connNamesOf(w *capture.Workload) []string {
	var out []string
	for _, c := range w.Conns {
		out = append(out, ConnName(c))
	}
	return out
}

// TestSelectBySlot: every keyed command goes to the partition owning its
// slot's range, every keyless one to its connection's partition; each
// command is in exactly one partition, in its connection's order.
func TestSelectBySlot(t *testing.T) {
	w := partWorkload(6, 40)
	const n = 3
	slot := func(_ string, req []byte) (int, bool) {
		if len(req) == 0 {
			return 0, false
		}
		var c, b int
		_, _ = fmt.Sscanf(string(req), "c%d:%d", &c, &b)
		return (c*40 + b) * 16384 / 240, true // spread over all slots
	}
	seen := map[string]int{}
	for i := range n {
		part, _ := Partition{i, n, BySlot}.Select(w, slot)
		for k, c := range part.Conns {
			var last int64 = -1
			for _, b := range c.Batches {
				if b.T <= last {
					t.Errorf("partition %d connection %s: batches out of order", i, ConnName(c))
				}
				last = b.T
				for _, cmd := range b.Cmds {
					key := fmt.Sprintf("%s/%d", ConnName(c), cmd.Seq)
					seen[key]++
					if s, ok := slot(cmd.Name, cmd.Req); ok && s*n/numSlots != i {
						t.Errorf("partition %d holds slot %d", i, s)
					}
					if cmd.Name == "ping" && slices.IndexFunc(w.Conns, func(o *capture.Conn) bool { return ConnName(o) == ConnName(c) })%n != i {
						t.Errorf("partition %d holds a keyless command of connection %s (%d)", i, ConnName(c), k)
					}
				}
			}
		}
	}
	if len(seen) != 6*40*2 {
		t.Errorf("%d of %d commands in some partition", len(seen), 6*40*2)
	}
	for k, v := range seen {
		if v != 1 {
			t.Errorf("command %s in %d partitions", k, v)
		}
	}
}

// workerReport is a Report of partition i/n whose command "get" recorded
// vals (µs) as its replayed latencies, replaying connection names conns.
func workerReport(t *testing.T, i, n int, vals []int64, conns, all []string) *WorkerDoc {
	t.Helper()
	rep := &Report{PerCommand: map[string]*CommandStats{}, lag: hdrhistogram.New(1, histMax, 3)}
	s := rep.stats("get")
	for _, v := range vals {
		_ = s.replayed.RecordValue(v)
		_ = s.sent.RecordValue(v)
		_ = s.captured.RecordValue(v / 2)
		s.Count++
		rep.Commands++
	}
	rep.Mismatches, s.Mismatches = int64(i), int64(i)
	rep.Batches, rep.LateBatches = 100, int64(i*i) // partition 3 of 4: 9% late
	rep.DurationSeconds = 1 + float64(i)
	rep.finish()
	d, err := NewWorkerDoc(rep, Partition{i, n, ByConnection}, 1, 42, all, conns)
	if err != nil {
		t.Fatal(err)
	}
	// Through JSON, as report merge reads it.
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back WorkerDoc
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return &back
}

// TestMergePercentilesExact: the merged p50/p99/p99.9 of four workers'
// reports are those of one histogram of all their recorded values (not an
// average of theirs: the workers' distributions differ), counts and
// mismatches are summed, the worker that sent most batches late is the
// bottleneck.
func TestMergePercentilesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	all := []string{"0:1", "0:2", "0:3", "0:4"}
	one := hdrhistogram.New(1, histMax, 3)
	var docs []*WorkerDoc
	var names []string
	for i := range 4 {
		vals := make([]int64, 5000*(i+1))
		for k := range vals {
			// Each worker its own scale: worker 3's tail is the tail.
			vals[k] = 1 + int64(rng.ExpFloat64()*float64(100*(i+1)*(i+1)))
			_ = one.RecordValue(vals[k])
		}
		docs = append(docs, workerReport(t, i, 4, vals, all[i:i+1], all))
		names = append(names, fmt.Sprintf("w%d.json", i))
	}
	m, err := Merge(docs, names)
	if err != nil {
		t.Fatal(err)
	}
	got := m.Report.PerCommand["get"]
	var avg [3]int64
	for i, p := range pcts {
		if want := one.ValueAtQuantile(p); got.ReplayedUS[i] != want {
			t.Errorf("merged p%v = %d µs, want %d (one histogram of all values)", p, got.ReplayedUS[i], want)
		}
		for _, d := range docs {
			avg[i] += d.PerCommand["get"].ReplayedUS[i] / 4
		}
	}
	if avg == got.ReplayedUS {
		t.Errorf("merged percentiles %v equal the averaged ones: the test cannot tell them apart", got.ReplayedUS)
	}
	if got.Count != one.TotalCount() || m.Report.Commands != one.TotalCount() || m.Report.Mismatches != 0+1+2+3 {
		t.Errorf("merged count %d, commands %d, mismatches %d; want %d, %d, 6", got.Count, m.Report.Commands, m.Report.Mismatches, one.TotalCount(), one.TotalCount())
	}
	if m.Bottleneck != 3 || !strings.Contains(m.Why, "worker 3/4 sent 9.0%") {
		t.Errorf("bottleneck %d (%s), want worker 3/4", m.Bottleneck, m.Why)
	}
	if len(m.Missing) != 0 || len(m.Unreplayed) != 0 {
		t.Errorf("missing %v, unreplayed %v; want none", m.Missing, m.Unreplayed)
	}

	// Three of four: complete in what it has, naming what is missing.
	m, err = Merge([]*WorkerDoc{docs[0], docs[1], docs[3]}, []string{"w0", "w1", "w3"})
	if err != nil || !slices.Equal(m.Missing, []int{2}) || !slices.Equal(m.Unreplayed, []string{"0:3"}) {
		t.Errorf("merge without 2/4: %v, missing %v, unreplayed %v; want [2] and [0:3]", err, m.Missing, m.Unreplayed)
	}
}

// TestMergeRefuses: reports that would be counted twice or are not of
// one replay are refused, each problem named.
func TestMergeRefuses(t *testing.T) {
	all := []string{"0:1", "0:2"}
	a := workerReport(t, 0, 2, []int64{5}, all[:1], all)
	b := workerReport(t, 1, 2, []int64{5}, all[1:], all)
	dupIndex := workerReport(t, 0, 2, []int64{5}, all[1:], all)
	overlap := workerReport(t, 1, 2, []int64{5}, all, all)
	other := workerReport(t, 1, 3, []int64{5}, all[1:], all)
	otherCapture := workerReport(t, 1, 2, []int64{5}, all[1:], []string{"0:1", "0:9"})
	for _, tc := range []struct {
		docs []*WorkerDoc
		want string
	}{
		{[]*WorkerDoc{a, dupIndex}, "a and b are both partition 0/2"},
		{[]*WorkerDoc{a, overlap}, "connection 0:1 was replayed by a (0/2) and b (1/2)"},
		{[]*WorkerDoc{a, other}, "b: partition 1/3 by connection, but a is 0/2"},
		{[]*WorkerDoc{a, otherCapture}, "a and b replayed different captures"},
		{[]*WorkerDoc{a, {Report: b.Report}}, "b: not a replay report with histograms"},
	} {
		_, err := Merge(tc.docs, []string{"a", "b"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("merge: %v, want an error with %q", err, tc.want)
		}
	}
	if _, err := Merge([]*WorkerDoc{a, b}, []string{"a", "b"}); err != nil {
		t.Errorf("merge of 0/2 and 1/2: %v", err)
	}
}
