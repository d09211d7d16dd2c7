package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/routing"
)

// TestProxySlotMigrationEvent: respmeter proxy --route slots --cluster on
// a 3-master Valkey 9.1 cluster, four go-redis clients writing keys of
// every node, while CLUSTER MIGRATESLOTS moves 1,000 of node 0's slots to
// node 1 with the write pause held for 1 s. The migration is shown as an
// event of the shards it concerns, with its start and end: in /stats
// shard_engines, node 0's engine lists the EXPORT of 0-999 and node 1's
// the IMPORT of the same job, ended (success), its start no later than
// the pause and its end no earlier (the engine's clock, whole seconds),
// node 2's none; respmeter saw it while it ran and ended after the
// pause; the log says when it was seen to begin and end; /metrics counts
// on each shard as many slot_migration_started and _ended topology
// events as its engine lists jobs (CLUSTER GETSLOTMIGRATIONS): one each
// on nodes 0 and 1, none on node 2; the live page, in a headless
// Chromium, lists the EXPORT on node 0 and the IMPORT on node 1 and
// nothing on node 2 (liveMigrations); the lines under the per-shard table
// at exit name it. Every acknowledged write is
// on the engines afterwards. Skips on an engine without CLUSTER
// MIGRATESLOTS.
func TestProxySlotMigrationEvent(t *testing.T) {
	ctx := context.Background()
	probe := redistest.Start(t)
	if err := probe.Client().Do(ctx, "COMMAND", "DOCS", "CLUSTER").Err(); err != nil ||
		!strings.Contains(fmt.Sprint(probe.DoT(t, "COMMAND", "DOCS", "CLUSTER")), "cluster|migrateslots") {
		_, engine := probe.Version()
		t.Skipf("%s has no CLUSTER MIGRATESLOTS (set %s to a Valkey 9 server)", engine, redistest.EngineEnv)
	}
	cl := redistest.StartClusterWith(t, 3, "--enable-debug-command", "yes")
	p := start(t, nil, "proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--loops", "1",
		"--route", "slots", "--cluster", cl.Nodes[2].Addr(), "--engine-poll", "100ms")
	addr := p.waitFor(t, p.stderr, logAddr("proxy listening"))[1]
	admin := "http://" + p.waitFor(t, p.stderr, logAddr("admin listening"))[1]

	const writers = 4
	var acked [writers]int // writer w set key "mig:w:i" to i for i < acked[w]
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if err := c.Set(ctx, fmt.Sprintf("mig:%d:%d", w, i), i, 0).Err(); err != nil {
					t.Errorf("writer %d: SET: %v", w, err)
					return
				}
				acked[w] = i + 1
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	job, paused, released := cl.MigrateSlotsPaused(0, 999, 1, time.Second, 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	close(done)
	wg.Wait()
	t.Logf("migration %s (%s): pause held from %s to %s", job["slot_ranges"], job["name"],
		paused.Format(time.StampMilli), released.Format(time.StampMilli))

	var got map[string][]migrationJSON // by shard
	redistest.Eventually(t, 10*time.Second, func() error {
		var doc struct {
			Shards []struct {
				Shard  string `json:"shard"`
				Engine *struct {
					Migrations []migrationJSON `json:"slot_migrations"`
				} `json:"engine"`
			} `json:"shard_engines"`
		}
		if err := json.Unmarshal([]byte(httpGet(t, admin+"/stats")), &doc); err != nil {
			return err
		}
		got = map[string][]migrationJSON{}
		for _, s := range doc.Shards {
			if s.Engine != nil {
				got[s.Shard] = s.Engine.Migrations
			}
		}
		for _, n := range cl.Nodes[:2] {
			if ms := got[n.Addr()]; len(ms) != 1 || ms[0].End == nil {
				return fmt.Errorf("shard %s: slot migrations %+v, want the one, ended", n.Addr(), ms)
			}
		}
		return nil
	})
	for i, op := range []string{"EXPORT", "IMPORT"} {
		m := got[cl.Nodes[i].Addr()][0]
		if m.Operation != op || m.Slots != "0-999" || m.Name != job["name"] || m.State != "success" {
			t.Errorf("node %d: slot migration %+v, want the %s of 0-999, job %s, success", i, m, op, job["name"])
		}
		// The engine's times are whole seconds: start at most the pause's
		// beginning, end at least its release, within a second of each.
		if m.Start.After(paused) || m.Start.Before(paused.Add(-2*time.Second)) ||
			m.End.Before(released.Truncate(time.Second)) || m.End.After(released.Add(2*time.Second)) {
			t.Errorf("node %d: migration from %s to %s (the engine's clock); the pause was held from %s to %s",
				i, m.Start.Format(time.StampMilli), m.End.Format(time.StampMilli), paused.Format(time.StampMilli), released.Format(time.StampMilli))
		}
		// respmeter sees it at a poll (every 100 ms) while it runs: before
		// the pause is released, not necessarily before it began (the copy
		// before the pause can take less than a poll: 41 ms late once).
		if m.Ended.Before(released) || !m.Seen.Before(released) {
			t.Errorf("node %d: respmeter saw the migration from %s, ended at %s; the pause was held from %s to %s",
				i, m.Seen.Format(time.StampMilli), m.Ended.Format(time.StampMilli), paused.Format(time.StampMilli), released.Format(time.StampMilli))
		}
	}
	if ms := got[cl.Nodes[2].Addr()]; len(ms) != 0 {
		t.Errorf("node 2, not part of the migration, lists %+v", ms)
	}
	// respmeter_topology_events_total counts on each shard the jobs its
	// engine lists (a fresh cluster: all started while respmeter watched),
	// read through the admin listener's /metrics.
	body := httpGet(t, admin+"/metrics")
	for i, n := range cl.Nodes {
		jobs, err := cl.SlotMigrations(i)
		if err != nil {
			t.Fatal(err)
		}
		var ended float64
		for _, j := range jobs {
			if j["state"] == "success" || j["state"] == "failed" || j["state"] == "cancelled" {
				ended++
			}
		}
		want := map[string]float64{"slot_migration_started": float64(len(jobs)), "slot_migration_ended": ended}
		if i < 2 && (len(jobs) != 1 || ended != 1) || i == 2 && len(jobs) != 0 {
			t.Errorf("node %d's engine lists %d jobs, %v ended: %v", i, len(jobs), ended, jobs)
		}
		for kind, w := range want {
			if v := metricValue(t, body, fmt.Sprintf(`respmeter_topology_events_total{kind=%q,shard=%q}`, kind, n.Addr())); v != w {
				t.Errorf("node %d: respmeter_topology_events_total{kind=%q} = %v; its engine lists %v", i, kind, v, w)
			}
		}
	}
	t.Run("live page", func(t *testing.T) { liveMigrations(t, admin, cl, job["name"]) })
	p.waitFor(t, p.stderr, `msg="slot migration ended" component=engine-poller upstream=`+regexp.QuoteMeta(cl.Nodes[0].Addr())+` operation=EXPORT slots=0-999 state=success`)
	p.signal(t, syscall.SIGTERM)
	p.wait(t)
	for i, want := range []string{"EXPORT 0-999 to ", "IMPORT 0-999 from "} {
		if line := "slot migration on " + cl.Nodes[i].Addr() + ": " + want; !strings.Contains(p.stdout.String(), line) {
			t.Errorf("the output at exit lacks %q:\n%s", line, p.stdout)
		}
	}
	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DisableIdentity: true})
	t.Cleanup(func() { _ = direct.Close() })
	missing, moved, total := 0, 0, 0
	for w := range writers {
		for i := range acked[w] {
			k := fmt.Sprintf("mig:%d:%d", w, i)
			total++
			if routing.Slot([]byte(k)) <= 999 {
				moved++
			}
			if got, err := direct.Get(ctx, k).Int(); err != nil || got != i {
				if missing++; missing <= 5 {
					t.Errorf("%s (slot %d) = %d, %v on the engines; its write of %d was acknowledged", k, routing.Slot([]byte(k)), got, err, i)
				}
			}
		}
	}
	if missing > 0 || moved == 0 {
		t.Fatalf("%d of %d acknowledged writes missing; %d of them in the moved slots", missing, total, moved)
	}
	t.Logf("all %d acknowledged writes on the engines, %d in the moved slots", total, moved)
}

// liveMigrations checks the live page of the admin URL after the migration
// named job of slots 0-999 from cl's node 0 to node 1 has ended: a row on
// node 0 (EXPORT) and one on node 1 (IMPORT), success, with an end time,
// none on node 2. Then it renders the same /stats document with the jobs
// as a poll finds them while they run (no end yet) and checks that the
// rows say running. Skips without a Chromium. A screenshot of the page
// goes to $RESPMETER_ARTIFACTS (or the test's temporary directory) as
// live-page-migrations.png.
func liveMigrations(t *testing.T, admin string, cl *redistest.Cluster, job string) {
	browser := chromiumPath(t)
	ctx := openLivePage(t, browser, strings.TrimPrefix(admin, "http://"))
	// Each row: shard, operation, job, class, slots, state, end; by shard.
	const rowsJS = `JSON.stringify([...document.querySelectorAll('#migrations tbody tr')].map(r =>
		[r.dataset.shard, r.dataset.operation, r.dataset.name, r.className,
		 ...["slots", "state", "end"].map(c => r.querySelector("td." + c).textContent)]))`
	rows := func(s string) string {
		var r [][]string
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			return s
		}
		slices.SortFunc(r, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
		return fmt.Sprint(r)
	}
	want := func(class, state, end string) string {
		return rows(fmt.Sprintf(`[[%q, "EXPORT", %q, %q, "0-999", %q, %q], [%q, "IMPORT", %q, %q, "0-999", %q, %q]]`,
			cl.Nodes[0].Addr(), job, class, state, end, cl.Nodes[1].Addr(), job, class, state, end))
	}
	var got string
	redistest.EventuallyEvery(t, 30*time.Second, 200*time.Millisecond, func() error {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](rowsJS))
		var r [][]string
		if err != nil || json.Unmarshal([]byte(s), &r) != nil || len(r) != 2 {
			return fmt.Errorf("migration rows %s (err %v), want the two of job %s", s, err, job)
		}
		// An ended job's end is the engine's time of day, not "running".
		for _, row := range r {
			if len(row) != 7 || row[6] == "running" || !strings.Contains(row[6], ":") {
				return fmt.Errorf("migration rows %s: want an end time on each", s)
			}
			row[6] = "T"
		}
		b, _ := json.Marshal(r)
		if got = rows(string(b)); got != want("", "success", "T") {
			return fmt.Errorf("migration rows %s, want %s (T: a time of day)", got, want("", "success", "T"))
		}
		return nil
	})
	t.Logf("live page migration rows: %s", got)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	out := filepath.Join(artifactDir(t), "live-page-migrations.png")
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	// The same document as a poll gives it while the jobs run.
	doc := httpGet(t, admin+"/stats")
	running, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(d => {
		for (const e of d.shard_engines) for (const m of (e.engine && e.engine.slot_migrations) || []) {
			m.end = null; m.ended = null; m.state = "snapshotting";
		}
		renderMigrations(d);
		return `+rowsJS+`;
	})(`+doc+`)`))
	if err != nil || rows(running) != want("running", "snapshotting", "running") {
		t.Errorf("migration rows of the running jobs: %s (err %v), want %s", rows(running), err, want("running", "snapshotting", "running"))
	}
}
