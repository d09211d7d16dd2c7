package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/replay"
)

// distClients and distRounds shape distWorkload.
const distClients, distRounds = 8, 25

// distWorkload captures, through an in-process proxy in front of a real
// redis-server, distClients connections each sending distRounds pipelines
// of RPUSH order:<c> <round> (so that the target's list order:<c> shows
// which rounds were replayed, how many times and in what order), SET, GET
// and INCR of its own keys, GET seed:0, INCR seed:1 (an error: it holds
// text) and GET typed:<c> (nil). It returns the capture's path.
func distWorkload(t *testing.T) string {
	t.Helper()
	src := redistest.Start(t)
	src.DoT(t, "SET", "seed:0", "zero")
	src.DoT(t, "SET", "seed:1", "text")
	capDir := t.TempDir()
	st := capStack(t, src.Addr(), capDir)
	path := filepath.Join(capDir, "dist.respcap")
	if code, s := adminPost(t, st, "/capture/start", url.Values{"file": {filepath.Base(path)}}); code != http.StatusOK || !s.Running {
		t.Fatalf("capture start: %d %+v", code, s)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, distClients)
	for c := range distClients {
		wg.Go(func() {
			cl := goRedis(st.proxy.Addr(), 2)
			defer cl.Close()
			for i := range distRounds {
				pipe := cl.Pipeline()
				pipe.RPush(ctx, fmt.Sprint("order:", c), i)
				pipe.Set(ctx, fmt.Sprintf("k:%d:%d", c, i), i, 0)
				pipe.Get(ctx, fmt.Sprintf("k:%d:%d", c, i))
				pipe.Incr(ctx, fmt.Sprint("n:", c))
				pipe.Get(ctx, "seed:0")
				pipe.Incr(ctx, "seed:1")
				pipe.Get(ctx, fmt.Sprint("typed:", c))
				if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil && !strings.Contains(err.Error(), "not an integer") {
					errs <- err
					return
				}
				time.Sleep(2 * time.Millisecond) // a schedule to keep at --speed 1
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if code, s := adminPost(t, st, "/capture/stop", nil); code != http.StatusOK || s.Dropped != 0 {
		t.Fatalf("capture stop: %d %+v", code, s)
	}
	return path
}

// distTarget empties the replay target and gives it data that differs from
// the captured engine's, so that the replay has mismatches (GET seed:0),
// new errors (GET typed:<c> of a list: WRONGTYPE) and gone errors (INCR
// seed:1 of a number).
func distTarget(t *testing.T, dst *redistest.Server) {
	t.Helper()
	dst.DoT(t, "FLUSHALL")
	dst.DoT(t, "SET", "seed:0", "changed")
	dst.DoT(t, "SET", "seed:1", "5")
	for c := range distClients {
		dst.DoT(t, "RPUSH", fmt.Sprint("typed:", c), "x")
	}
}

// checkOrder fails unless every captured connection's rounds reached the
// target exactly once, in order: list order:<c> is 0..distRounds-1.
func checkOrder(t *testing.T, dst *redistest.Server, what string) {
	t.Helper()
	want := make([]string, distRounds)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	cl := dst.Client()
	for c := range distClients {
		got, err := cl.LRange(context.Background(), fmt.Sprint("order:", c), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: connection %d's rounds reached the target as %v, want each once in order", what, c, got)
		}
	}
}

// readWorkerDoc reads a replay --json report.
func readWorkerDoc(t testing.TB, path string) *replay.WorkerDoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d replay.WorkerDoc
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// TestPartitionedReplay: four replay workers (separate processes) given
// one --start-at replay a capture's connections between them against one
// real redis-server; `report merge` of their reports has the per-command
// counts, mismatches and errors of one unpartitioned replay of the same
// capture against the same starting data; every captured connection's
// commands reached the engine exactly once and in order; each worker
// reports its start skew. Merging a partition twice is refused, a missing
// one is named, and --partition 5/4 is refused.
func TestPartitionedReplay(t *testing.T) {
	capPath := distWorkload(t)
	dst := redistest.Start(t)
	dir := t.TempDir()

	distTarget(t, dst)
	single := filepath.Join(dir, "single.json")
	if out, errOut, code := runCLI(t, nil, "replay", capPath, "--target", dst.Addr(), "--speed", "1", "--json", single); code != exitOK {
		t.Fatalf("single replay: exit %d\n%s\n%s", code, out, errOut)
	}
	checkOrder(t, dst, "single replay")
	want := readWorkerDoc(t, single).Report
	if want.Mismatches == 0 || want.NewErrors == 0 || want.GoneErrors == 0 {
		t.Fatalf("the workload should have mismatches, new and gone errors: %d, %d, %d", want.Mismatches, want.NewErrors, want.GoneErrors)
	}

	distTarget(t, dst)
	const workers = 4
	// Time to start four processes, load the capture and connect, with
	// room to spare: a worker ready late would be skewed by that.
	startAt := time.Now().Add(5 * time.Second).UTC().Format(time.RFC3339Nano)
	procs := make([]*proc, workers)
	files := make([]string, workers)
	results := filepath.Join(dir, "results")
	if err := os.Mkdir(results, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range workers {
		files[i] = filepath.Join(results, fmt.Sprintf("w%d.json", i))
		procs[i] = start(t, nil, "replay", capPath, "--target", dst.Addr(), "--speed", "1",
			"--partition", fmt.Sprintf("%d/%d", i, workers), "--start-at", startAt,
			"--json", files[i], "--hdr-log", filepath.Join(results, fmt.Sprintf("w%d.hlog", i)))
	}
	for i, p := range procs {
		if code := p.wait(t); code != exitOK {
			t.Fatalf("worker %d: exit %d\n%s\n%s", i, code, p.stdout, p.stderr)
		}
		if !strings.Contains(p.stdout.String(), "start skew") || !strings.Contains(p.stdout.String(), fmt.Sprintf("partition %d/4 by connection: 2 of 8", i)) {
			t.Errorf("worker %d's report lacks its partition or start skew:\n%s", i, p.stdout)
		}
	}
	checkOrder(t, dst, "four workers")

	out, errOut, code := runCLI(t, nil, append([]string{"report", "merge", "--json"}, files...)...)
	if code != exitOK {
		t.Fatalf("merge: exit %d\n%s\n%s", code, out, errOut)
	}
	var m struct {
		Report struct {
			Commands, Mismatches, NewErrors, GoneErrors int64
			PerCommand                                  map[string]struct{ Count, Mismatches, NewErrors, GoneErrors int64 }
		}
		Workers []struct {
			Partition   string
			StartSkewUS *int64
			Commands    int64
		}
	}
	if err := json.Unmarshal([]byte(strings.ReplaceAll(out, "_", "")), &m); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	r := m.Report
	if r.Commands != want.Commands || r.Mismatches != want.Mismatches || r.NewErrors != want.NewErrors || r.GoneErrors != want.GoneErrors {
		t.Errorf("merged: %d commands, %d mismatches, %d new and %d gone errors; one replay: %d, %d, %d, %d",
			r.Commands, r.Mismatches, r.NewErrors, r.GoneErrors, want.Commands, want.Mismatches, want.NewErrors, want.GoneErrors)
	}
	if len(r.PerCommand) != len(want.PerCommand) {
		t.Errorf("merged %d commands, one replay %d", len(r.PerCommand), len(want.PerCommand))
	}
	for name, w := range want.PerCommand {
		g := r.PerCommand[name]
		if g.Count != w.Count || g.Mismatches != w.Mismatches || g.NewErrors != w.NewErrors || g.GoneErrors != w.GoneErrors {
			t.Errorf("%s: merged %+v, one replay count %d, mismatches %d, new errors %d, gone errors %d",
				name, g, w.Count, w.Mismatches, w.NewErrors, w.GoneErrors)
		}
	}
	if len(m.Workers) != workers {
		t.Fatalf("merge lists %d workers, want %d\n%s", len(m.Workers), workers, out)
	}
	for i, w := range m.Workers {
		// The figure to read is in the log (and the benchmarks); the bound
		// only catches a worker that missed the start time altogether.
		st := readWorkerDoc(t, files[i]).Start
		if w.StartSkewUS == nil || st == nil || *w.StartSkewUS < 0 || *w.StartSkewUS > int64(time.Second/time.Microsecond) {
			t.Errorf("worker %s: start skew %v µs (start %+v: ready_before_us < 0 is a worker that was not ready in time), want measured, within a second",
				w.Partition, w.StartSkewUS, st)
			continue
		}
		t.Logf("worker %s: %d commands, start skew %d µs, ready %d ms before", w.Partition, w.Commands, *w.StartSkewUS, st.ReadyUS/1000)
	}
	// A directory stands for its reports and logs, as the Kubernetes
	// merge pod gives the results volume.
	text, _, code := runCLI(t, nil, "report", "merge", results)
	t.Logf("merged report:\n%s", text)
	for _, s := range []string{"merged 4 of 4 partitions", "start skew:", "bottleneck:", "replayed " + strconv.FormatInt(want.Commands, 10) + " commands", "merged HDR logs", "rpush.total"} {
		if code != exitOK || !strings.Contains(text, s) {
			t.Errorf("merge text report (exit %d) lacks %q:\n%s", code, s, text)
		}
	}

	// A missing partition is named with its connections; exit 1.
	w3 := readWorkerDoc(t, files[3]).Worker.Replayed
	out, errOut, code = runCLI(t, nil, append([]string{"report", "merge"}, files[:3]...)...)
	if code != exitFailure || !strings.Contains(out, "INCOMPLETE: partitions [3] missing") || !strings.Contains(errOut, strings.Join(w3, ", ")) {
		t.Errorf("merge without partition 3: exit %d, want 1 naming it and its connections %v\n%s\n%s", code, w3, out, errOut)
	}
	// The same report twice, and a second worker 0/4 (another run), are
	// refused: their commands would be counted twice.
	_, errOut, code = runCLI(t, nil, "report", "merge", files[0], files[1], files[0])
	if code != exitUsage || !strings.Contains(errOut, "counted twice") {
		t.Errorf("merge of one report twice: exit %d, want 2\n%s", code, errOut)
	}
	again := filepath.Join(dir, "w0-again.json")
	if out, errOut, code := runCLI(t, nil, "replay", capPath, "--target", dst.Addr(), "--speed", "max", "--partition", "0/4", "--json", again); code != exitOK {
		t.Fatalf("second worker 0/4: exit %d\n%s\n%s", code, out, errOut)
	}
	_, errOut, code = runCLI(t, nil, append([]string{"report", "merge"}, append(files, again)...)...)
	if code != exitUsage || !strings.Contains(errOut, "are both partition 0/4") || !strings.Contains(errOut, "was replayed by "+files[0]) {
		t.Errorf("merge with two workers 0/4: exit %d, want 2 naming both and their connections\n%s", code, errOut)
	}
	// By slot range, two workers: each key's commands stay on one worker
	// in their connection's order, so this workload (a connection's keys
	// are its own) replays with the same counts, replies and order.
	distTarget(t, dst)
	var slotFiles []string
	for i := range 2 {
		f := filepath.Join(dir, fmt.Sprintf("slot%d.json", i))
		slotFiles = append(slotFiles, f)
		if out, errOut, code := runCLI(t, nil, "replay", capPath, "--target", dst.Addr(), "--speed", "max",
			"--partition", fmt.Sprintf("%d/2", i), "--partition-by", "slot", "--json", f); code != exitOK {
			t.Fatalf("slot worker %d: exit %d\n%s\n%s", i, code, out, errOut)
		}
	}
	checkOrder(t, dst, "two workers by slot")
	out, errOut, code = runCLI(t, nil, append([]string{"report", "merge", "--json"}, slotFiles...)...)
	if code != exitOK {
		t.Fatalf("merge by slot: exit %d\n%s\n%s", code, out, errOut)
	}
	m.Report.Commands, m.Report.Mismatches, m.Report.NewErrors, m.Report.GoneErrors = 0, 0, 0, 0
	if err := json.Unmarshal([]byte(strings.ReplaceAll(out, "_", "")), &m); err != nil {
		t.Fatal(err)
	}
	if r := m.Report; r.Commands != want.Commands || r.Mismatches != want.Mismatches || r.NewErrors != want.NewErrors || r.GoneErrors != want.GoneErrors {
		t.Errorf("merged by slot: %d commands, %d mismatches, %d new and %d gone errors; one replay: %d, %d, %d, %d",
			r.Commands, r.Mismatches, r.NewErrors, r.GoneErrors, want.Commands, want.Mismatches, want.NewErrors, want.GoneErrors)
	}
	for i, f := range slotFiles {
		if n := readWorkerDoc(t, f).Commands; n == 0 || n == want.Commands {
			t.Errorf("slot worker %d replayed %d of %d commands: want a share", i, n, want.Commands)
		}
	}

	for _, bad := range []string{"5/4", "4/4", "-1/4", "0/0", "1", "a/b"} {
		_, errOut, code := runCLI(t, nil, "replay", capPath, "--target", dst.Addr(), "--partition", bad)
		if code != exitUsage || !strings.Contains(errOut, "--partition") {
			t.Errorf("--partition %s: exit %d, want 2\n%s", bad, code, errOut)
		}
	}
}

// engineCalls returns INFO commandstats' calls and failed_calls of each
// command (Redis 7+).
func engineCalls(t *testing.T, srv *redistest.Server) map[string][2]int64 {
	t.Helper()
	info, err := srv.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		var v [2]int64
		for _, f := range strings.Split(rest, ",") {
			k, n, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				v[0], _ = strconv.ParseInt(n, 10, 64)
			case "failed_calls":
				v[1], _ = strconv.ParseInt(n, 10, 64)
			}
		}
		out[name] = v
	}
	return out
}

// TestMergeProxySummaries: two proxies in front of one redis-server, each
// with --summary and --hdr-log, under load from redis-benchmark and a
// go-redis client (with error replies); `report merge` of the two
// summaries and logs counts each command as the engine's commandstats
// do (calls, and errors as failed_calls), with percentiles from the
// merged logs; the same summary twice is refused.
func TestMergeProxySummaries(t *testing.T) {
	bench := redistest.SkipIfUnavailable(t)
	bench = filepath.Join(filepath.Dir(bench), "redis-benchmark")
	if _, err := os.Stat(bench); err != nil {
		t.Skipf("redis-benchmark beside redis-server: %v", err)
	}
	srv := redistest.Start(t)
	srv.DoT(t, "SET", "text", "not a number")
	dir := t.TempDir()
	var files []string
	var procs []*proc
	var addrs []string
	for i := range 2 {
		sum, hlog := filepath.Join(dir, fmt.Sprintf("p%d.json", i)), filepath.Join(dir, fmt.Sprintf("p%d.hlog", i))
		p, addr, _ := startProxy(t, srv.Addr(), "--summary", sum, "--hdr-log", hlog, "--hdr-interval", "200ms",
			"--engine-poll", "0", "--probe-interval", "0")
		files = append(files, sum, hlog)
		procs, addrs = append(procs, p), append(addrs, addr)
	}
	srv.DoT(t, "CONFIG", "RESETSTAT")
	ctx := context.Background()
	for i, addr := range addrs {
		host, port, _ := strings.Cut(addr, ":")
		n := strconv.Itoa(1000 * (i + 1)) // the proxies see different loads
		if out, err := exec.Command(bench, "-h", host, "-p", port, "-t", "set,get,incr,lpush", "-n", n, "-c", "4", "-P", "4", "-q").CombinedOutput(); err != nil {
			t.Fatalf("redis-benchmark through %s: %v\n%s", addr, err, out)
		}
		c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		for range 5 * (i + 1) {
			if err := c.Incr(ctx, "text").Err(); err == nil {
				t.Fatal("INCR of text succeeded")
			}
		}
		_ = c.Close()
	}
	want := engineCalls(t, srv)
	for _, p := range procs {
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t); code != exitOK {
			t.Fatalf("proxy exit %d\n%s", code, p.stderr)
		}
	}

	out, errOut, code := runCLI(t, nil, append([]string{"report", "merge", "--json"}, files...)...)
	if code != exitOK {
		t.Fatalf("merge: exit %d\n%s\n%s", code, out, errOut)
	}
	var m summaryTable
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, name := range []string{"set", "get", "incr", "lpush"} {
		r, w := m.Commands[name], want[name]
		if r == nil || r.Count != w[0] || r.Errors != w[1] {
			t.Errorf("%s: merged %+v, engine calls %d, failed %d", name, r, w[0], w[1])
			continue
		}
		if r.PerProxy[0] == 0 || r.PerProxy[1] == 0 || r.Total["p99"] <= 0 {
			t.Errorf("%s: per proxy %v, merged p99 %v s: want both proxies and percentiles from the logs", name, r.PerProxy, r.Total["p99"])
		}
	}
	if w := want["incr"]; w[1] != 15 {
		t.Errorf("engine: incr failed %d times, want 15", w[1])
	}
	// The directory holds the two summaries and logs.
	text, _, code := runCLI(t, nil, "report", "merge", dir)
	t.Logf("merged proxies:\n%s", text)
	if code != exitOK || !strings.Contains(text, "merged 2 proxies") {
		t.Errorf("merge text: exit %d\n%s", code, text)
	}
	_, errOut, code = runCLI(t, nil, "report", "merge", files[0], files[2], files[0])
	if code != exitUsage || !strings.Contains(errOut, "counted twice") {
		t.Errorf("merge of one summary twice: exit %d, want 2\n%s", code, errOut)
	}
}

// TestParseStartAt: --start-at reads RFC 3339 (with fractions and
// offsets) and Unix seconds (with fractions); anything else, and a time
// more than an hour ago, is a usage error.
func TestParseStartAt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"2026-01-02T15:04:05Z", time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)},
		{"2026-01-02T16:04:05.25+01:00", time.Date(2026, 1, 2, 15, 4, 5, 250e6, time.UTC)},
		{"1767366245", time.Unix(1767366245, 0)},
		{"1767366245.5", time.Unix(1767366245, 500e6)},
	} {
		got, err := parseStartAt(tc.in)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("parseStartAt(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "tomorrow", "2026-01-02 15:04:05", "-5", "0"} {
		if got, err := parseStartAt(bad); err == nil {
			t.Errorf("parseStartAt(%q) = %v, want an error", bad, got)
		}
	}
	capPath := filepath.Join(t.TempDir(), "absent.respcap")
	for _, arg := range []string{"soon", strconv.FormatInt(time.Now().Add(-2*time.Hour).Unix(), 10)} {
		var stderr strings.Builder
		code := run(context.Background(), []string{"replay", capPath, "--target", "127.0.0.1:1", "--start-at", arg}, io.Discard, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--start-at") {
			t.Errorf("--start-at %s: exit %d, want 2\n%s", arg, code, stderr.String())
		}
	}
}
