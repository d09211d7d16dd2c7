package main

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/replay"
)

// BenchmarkPartitionedReplay replays one capture (redis-benchmark through
// the proxy: 16 connections of SET and GET) at --speed max with 1, 2 and
// 4 workers (separate processes, --partition i/N, one --start-at), each
// pinned with taskset to core i mod NumCPU where taskset exists, against
// one redis-server, and reports the replay's ops/s (all workers' commands
// over the slowest worker's duration), the largest start skew and the
// least time a worker was ready before the start time (negative: late). On a
// machine with fewer cores than workers plus the engine the workers share
// cores: the figure is then the engine's or the machine's limit, not the
// replayer's. Run with -benchtime 1x; RESPMETER_BENCH_PIN=0 leaves the
// workers unpinned.
func BenchmarkPartitionedReplay(b *testing.B) {
	bench := redistest.SkipIfUnavailable(b)
	bench = filepath.Join(filepath.Dir(bench), "redis-benchmark")
	src := redistest.Start(b)
	capDir := b.TempDir()
	st := capStack(b, src.Addr(), capDir)
	capPath := filepath.Join(capDir, "max.respcap")
	postAdmin := func(path string, q url.Values) {
		resp, err := http.Post("http://"+st.adminAddr+path+"?"+q.Encode(), "", nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %v %v", path, err, resp)
		}
		_ = resp.Body.Close()
	}
	postAdmin("/capture/start", url.Values{"file": {filepath.Base(capPath)}})
	host, port, _ := strings.Cut(st.proxy.Addr(), ":")
	if out, err := exec.Command(bench, "-h", host, "-p", port, "-t", "set,get", "-n", "40000", "-c", "16", "-r", "10000", "-q").CombinedOutput(); err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	postAdmin("/capture/stop", nil)
	taskset, _ := exec.LookPath("taskset")
	if os.Getenv("RESPMETER_BENCH_PIN") == "0" { // to compare with the scheduler's placement
		taskset = ""
	}

	dst := redistest.Start(b)
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			var ops, skew, ready float64
			for range b.N {
				dst.DoT(b, "FLUSHALL")
				dir := b.TempDir()
				at := time.Now().Add(6 * time.Second).UTC().Format(time.RFC3339Nano)
				procs := make([]*proc, workers)
				files := make([]string, workers)
				for i := range workers {
					files[i] = filepath.Join(dir, fmt.Sprintf("w%d.json", i))
					procs[i] = start(b, nil, "replay", capPath, "--target", dst.Addr(), "--speed", "max",
						"--partition", fmt.Sprintf("%d/%d", i, workers), "--start-at", at, "--json", files[i])
					if taskset != "" {
						cpu := strconv.Itoa(i % runtime.NumCPU())
						if out, err := exec.Command(taskset, "-a", "-c", "-p", cpu, strconv.Itoa(procs[i].cmd.Process.Pid)).CombinedOutput(); err != nil {
							b.Fatalf("taskset: %v\n%s", err, out)
						}
					}
				}
				var docs []*replay.WorkerDoc
				for i, p := range procs {
					if code := p.wait(b); code != exitOK {
						b.Fatalf("worker %d: exit %d\n%s", i, code, p.stderr)
					}
					docs = append(docs, readWorkerDoc(b, files[i]))
				}
				m, err := replay.Merge(docs, files)
				if err != nil {
					b.Fatal(err)
				}
				ops = float64(m.Report.Commands) / m.Report.DurationSeconds
				skew, ready = 0, 1e12
				for _, d := range docs {
					skew = max(skew, float64(d.Start.SkewUS))
					ready = min(ready, float64(d.Start.ReadyUS))
				}
			}
			b.ReportMetric(ops, "ops/s")
			b.ReportMetric(skew, "max-skew-µs")
			b.ReportMetric(ready/1e3, "min-ready-before-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
