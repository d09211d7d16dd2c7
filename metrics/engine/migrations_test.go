package engine

import (
	"testing"
	"time"
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
