package engine

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
)

// Migration is one atomic slot migration job as a shard's engine reports
// it (CLUSTER GETSLOTMIGRATIONS, Valkey 9.0 on): the source of a CLUSTER
// MIGRATESLOTS lists it as an EXPORT, the target as an IMPORT. The source
// pauses writes to the slots briefly at the cut-over, then answers MOVED
// for them; a write that met the pause spent it waiting on this shard.
type Migration struct {
	// Name is the job's name (40 hex digits), the same on source and
	// target.
	Name string
	// Operation is "EXPORT" (this shard is the source) or "IMPORT".
	Operation string
	// Slots is the job's slot_ranges as the engine gives them ("0-999",
	// ranges separated by spaces).
	Slots string
	// Source and Target are the cluster node IDs of the slots' owner
	// before and after.
	Source, Target string
	// State is the engine's state of the job when last polled (Valkey
	// 9.1: waiting-to-snapshot, snapshotting, ..., success, failed,
	// cancelled).
	State string
	// Start is the job's create_time and End its last_update_time once
	// the job has ended (success, failed, cancelled; zero while it runs):
	// the engine's clock, in whole seconds (the field's resolution).
	Start, End time.Time
	// Seen is when a poll first listed the job, and Ended when a poll
	// first found it ended (zero while it runs): respmeter's clock, within
	// one poll interval of the engine's times.
	Seen, Ended time.Time
}

// Running reports whether the job had not ended at the last poll.
func (m Migration) Running() bool { return m.End.IsZero() }

// ended reports whether state is a final state of a job.
func ended(state string) bool {
	switch strings.ToLower(state) {
	case "success", "failed", "cancelled", "canceled":
		return true
	}
	return false
}

// maxMigrations bounds the jobs a Poller keeps; the oldest go first.
const maxMigrations = 64

// parseMigrations parses a CLUSTER GETSLOTMIGRATIONS reply: an array of
// jobs, each a RESP3 map or a RESP2 array of name, value pairs.
func parseMigrations(v respconn.Value) ([]Migration, error) {
	if err := replyErr(v); err != nil {
		return nil, err
	}
	if !v.IsArray() {
		return nil, fmt.Errorf("%w: CLUSTER GETSLOTMIGRATIONS reply %s", errShape, v)
	}
	out := make([]Migration, 0, len(v.Elems))
	for _, e := range v.Elems {
		if e.Type != resp.TypeMap && !e.IsArray() || len(e.Elems)%2 != 0 {
			return nil, fmt.Errorf("%w: CLUSTER GETSLOTMIGRATIONS entry %s", errShape, e)
		}
		f := make(map[string]string, len(e.Elems)/2)
		for i := 0; i+1 < len(e.Elems); i += 2 {
			val := e.Elems[i+1]
			if val.Type == resp.TypeInteger {
				f[e.Elems[i].Str] = strconv.FormatInt(val.Int, 10)
			} else {
				f[e.Elems[i].Str] = val.Str
			}
		}
		m := Migration{Name: f["name"], Operation: strings.ToUpper(f["operation"]), Slots: f["slot_ranges"],
			Source: f["source_node"], Target: f["target_node"], State: f["state"]}
		if m.Name == "" {
			return nil, fmt.Errorf("%w: CLUSTER GETSLOTMIGRATIONS entry without a name: %s", errShape, e)
		}
		if s, err := strconv.ParseInt(f["create_time"], 10, 64); err == nil {
			m.Start = time.Unix(s, 0)
		}
		if s, err := strconv.ParseInt(f["last_update_time"], 10, 64); err == nil && ended(m.State) {
			m.End = time.Unix(s, 0)
		}
		out = append(out, m)
	}
	return out, nil
}

// applyMigrations folds one poll's jobs, taken at now, into p's list. A job
// that had ended before the Poller's first poll of migrations is not kept:
// the list holds what happened while respmeter watched. A job's start and
// end are logged and counted (MigrationCounts) once each, also after it
// has left the list (past its 64 jobs) while the engine still lists it.
func (p *Poller) applyMigrations(now time.Time, jobs []Migration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := !p.migPolled
	p.migPolled = true
	if p.migSkip == nil {
		p.migSkip = make(map[string]bool)
	}
	listed := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		listed[j.Name] = true
		if p.migSkip[j.Name] {
			continue
		}
		i := p.migrationLocked(j.Name, j.Operation)
		if i < 0 {
			if first && !j.Running() {
				p.migSkip[j.Name] = true
				continue
			}
			j.Seen = now
			if !j.Running() {
				j.Ended = now
			}
			p.migrations = append(p.migrations, j)
			if len(p.migrations) > maxMigrations {
				p.migSkip[p.migrations[0].Name] = true
				p.migrations = p.migrations[1:]
			}
			p.migStarted++
			p.logger.Info("slot migration", "operation", j.Operation, "slots", j.Slots, "state", j.State,
				"source", j.Source, "target", j.Target, "created", j.Start)
			if !j.Running() {
				p.migEnded++
				p.logMigrationEnd(j)
			}
			continue
		}
		m := &p.migrations[i]
		wasRunning := m.Running()
		m.State, m.End = j.State, j.End
		if wasRunning && !m.Running() {
			m.Ended = now
			p.migEnded++
			p.logMigrationEnd(*m)
		}
	}
	// A name the engine no longer lists cannot come back: migSkip stays
	// within the engine's own log (cluster-slot-migration-log-max-len).
	for name := range p.migSkip {
		if !listed[name] {
			delete(p.migSkip, name)
		}
	}
}

func (p *Poller) logMigrationEnd(m Migration) {
	p.logger.Info("slot migration ended", "operation", m.Operation, "slots", m.Slots, "state", m.State,
		"created", m.Start, "ended", m.End, "seconds", m.End.Sub(m.Start).Seconds())
}

// migrationLocked returns the index of the job named name with operation
// op in p.migrations, -1 when there is none. The caller holds p.mu.
func (p *Poller) migrationLocked(name, op string) int {
	for i := range p.migrations {
		if p.migrations[i].Name == name && p.migrations[i].Operation == op {
			return i
		}
	}
	return -1
}

// Migrations returns the atomic slot migrations the engine reported while
// the Poller watched (CLUSTER GETSLOTMIGRATIONS, polled with the engine's
// statistics on engines that have it, Valkey 9.0 on, in cluster mode), in
// the order they were first seen, at most the last 64, in a slice the
// caller owns; nil on other engines.
func (p *Poller) Migrations() []Migration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Migration(nil), p.migrations...)
}

// MigrationCounts returns how many atomic slot migrations the engine
// listed, as source or target, since the Poller's first poll (one that had
// ended by then not counted): started when a poll first listed the job,
// ended when a poll first found it ended (success, failed, cancelled); ok
// is false while the engine has not answered CLUSTER GETSLOTMIGRATIONS
// (other engines, or not in cluster mode). They are the Poller's
// respmeter_topology_events_total series.
func (p *Poller) MigrationCounts() (started, ended int64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.migStarted, p.migEnded, p.slotJobs
}
