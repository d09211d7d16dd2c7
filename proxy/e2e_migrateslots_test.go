package proxy_test

// Atomic slot migration (Valkey 9.0 on, CLUSTER MIGRATESLOTS): the source
// copies a slot range's keys to the target while serving them, pauses
// writes to the range briefly at the cut-over, then answers MOVED; there is
// no ASK phase. These tests skip on an engine without it; .ci/run runs them
// against Valkey 9.1 through RESPMETER_TEST_ENGINE.

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/check"
	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
	"github.com/respmeter/respmeter/routing"
)

// skipWithoutMigrateSlots skips t unless the engine has CLUSTER
// MIGRATESLOTS.
func skipWithoutMigrateSlots(t *testing.T) {
	t.Helper()
	skipUnlessValkey9(t, "CLUSTER MIGRATESLOTS", func(probe *redistest.Server) bool {
		return engineKnows(t, probe, "cluster|migrateslots")
	})
}

// keysInSlots returns n distinct keys named prefix+number whose hash slots
// lie in first..last.
func keysInSlots(prefix string, first, last, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		if s := int(routing.Slot([]byte(k))); s >= first && s <= last {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestClusterMigrateSlotsWrites: while four go-redis clients write keys of
// a 1,000-slot range without pause, through --route slots --cluster (plain
// clients) and through the facade (ClusterClients on the virtual nodes),
// the range moves to another master by CLUSTER MIGRATESLOTS. Every write
// gets its reply (+OK, no error: the write pause and the MOVED that follows
// are the proxy's to absorb), and afterwards a ClusterClient on the engines
// themselves reads every key with the value its last acknowledged write
// gave it.
func TestClusterMigrateSlotsWrites(t *testing.T) {
	skipWithoutMigrateSlots(t)
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DisableIdentity: true})
	t.Cleanup(func() { _ = direct.Close() })
	for i, m := range []string{"slots", "facade"} {
		first, last := 1000*i, 1000*i+999 // node 0's slots, moved to node 1
		p, set := proxytest.StartProxy(t, "", func(c *proxy.Config) {
			c.Route, c.Cluster = proxy.RouteSlots, cl.Nodes[2].Addr()
			if m == "facade" {
				c.Route = proxy.RouteFacade
				c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}
			}
		})
		const writers = 4
		keys := keysInSlots("ms:"+m+":", first, last, 2000)
		var stop atomic.Bool
		var written [writers]int // per writer: writes acknowledged, each key i%len(keys) set to "w:i"
		var wg sync.WaitGroup
		for w := range writers {
			c := migrateWriter(t, p, m)
			wg.Go(func() {
				for i := 0; !stop.Load(); i++ {
					key := keys[(i*writers+w)%len(keys)]
					if err := c.Set(ctx, key, fmt.Sprintf("%d:%d", w, i), 0).Err(); err != nil {
						t.Errorf("%s: writer %d: SET %s (write %d): %v", m, w, key, i, err)
						return
					}
					written[w] = i + 1
				}
			})
		}
		time.Sleep(300 * time.Millisecond)
		job := cl.MigrateSlots(first, last, 1, 60*time.Second)
		time.Sleep(300 * time.Millisecond)
		stop.Store(true)
		wg.Wait()
		t.Logf("%s: migration %s: created %s, last update %s; writes %v; redirects moved %d",
			m, job["slot_ranges"], job["create_time"], job["last_update_time"], written, set.Snapshot().Routing.RedirectsMoved)
		want := map[string]string{}
		for w := range writers {
			for i := range written[w] {
				want[keys[(i*writers+w)%len(keys)]] = fmt.Sprintf("%d:%d", w, i)
			}
		}
		mismatches := 0
		for k, v := range want {
			if got, err := direct.Get(ctx, k).Result(); err != nil || got != v {
				if mismatches++; mismatches <= 5 {
					t.Errorf("%s: %s (slot %d) = %q, %v on the engines; its last acknowledged write was %q",
						m, k, routing.Slot([]byte(k)), got, err, v)
				}
			}
		}
		if mismatches > 0 || len(want) < 1000 {
			t.Fatalf("%s: %d of %d keys differ from their last acknowledged write", m, mismatches, len(want))
		}
		// The migration is counted as a change of the shard map: slots
		// that a MOVED or the refresh after it gave their new owner, no
		// master joined or gone.
		var r metrics.RoutingCounters
		redistest.Eventually(t, 5*time.Second, func() error {
			if r = set.Snapshot().Routing; r.TopologySlotMoved+r.TopologyReassigned == 0 {
				return fmt.Errorf("%s: no topology event counted for the migration: %+v", m, r)
			}
			return nil
		})
		if r.TopologyMasters != 0 {
			t.Errorf("%s: %d masters_changed events, want 0: the migration moved slots between the same masters", m, r.TopologyMasters)
		}
		t.Logf("%s: topology events: slot_moved %d, slots_reassigned %d", m, r.TopologySlotMoved, r.TopologyReassigned)
	}
}

// TestCheckMigrateSlotsOtherDB: the integrity checker (respmeter check,
// internal/check) run in db 0 through --route slots --cluster while
// CLUSTER MIGRATESLOTS moves a slot range whose keys are partly in db 3,
// on a cluster with 16 databases. Valkey 9.1.2 itself misplaces writes
// there: db-0 writes sent to the target during the migration land in db 3.
// The checker must report them (mismatches: a later GET in db 0 does not
// find what was written). The test looks for the checker's keys in db 3 on
// every node: when there are none, the engine placed every write right in
// this run, and the test skips, saying so.
func TestCheckMigrateSlotsOtherDB(t *testing.T) {
	skipWithoutMigrateSlots(t)
	cl := redistest.StartClusterWith(t, 3, "--cluster-databases", "16")
	ctx := context.Background()
	first, last := 0, 4999 // node 0's slots, moved to node 1
	db3 := redis.NewClient(&redis.Options{Addr: cl.Nodes[0].Addr(), DB: 3, DisableIdentity: true})
	t.Cleanup(func() { _ = db3.Close() })
	pipe := db3.Pipeline()
	for _, k := range keysInSlots("db3:", first, last, 5000) {
		pipe.Set(ctx, k, "db3", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	p, _ := proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route, c.Cluster = proxy.RouteSlots, cl.Nodes[2].Addr()
	})
	const prefix = "rmcheck:asm:"
	var res check.Result
	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, runErr = check.Run(ctx, check.Options{Target: p.Addr(), Conns: 16, Commands: 1 << 40,
			Duration: 4 * time.Second, MaxDepth: 16, KeyPrefix: prefix, Timeout: 20 * time.Second})
	}()
	time.Sleep(500 * time.Millisecond)
	job := cl.MigrateSlots(first, last, 1, 60*time.Second)
	<-done
	t.Logf("migration %s: created %s, last update %s; check: %d commands, %d mismatches, %d connection errors; first: %s",
		job["slot_ranges"], job["create_time"], job["last_update_time"], res.Commands, res.Mismatches, res.ConnErrors, res.FirstMismatch)
	if runErr != nil {
		t.Logf("check: %v", runErr)
	}
	misplaced := 0
	for i, node := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: node.Addr(), DB: 3, DisableIdentity: true})
		keys, err := c.Keys(ctx, prefix+"*").Result()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			t.Logf("node %d: %d of the checker's db-0 keys in db 3, e.g. %s (slot %d)", i, len(keys), keys[0], routing.Slot([]byte(keys[0])))
		}
		for _, k := range keys {
			// The engine's fault is the migration's: only the target, only the moved slots.
			if s := int(routing.Slot([]byte(k))); i != 1 || s < first || s > last {
				t.Errorf("node %d: %s (slot %d) in db 3: not a moved slot on the target; what misplaced it?", i, k, s)
			}
		}
		misplaced += len(keys)
	}
	if misplaced == 0 {
		if res.Mismatches != 0 {
			t.Fatalf("no write misplaced into db 3, yet the checker reports %d mismatches: %s", res.Mismatches, res.FirstMismatch)
		}
		t.Skip("the engine placed every db-0 write in db 0 during the migration: its misplacement into db 3 did not occur")
	}
	if res.Mismatches == 0 {
		t.Fatalf("%d db-0 writes landed in db 3 and the checker reported no mismatch", misplaced)
	}
	// Where and when: the checker's mismatches by hash slot lie in the
	// moved range, and none was seen before the migration began (500 ms
	// into the run; 100 ms allowed for the run's own start).
	if len(res.Slots) == 0 {
		t.Fatalf("%d mismatches and no hash slot named for them", res.Mismatches)
	}
	var n int64
	for _, sm := range res.Slots {
		n += sm.Mismatches
		if int(sm.Slot) < first || int(sm.Slot) > last || sm.First < 400*time.Millisecond {
			t.Errorf("slot %d: %d mismatches from %v to %v: outside the moved slots %d-%d or before the migration",
				sm.Slot, sm.Mismatches, sm.First, sm.Last, first, last)
		}
	}
	t.Logf("check: %d mismatches in %d hash slots, %d to %d, from %v to %v of the run",
		n, len(res.Slots), res.Slots[0].Slot, res.Slots[len(res.Slots)-1].Slot,
		slices.MinFunc(res.Slots, func(a, b check.SlotMismatches) int { return cmp.Compare(a.First, b.First) }).First,
		slices.MaxFunc(res.Slots, func(a, b check.SlotMismatches) int { return cmp.Compare(a.Last, b.Last) }).Last)
}

// TestFacadeGetSlotMigrations: CLUSTER GETSLOTMIGRATIONS on a virtual node
// of the facade over a Valkey 9.1 cluster lists the atomic slot migrations
// of that node's own engine as the engine gives them, RESP2 and RESP3, but
// with every engine node id replaced by the id of the virtual node that
// presents that master: a client that matches a job's source_node and
// target_node with the virtual nodes' ids (CLUSTER SLOTS, NODES, MYID)
// finds them, and no engine id reaches it. 100 slots move from node 0 to
// node 1, the cut-over held for 300 ms: while the job runs, the source's
// virtual node lists its EXPORT and the target's its IMPORT, unfinished,
// naming the two virtual nodes (what a client waiting for the job to end
// reads); afterwards each lists the ended job as its engine does, and the
// third node none.
func TestFacadeGetSlotMigrations(t *testing.T) {
	skipWithoutMigrateSlots(t)
	cl := redistest.StartClusterWith(t, 3, "--enable-debug-command", "yes")
	p, _ := proxytest.StartProxy(t, "", func(c *proxy.Config) {
		c.Route, c.Cluster = proxy.RouteFacade, cl.Nodes[2].Addr()
		c.FacadeListen = []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}
	})
	// The virtual node of each engine, by a slot it owns before and
	// after the migration in the facade's CLUSTER SLOTS.
	fc := redis.NewClient(&redis.Options{Addr: p.FacadeAddrs()[0], DisableIdentity: true})
	t.Cleanup(func() { _ = fc.Close() })
	//lint:ignore SA1019 CLUSTER SLOTS itself is under test: the facade announces its layout there, and cluster clients still send it
	ranges, err := fc.ClusterSlots(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	vaddr, vid := make([]string, 3), make([]string, 3)
	for i := range cl.Nodes {
		slot := 5461*i + 1000
		if cl.Owner(slot) != i {
			t.Fatalf("slot %d is node %d's, want %d's", slot, cl.Owner(slot), i)
		}
		for _, r := range ranges {
			if r.Start <= slot && slot <= r.End {
				vaddr[i], vid[i] = r.Nodes[0].Addr, r.Nodes[0].ID
			}
		}
		if vid[i] == "" || vid[i] == cl.NodeID(i) {
			t.Fatalf("node %d: virtual node %q id %q in the facade's CLUSTER SLOTS %v", i, vaddr[i], vid[i], ranges)
		}
	}
	// While the job runs: the source's and the target's virtual nodes
	// asked every 10 ms; each reply that lists the job unfinished kept.
	var running [2][]byte
	var asked [2]int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range running {
		c := redistest.Dial(t, vaddr[i])
		wg.Go(func() {
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				if c.Write(respCmd("CLUSTER", "GETSLOTMIGRATIONS")) != nil {
					return
				}
				b, err := c.ReadFrame(5 * time.Second)
				if err != nil {
					return
				}
				asked[i]++
				if running[i] == nil && bytes.Contains(b, []byte("0-99")) && !bytes.Contains(b, []byte("success")) {
					running[i] = b
				}
			}
		})
	}
	cl.MigrateSlotsPaused(0, 99, 1, 300*time.Millisecond, 30*time.Second)
	close(stop)
	wg.Wait()
	for i, op := range []string{"EXPORT", "IMPORT"} {
		switch b := running[i]; {
		case b == nil:
			t.Errorf("node %d: no reply of %d listed the job unfinished", i, asked[i])
		case !bytes.Contains(b, []byte(op)) || !bytes.Contains(b, []byte(vid[0])) || !bytes.Contains(b, []byte(vid[1])) ||
			bytes.Contains(b, []byte(cl.NodeID(0))) || bytes.Contains(b, []byte(cl.NodeID(1))):
			t.Errorf("node %d: the running job is no %s naming virtual nodes %s and %s only: %q", i, op, vid[0], vid[1], b)
		default:
			t.Logf("node %d's virtual node, %d replies, the job running: %q", i, asked[i], b)
		}
	}
	ask := func(addr string, proto int) []byte {
		c := redistest.Dial(t, addr)
		defer c.Close()
		if proto == 3 {
			c.Send(t, respCmd("HELLO", "3"))
			if _, err := c.ReadFrame(5 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
		c.Send(t, respCmd("CLUSTER", "GETSLOTMIGRATIONS"))
		b, err := c.ReadFrame(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for i, op := range []string{"EXPORT", "IMPORT", ""} {
		for _, proto := range []int{2, 3} {
			direct := ask(cl.Nodes[i].Addr(), proto)
			want := direct
			for k := range cl.Nodes {
				want = bytes.ReplaceAll(want, []byte(cl.NodeID(k)), []byte(vid[k]))
			}
			got := ask(vaddr[i], proto)
			if !bytes.Equal(got, want) {
				t.Errorf("node %d, RESP%d: the virtual node answers\n%q\nwant the engine's with virtual node ids\n%q", i, proto, got, want)
			}
			switch {
			case op == "" && string(direct) != "*0\r\n":
				t.Errorf("node %d, RESP%d: the engine lists jobs: %q", i, proto, direct)
			case op != "" && (!bytes.Contains(got, []byte(op)) || !bytes.Contains(got, []byte(vid[0])) || !bytes.Contains(got, []byte(vid[1]))):
				t.Errorf("node %d, RESP%d: no %s job naming virtual nodes %s and %s: %q", i, proto, op, vid[0], vid[1], got)
			}
			for k := range cl.Nodes {
				if bytes.Contains(got, []byte(cl.NodeID(k))) {
					t.Errorf("node %d, RESP%d: engine node %d's id reaches the client: %q", i, proto, k, got)
				}
			}
		}
	}
}

// migrateWriter is one writer's client through p in mode m: a go-redis
// ClusterClient on the facade's virtual nodes ("facade"), else a plain
// client on p's slot-routed endpoint; closed when t ends.
func migrateWriter(t *testing.T, p *proxy.Proxy, m string) redis.Cmdable {
	if m == "facade" {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: p.FacadeAddrs(), DisableIdentity: true})
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	pc := redis.NewClient(&redis.Options{Addr: p.Addr(), DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = pc.Close() })
	return pc
}
