package engine

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/respmeter/respmeter/metrics"
)

// The files testdata/valkey-9.1.2-getslotmigrations*.resp are CLUSTER
// GETSLOTMIGRATIONS replies captured from a 3-master Valkey 9.1.2 cluster:
// on the source of two CLUSTER MIGRATESLOTS (0-999 ended, 1000-1999 sent
// just before: "running"; both ended: no suffix), RESP2, and on their
// target over RESP3 (-resp3: two IMPORT jobs, ended).

func TestParseMigrationsCaptured(t *testing.T) {
	running, err := parseMigrations(readCaptured(t, "valkey-9.1.2-getslotmigrations-running.resp"))
	if err != nil {
		t.Fatal(err)
	}
	if len(running) != 2 {
		t.Fatalf("%d jobs, want 2: %+v", len(running), running)
	}
	j := running[0]
	if j.Name != "cbe83296b68dd69ec099db736043743160e5c15c" || j.Operation != "EXPORT" || j.Slots != "1000-1999" ||
		j.Target != "bf10ac6791dd2edae5b30408be9d9ef639b405ee" || j.Source != "b5da191d4c4b378c7e0dc1cbf9618697d0814916" ||
		j.State != "connecting" || !j.Start.Equal(time.Unix(1796490928, 0)) || !j.Running() {
		t.Errorf("running job: %+v", j)
	}
	if j := running[1]; j.Slots != "0-999" || j.State != "success" || j.Running() || !j.End.Equal(time.Unix(1796490869, 0)) {
		t.Errorf("ended job: %+v", j)
	}
	for _, name := range []string{"valkey-9.1.2-getslotmigrations.resp", "valkey-9.1.2-getslotmigrations-resp3.resp"} {
		jobs, err := parseMigrations(readCaptured(t, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		op := "EXPORT"
		if name == "valkey-9.1.2-getslotmigrations-resp3.resp" {
			op = "IMPORT"
		}
		if len(jobs) != 2 {
			t.Fatalf("%s: %d jobs, want 2", name, len(jobs))
		}
		for _, j := range jobs {
			if j.Operation != op || j.Running() || j.State != "success" || j.End.Before(j.Start) || j.Start.IsZero() {
				t.Errorf("%s: %+v: want an ended %s", name, j, op)
			}
		}
	}
	if _, err := parseMigrations(readCaptured(t, "redis-7.0.15-commandstats-1.resp")); err == nil {
		t.Error("an INFO reply parsed as slot migrations")
	}
}

// TestApplyMigrations: a job that had ended before the first poll is not
// one respmeter watched; one running at the first poll, or first seen
// later, is kept, and its end is taken when a poll finds it ended.
func TestApplyMigrations(t *testing.T) {
	p := NewPoller("127.0.0.1:1", time.Second, []string{"get"}, nil)
	t0 := time.Unix(1796490928, 500)
	jobs, err := parseMigrations(readCaptured(t, "valkey-9.1.2-getslotmigrations-running.resp"))
	if err != nil {
		t.Fatal(err)
	}
	p.applyMigrations(t0, jobs)
	got := p.Migrations()
	if len(got) != 1 || got[0].Slots != "1000-1999" || !got[0].Running() || !got[0].Seen.Equal(t0) {
		t.Fatalf("after the first poll: %+v, want the running job of 1000-1999 only", got)
	}
	later, err := parseMigrations(readCaptured(t, "valkey-9.1.2-getslotmigrations.resp"))
	if err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(time.Second)
	p.applyMigrations(t1, later)
	got = p.Migrations()
	if len(got) != 1 || got[0].Running() || got[0].State != "success" || !got[0].Ended.Equal(t1) ||
		got[0].End.Before(got[0].Start) || !got[0].Seen.Equal(t0) {
		t.Fatalf("after the job ended: %+v", got)
	}
	// A later job, first seen ended (shorter than a poll interval), is kept.
	q := NewPoller("127.0.0.1:1", time.Second, []string{"get"}, nil)
	q.applyMigrations(t0, nil)
	q.applyMigrations(t1, later)
	if got := q.Migrations(); len(got) != 2 || got[0].Running() || !got[0].Ended.Equal(t1) {
		t.Fatalf("jobs first seen ended after the first poll: %+v", got)
	}
}

// TestMigrationCounts: each job is counted once as started and once as
// ended, a job that had ended before the first poll not at all, also past
// the 64 jobs the list keeps while the engine still lists the older ones;
// the counts are respmeter_topology_events_total{kind} under the Poller's
// shard, in the same registry as the Set's map-wide kinds.
func TestMigrationCounts(t *testing.T) {
	p := NewPoller("127.0.0.1:1", time.Second, []string{"get"}, nil)
	if _, _, ok := p.MigrationCounts(); ok {
		t.Error("counts reported before the engine answered CLUSTER GETSLOTMIGRATIONS")
	}
	p.slotJobs = true
	t0 := time.Unix(1796490928, 500)
	running, err := parseMigrations(readCaptured(t, "valkey-9.1.2-getslotmigrations-running.resp"))
	if err != nil {
		t.Fatal(err)
	}
	ended, err := parseMigrations(readCaptured(t, "valkey-9.1.2-getslotmigrations.resp"))
	if err != nil {
		t.Fatal(err)
	}
	for i, poll := range []struct {
		jobs           []Migration
		started, ended int64
	}{
		{running, 1, 0}, // 0-999 had ended before: not counted
		{ended, 1, 1},
		{ended, 1, 1},
	} {
		p.applyMigrations(t0.Add(time.Duration(i)*time.Second), poll.jobs)
		if s, e, ok := p.MigrationCounts(); s != poll.started || e != poll.ended || !ok {
			t.Errorf("poll %d: started %d, ended %d, %v; want %d, %d", i, s, e, ok, poll.started, poll.ended)
		}
	}

	// More jobs than the list keeps, all ended, listed at every poll.
	q := NewPoller("127.0.0.1:1", time.Second, []string{"get"}, nil)
	q.slotJobs = true
	q.applyMigrations(t0, nil)
	var many []Migration
	for i := range maxMigrations + 6 {
		many = append(many, Migration{Name: fmt.Sprintf("%040x", i), Operation: "EXPORT", Slots: fmt.Sprint(i),
			State: "success", Start: t0, End: t0})
	}
	for i := range 3 {
		q.applyMigrations(t0.Add(time.Duration(i+1)*time.Second), many)
	}
	if s, e, _ := q.MigrationCounts(); s != int64(len(many)) || e != int64(len(many)) || len(q.Migrations()) != maxMigrations {
		t.Errorf("%d jobs listed at three polls: started %d, ended %d, %d kept; want %d, %d, %d",
			len(many), s, e, len(q.Migrations()), len(many), len(many), maxMigrations)
	}

	reg := prometheus.NewPedanticRegistry()
	if err := metrics.NewSet(1, []string{"get"}).Register(reg); err != nil {
		t.Fatal(err)
	}
	for _, pl := range []*Poller{p, q} {
		if err := pl.Register(prometheus.WrapRegistererWith(prometheus.Labels{"shard": pl.addr + fmt.Sprint(pl == q)}, reg)); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "respmeter_topology_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			got[l["shard"]+" "+l["kind"]] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		" slot_moved": 0, " slots_reassigned": 0, " masters_changed": 0,
		"127.0.0.1:1false slot_migration_started": 1, "127.0.0.1:1false slot_migration_ended": 1,
		"127.0.0.1:1true slot_migration_started": 70, "127.0.0.1:1true slot_migration_ended": 70,
	}
	if !maps.Equal(got, want) {
		t.Errorf("respmeter_topology_events_total by shard and kind: %v, want %v", got, want)
	}
}
