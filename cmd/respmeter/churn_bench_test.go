package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/respmeter/respmeter/internal/redistest"
)

// churnBaseEnv names the git revision of this repository that
// BenchmarkChurnCPU compares with (main, a commit); unset, the benchmark
// is skipped.
const churnBaseEnv = "RESPMETER_CHURN_BASE"

// buildRevision builds ./cmd/respmeter at git revision rev of the
// repository holding the working directory (git archive, go build), or
// from the work tree itself, uncommitted changes included, when rev is
// "", and returns the binary's path, in a temporary directory.
func buildRevision(b *testing.B, rev string) string {
	b.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		b.Fatalf("git rev-parse: %v", err)
	}
	src := string(top[:len(top)-1])
	if rev != "" {
		dir := b.TempDir()
		archive := exec.Command("sh", "-c", "git -C \"$1\" archive \"$2\" | tar -x -C \"$3\"", "sh", src, rev, dir)
		if out, err := archive.CombinedOutput(); err != nil {
			b.Fatalf("git archive %s: %v\n%s", rev, err, out)
		}
		src = dir
	}
	bin := filepath.Join(b.TempDir(), "respmeter")
	build := exec.Command("go", "build", "-o", bin, "./cmd/respmeter")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build at %q: %v\n%s", rev, err, out)
	}
	return bin
}

// BenchmarkChurnCPU reports the proxy's CPU per client connection under
// connection churn in shared mode, a new connection per command as
// PHP-FPM workers make them (redis-benchmark -k 0: connect, GET, close),
// against the build of $RESPMETER_CHURN_BASE: two proxies with
// --upstream-mode shared in front of one redis-server, this build ("new")
// and the base, driven at the same time by identical redis-benchmark runs
// (-c 20), so that a busy machine slows both alike. Here every new client
// waits for an auth check that started after it connected (coalesced: one
// at a time serves every client waiting when it starts). The CPU is each
// process's user + system time from /proc/PID/stat divided by the
// connections: "base-µs/conn", "new-µs/conn" and "new/base". Run it alone:
//
//	RESPMETER_CHURN_BASE=main go test -run '^$' -bench ChurnCPU -benchtime 3x ./cmd/respmeter/
func BenchmarkChurnCPU(b *testing.B) {
	rev := os.Getenv(churnBaseEnv)
	if rev == "" {
		b.Skipf("set %s to the git revision to compare with (main, a commit)", churnBaseEnv)
	}
	bench, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Skipf("redis-benchmark not in PATH: %v", err)
	}
	baseBin := buildRevision(b, rev)
	srv := redistest.Start(b)
	srv.DoT(b, "SET", "key:__rand_int__", "v")
	shared := []string{"--upstream-mode", "shared", "--loops", "1", "--probe-interval", "0", "--engine-poll", "0"}
	nw, nwAddr, _ := startProxy(b, srv.Addr(), shared...)
	base := startExe(b, baseBin, nil, append([]string{"proxy", "--listen", "127.0.0.1:0", "--upstream", srv.Addr(),
		"--admin", "127.0.0.1:0"}, shared...)...)
	baseAddr := base.waitFor(b, base.stderr, logAddr("proxy listening"))[1]
	const conns = 20_000 // about 1 s of proxy CPU per side on a quiet machine
	var baseTicks, newTicks, total int64
	for range b.N {
		b0, n0 := procTicks(b, base.cmd.Process.Pid), procTicks(b, nw.cmd.Process.Pid)
		sideBySide(b, bench, []string{baseAddr, nwAddr}, "-c", "20", "-n", strconv.Itoa(conns), "-k", "0", "-t", "get", "-q")
		baseTicks += procTicks(b, base.cmd.Process.Pid) - b0
		newTicks += procTicks(b, nw.cmd.Process.Pid) - n0
		total += conns
	}
	b.StopTimer()
	// A tick is 10 ms (USER_HZ 100): µs/conn = ticks * 1e4 / conns.
	b.ReportMetric(float64(baseTicks)*1e4/float64(total), "base-µs/conn")
	b.ReportMetric(float64(newTicks)*1e4/float64(total), "new-µs/conn")
	b.ReportMetric(float64(newTicks)/float64(baseTicks), "new/base")
}
