package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SlotMigration is one entry of Valkey's CLUSTER GETSLOTMIGRATIONS (Valkey
// 9.0 on, "Atomic slot migration"): its fields by name (name, operation,
// slot_ranges, state, message, create_time, last_update_time, ...), values
// as text.
type SlotMigration map[string]string

// MigrateSlots moves the slots first..last (inclusive, all owned by one
// node) to Nodes[to] by atomic slot migration (Valkey 9.0 on): CLUSTER
// MIGRATESLOTS SLOTSRANGE first last NODE <id> on the owner, then CLUSTER
// GETSLOTMIGRATIONS on the owner every 10 ms until the job's state is
// "success". The keys of every database move with their slots, and
// clients may go on writing meanwhile: the source pauses writes to the
// slots briefly at the cut-over, then answers MOVED. MigrateSlots updates
// Owner, waits as FinishMove does, and returns the job's entry as last
// seen. It fails the test on an error reply, a job that ends in another
// state, or one still running after timeout.
func (c *Cluster) MigrateSlots(first, last, to int, timeout time.Duration) SlotMigration {
	c.t.Helper()
	from, want := c.startMigration(first, last, to)
	job := c.awaitMigration(from, want, "success", timeout)
	c.finishMigration(first, last, to)
	return job
}

// MigrateSlotsPaused is MigrateSlots with the source's write pause held
// for hold: the target is kept from taking the slots over (DEBUG
// SLOTMIGRATION PREVENT-FAILOVER 1; the nodes must run with
// --enable-debug-command yes) until the source's job reaches state
// failover-granted, writes to the slots paused there, and for hold after
// that; then the cut-over goes on. It returns the job as last seen and
// when the pause was seen to begin and when it was let go.
func (c *Cluster) MigrateSlotsPaused(first, last, to int, hold, timeout time.Duration) (job SlotMigration, paused, released time.Time) {
	c.t.Helper()
	target := c.Nodes[to].Client()
	ctx := context.Background()
	if err := target.Do(ctx, "DEBUG", "SLOTMIGRATION", "PREVENT-FAILOVER", "1").Err(); err != nil {
		c.t.Fatalf("redistest: DEBUG SLOTMIGRATION PREVENT-FAILOVER 1 on node %d: %v", to, err)
	}
	from, want := c.startMigration(first, last, to)
	c.awaitMigration(from, want, "failover-granted", timeout)
	paused = time.Now()
	time.Sleep(hold)
	if err := target.Do(ctx, "DEBUG", "SLOTMIGRATION", "PREVENT-FAILOVER", "0").Err(); err != nil {
		c.t.Fatalf("redistest: DEBUG SLOTMIGRATION PREVENT-FAILOVER 0 on node %d: %v", to, err)
	}
	released = time.Now()
	job = c.awaitMigration(from, want, "success", timeout)
	c.finishMigration(first, last, to)
	return job, paused, released
}

// startMigration sends CLUSTER MIGRATESLOTS of first..last to Nodes[to] to
// their owner, and returns the owner and the job's slot range as CLUSTER
// GETSLOTMIGRATIONS writes it.
func (c *Cluster) startMigration(first, last, to int) (from int, want string) {
	c.t.Helper()
	from = c.owner[first]
	for s := first; s <= last; s++ {
		if c.owner[s] != from {
			c.t.Fatalf("redistest: MigrateSlots %d-%d: slot %d is node %d's, slot %d node %d's", first, last, first, from, s, c.owner[s])
		}
	}
	src := c.Nodes[from].Client()
	if err := src.Do(context.Background(), "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", first, last, "NODE", c.ids[to]).Err(); err != nil {
		c.t.Fatalf("redistest: CLUSTER MIGRATESLOTS %d-%d to node %d on node %d: %v", first, last, to, from, err)
	}
	return from, strconv.Itoa(first) + "-" + strconv.Itoa(last)
}

// awaitMigration polls CLUSTER GETSLOTMIGRATIONS on Nodes[from] every 10
// ms until its EXPORT job of the range want is in state (or, before
// success, fails the test when the job fails, is cancelled, or is not
// there within timeout), and returns the job as last seen.
func (c *Cluster) awaitMigration(from int, want, state string, timeout time.Duration) SlotMigration {
	c.t.Helper()
	var job SlotMigration
	err := Await(timeout, 10*time.Millisecond, func() error {
		jobs, err := c.SlotMigrations(from)
		if err != nil {
			return err
		}
		job = nil
		for _, j := range jobs {
			if j["operation"] == "EXPORT" && strings.Contains(" "+j["slot_ranges"]+" ", " "+want+" ") {
				job = j
			}
		}
		switch st := job["state"]; {
		case job == nil:
			return fmt.Errorf("no EXPORT job of %s in %v", want, jobs)
		case strings.EqualFold(st, state):
			return nil
		case strings.EqualFold(st, "failed") || strings.EqualFold(st, "cancelled"):
			return fmt.Errorf("job ended %s: %v", st, job)
		default:
			return fmt.Errorf("job still %s: %v", st, job)
		}
	})
	if err != nil {
		c.t.Fatalf("redistest: migration of %s from node %d: waiting for state %s: %v", want, from, state, err)
	}
	return job
}

// finishMigration gives slots first..last to Nodes[to] in Owner and waits
// as FinishMove does.
func (c *Cluster) finishMigration(first, last, to int) {
	for s := first; s <= last; s++ {
		c.owner[s] = to
	}
	c.Wait()
}

// SlotMigrations returns the CLUSTER GETSLOTMIGRATIONS entries of
// Nodes[node] (Valkey 9.0 on), in its order.
func (c *Cluster) SlotMigrations(node int) ([]SlotMigration, error) {
	v, err := c.Nodes[node].Client().Do(context.Background(), "CLUSTER", "GETSLOTMIGRATIONS").Result()
	if err != nil {
		return nil, err
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("CLUSTER GETSLOTMIGRATIONS: %T reply %v", v, v)
	}
	var out []SlotMigration
	for _, e := range list {
		m := SlotMigration{}
		switch e := e.(type) {
		case map[any]any: // RESP3
			for k, v := range e {
				m[fmt.Sprint(k)] = fmt.Sprint(v)
			}
		case []any: // RESP2: name, value, ...
			for i := 0; i+1 < len(e); i += 2 {
				m[fmt.Sprint(e[i])] = fmt.Sprint(e[i+1])
			}
		default:
			return nil, fmt.Errorf("CLUSTER GETSLOTMIGRATIONS: entry %T %v", e, e)
		}
		out = append(out, m)
	}
	return out, nil
}
