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
	from := c.owner[first]
	for s := first; s <= last; s++ {
		if c.owner[s] != from {
			c.t.Fatalf("redistest: MigrateSlots %d-%d: slot %d is node %d's, slot %d node %d's", first, last, first, from, s, c.owner[s])
		}
	}
	src := c.Nodes[from].Client()
	ctx := context.Background()
	if err := src.Do(ctx, "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", first, last, "NODE", c.ids[to]).Err(); err != nil {
		c.t.Fatalf("redistest: CLUSTER MIGRATESLOTS %d-%d to node %d on node %d: %v", first, last, to, from, err)
	}
	want := strconv.Itoa(first) + "-" + strconv.Itoa(last)
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
		switch state := job["state"]; {
		case job == nil:
			return fmt.Errorf("no EXPORT job of %s in %v", want, jobs)
		case strings.EqualFold(state, "success"):
			return nil
		case strings.EqualFold(state, "failed") || strings.EqualFold(state, "cancelled"):
			return fmt.Errorf("job ended %s: %v", state, job)
		default:
			return fmt.Errorf("job still %s: %v", state, job)
		}
	})
	if err != nil {
		c.t.Fatalf("redistest: MigrateSlots %s to node %d: %v", want, to, err)
	}
	for s := first; s <= last; s++ {
		c.owner[s] = to
	}
	c.Wait()
	return job
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
