package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics/heat"
)

// summaryDoc is the part of a --summary file the tests read.
type summaryDoc struct {
	Commands map[string]json.RawMessage `json:"commands"`
	Totals   struct {
		Count int64 `json:"count"`
	} `json:"totals"`
	Shards        []map[string]any `json:"shards"`
	Verdict       *verdictJSON     `json:"verdict"`
	VerdictLatest json.RawMessage  `json:"verdict_latest"`
	Engine        json.RawMessage  `json:"engine"`
	Probe         json.RawMessage  `json:"probe"`
	Run           runJSON          `json:"run"`
	Heat          *struct {
		Keys  heat.Keys  `json:"keys"`
		Slots heat.Slots `json:"slots"`
	} `json:"heat"`
}

// readSummary reads and decodes the summary at path.
func readSummary(path string) (*summaryDoc, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc summaryDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, data)
	}
	return &doc, nil
}

// commandCount returns the "count" of command name in doc, 0 if absent.
func commandCount(doc *summaryDoc, name string) int64 {
	var c struct {
		Count int64 `json:"count"`
	}
	_ = json.Unmarshal(doc.Commands[name], &c)
	return c.Count
}

// TestProxySummary runs "respmeter proxy --summary FILE" in front of a real
// redis-server: SIGUSR1 writes FILE (final false) with the commands counted
// so far, SIGTERM writes it again (final true) with all of them; its
// commands are exactly those of /stats read just before the stop, each
// phase with count, mean and ordered percentiles, plus the verdict since
// start and the run's addresses.
func TestProxySummary(t *testing.T) {
	srv := redistest.Start(t) // skips without redis-server or with -short
	path := filepath.Join(t.TempDir(), "run.json")
	p, addr, admin := startProxy(t, srv.Addr(), "--loops", "2", "--hdr-interval", "200ms", "--engine-poll", "100ms", "--summary", path, "--heat")
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("summary written before any signal: %v", err)
	}

	// Before any command: a summary all the same (no NaN from empty figures).
	p.signal(t, syscall.SIGUSR1)
	redistest.Eventually(t, 10*time.Second, func() error {
		doc, err := readSummary(path)
		if err == nil && (doc.Totals.Count != 0 || doc.Verdict == nil) {
			err = fmt.Errorf("idle summary: totals %d, verdict %v", doc.Totals.Count, doc.Verdict)
		}
		return err
	})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer c.Close()
	do := func(gets, sets int) {
		t.Helper()
		for i := range sets {
			if err := c.Set(ctx, "k"+strconv.Itoa(i), "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for i := range gets {
			if err := c.Get(ctx, "k"+strconv.Itoa(i)).Err(); err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
		}
	}
	// Counts are recorded as replies are written: wait for /stats to see them.
	waitStats := func(gets, sets int64) string {
		t.Helper()
		var body string
		redistest.Eventually(t, 10*time.Second, func() error {
			body = httpGet(t, "http://"+admin+"/stats")
			var doc summaryDoc
			if err := json.Unmarshal([]byte(body), &doc); err != nil {
				return err
			}
			if g, s := commandCount(&doc, "get"), commandCount(&doc, "set"); g != gets || s != sets {
				return fmt.Errorf("/stats: get %d set %d, want %d %d", g, s, gets, sets)
			}
			return nil
		})
		return body
	}
	do(500, 300)
	waitStats(500, 300)

	p.signal(t, syscall.SIGUSR1)
	var first *summaryDoc
	redistest.Eventually(t, 10*time.Second, func() error {
		var err error
		first, err = readSummary(path)
		return err
	})
	if first.Run.Final || commandCount(first, "get") != 500 || commandCount(first, "set") != 300 {
		t.Errorf("SIGUSR1 summary: final %v, get %d, set %d; want false, 500, 300",
			first.Run.Final, commandCount(first, "get"), commandCount(first, "set"))
	}

	do(200, 0)
	c.Close()
	stats := waitStats(700, 300)
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != exitOK {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.stderr)
	}
	doc, err := readSummary(path)
	if err != nil {
		t.Fatal(err)
	}
	var live summaryDoc
	if err := json.Unmarshal([]byte(stats), &live); err != nil {
		t.Fatal(err)
	}
	// Nothing was sent after /stats was read: the same commands, to the bit.
	for _, name := range []string{"get", "set"} {
		var got, want map[string]any
		_ = json.Unmarshal(doc.Commands[name], &got)
		_ = json.Unmarshal(live.Commands[name], &want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("summary %s differs from /stats before the stop:\n%s\n%s", name, doc.Commands[name], live.Commands[name])
		}
	}
	var get struct {
		Phases map[string]map[string]float64 `json:"phases"`
	}
	if err := json.Unmarshal(doc.Commands["get"], &get); err != nil {
		t.Fatal(err)
	}
	for _, ph := range []string{"total", "upstream", "proxy", "service", "queue"} {
		d, ok := get.Phases[ph]
		pcts := []float64{d["p50"], d["p90"], d["p99"], d["p99.9"], d["p99.99"], d["max"]}
		// queue is exactly 0 for one client without a pipeline (its
		// histogram reads 1 µs, the floor).
		if !ok || len(d) != 8 || d["count"] != 700 || d["mean"] < 0 || (ph != "queue" && d["mean"] == 0) ||
			pcts[0] <= 0 || !slices.IsSorted(pcts) {
			t.Errorf("get %s: %+v (present %v); want 700 timed, mean > 0 (queue: >= 0), 0 < p50 <= ... <= max", ph, d, ok)
		}
	}
	if !doc.Run.Final || doc.Run.Listen != addr || doc.Run.Admin != admin || doc.Run.Upstream != srv.Addr() ||
		doc.Run.Route != "none" || doc.Run.Loops != 2 || doc.Run.PID == 0 || !strings.HasPrefix(doc.Run.Version, "respmeter ") ||
		doc.Run.Seconds <= 0 || !doc.Run.Written.After(doc.Run.Started) || !doc.Run.Written.After(first.Run.Written) {
		t.Errorf("run section %+v", doc.Run)
	}
	if doc.Verdict == nil || doc.Verdict.Bound == "" || doc.Verdict.String == "" {
		t.Fatalf("no verdict since start: %+v", doc.Verdict)
	}
	sh := doc.Verdict.Shares
	if sum := sh.Client + sh.Path + sh.Engine + sh.EngineWait + sh.Proxy; math.Abs(sum-1) > 0.01 { // EngineWait holds RunQueue
		t.Errorf("verdict shares %v sum to %g, want 1", doc.Verdict.Shares, sum)
	}
	if string(doc.Engine) == "null" || string(doc.Probe) == "null" || len(doc.VerdictLatest) == 0 || doc.Shards == nil {
		t.Errorf("engine %s, probe %s, verdict_latest %s, shards %v", doc.Engine, doc.Probe, doc.VerdictLatest, doc.Shards)
	}
	if doc.Heat == nil || len(doc.Heat.Keys.ByRequests) == 0 {
		t.Errorf("no heat section with top keys: %+v", doc.Heat)
	} else {
		var n int64
		for _, sl := range doc.Heat.Slots.Slots {
			n += sl.Requests
		}
		if n < 700 { // the 700 GETs at least have a key each
			t.Errorf("heat: %d requests in the slot counters, want >= 700", n)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".run.json.*")); len(m) > 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

// TestSummaryBadPath: a --summary in a directory that does not exist fails
// the start (exit 1, naming it), before anything listens.
func TestSummaryBadPath(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "no", "such", "dir", "run.json")
	_, stderr, code := runCLI(t, nil, "proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--upstream", redistest.ClosedAddr(t), "--summary", bad)
	if code != exitFailure || !strings.Contains(stderr, "respmeter: summary: ") || !strings.Contains(stderr, filepath.Dir(bad)) ||
		strings.Contains(stderr, "listening") {
		t.Errorf("exit %d, want %d naming %s and nothing listening\nstderr:\n%s", code, exitFailure, bad, stderr)
	}
}
