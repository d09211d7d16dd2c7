package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/replay"
)

// captureTwo captures, through the proxy in front of a fresh
// redis-server, what drive sends on two connections (a and b, one
// connection each, RESP2) and returns the capture file.
func captureTwo(t *testing.T, drive func(ctx context.Context, a, b *redis.Client)) string {
	t.Helper()
	src := redistest.Start(t)
	capDir := t.TempDir()
	st := capStack(t, src.Addr(), capDir)
	path := filepath.Join(capDir, "w.respcap")
	if code, s := adminPost(t, st, "/capture/start", url.Values{"file": {filepath.Base(path)}}); code != http.StatusOK || !s.Running {
		t.Fatalf("capture start: %d %+v", code, s)
	}
	a, b := goRedis(st.proxy.Addr(), 2), goRedis(st.proxy.Addr(), 2)
	drive(context.Background(), a, b)
	_ = a.Close()
	_ = b.Close()
	if code, s := adminPost(t, st, "/capture/stop", nil); code != http.StatusOK || s.Records == 0 || s.Dropped != 0 {
		t.Fatalf("capture stop: %d %+v", code, s)
	}
	return path
}

// do runs one command on c and fails the test on a transport error
// (a nil reply is not one).
func do(t *testing.T, c *redis.Client, args ...any) {
	t.Helper()
	if err := c.Do(context.Background(), args...).Err(); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
}

// replayRun runs "respmeter replay" with args and returns its exit code,
// stdout and stderr.
func replayRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"replay"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestReplayExitCodes: replay's exit status says whether the replay ran
// and, with --fail-on, whether what was asked about happened. Each case
// replays the same capture (two connections, each on its own keys; one
// GET of a key the capture found missing) against a fresh redis-server:
//   - as it was: exit 0, nothing differs;
//   - with that key set on the target (one injected mismatch): exit 0
//     without --fail-on, 4 with --fail-on mismatches, and the text table
//     gives get 1 mismatch;
//   - a target with requirepass and no --auth: every command NOAUTH, exit
//     3 with the hint to set the password; with the password: exit 0;
//   - a closed port: exit 1; an unknown --fail-on value: exit 2.
func TestReplayExitCodes(t *testing.T) {
	path := captureTwo(t, func(ctx context.Context, a, b *redis.Client) {
		for i := range 5 {
			do(t, a, "SET", fmt.Sprint("a:", i), i)
			do(t, b, "SET", fmt.Sprint("b:", i), i)
			do(t, a, "GET", fmt.Sprint("a:", i))
			do(t, b, "INCR", "b:n")
		}
		do(t, a, "GET", "absent")
	})

	clean := redistest.Start(t)
	if code, out, errs := replayRun(t, path, "--target", clean.Addr(), "--speed", "max"); code != exitOK ||
		!strings.Contains(out, "mismatches 0 ") || !strings.Contains(out, "new errors 0,") {
		t.Errorf("clean replay: exit %d, want 0 and nothing different\n%s%s", code, out, errs)
	}

	for _, failOn := range []bool{false, true} {
		dst := redistest.Start(t)
		dst.DoT(t, "SET", "absent", "injected")
		args := []string{path, "--target", dst.Addr(), "--speed", "max"}
		want := exitOK
		if failOn {
			args, want = append(args, "--fail-on", "mismatches"), exitFailOn
		}
		code, out, errs := replayRun(t, args...)
		if code != want {
			t.Errorf("one injected mismatch, --fail-on %v: exit %d, want %d\n%s%s", failOn, code, want, out, errs)
		}
		if failOn && !strings.Contains(errs, "--fail-on mismatches: 1 mismatches") {
			t.Errorf("--fail-on mismatches: stderr %q does not say why", errs)
		}
		// The table's get row: count 6, 1 mismatch, 0 races, 0 new, 0 gone.
		if !regexp.MustCompile(`(?m)^get +6 +1 +0 +0 +0 `).MatchString(out) ||
			!regexp.MustCompile(`(?m)^set +10 +0 +0 +0 +0 `).MatchString(out) {
			t.Errorf("the per-command table does not give get 1 mismatch and set none:\n%s", out)
		}
		if !strings.Contains(out, "  get: *2 $3 GET $6 absent") || !strings.Contains(out, "not a race") {
			t.Errorf("the mismatch sample is not GET absent, classified not a race:\n%s", out)
		}
	}

	const pw = "replay-secret"
	locked := redistest.Start(t, "--requirepass", pw)
	code, out, errs := replayRun(t, path, "--target", locked.Addr(), "--speed", "max")
	if code != exitRefused || !strings.Contains(errs, "refused the replay") || !strings.Contains(errs, "NOAUTH") ||
		!strings.Contains(errs, "$"+authEnv) {
		t.Errorf("password-protected target without --auth: exit %d, want %d with the NOAUTH hint\n%s%s", code, exitRefused, out, errs)
	}
	if strings.Contains(out+errs, pw) {
		t.Errorf("the password is in the output")
	}
	if code, out, errs := replayRun(t, path, "--target", locked.Addr(), "--speed", "max", "--auth", pw); code != exitOK {
		t.Errorf("password-protected target with --auth: exit %d, want 0\n%s%s", code, out, errs)
	}
	if code, _, errs := replayRun(t, path, "--target", redistest.ClosedAddr(t)); code != exitFailure || !strings.Contains(errs, "refused") {
		t.Errorf("closed port: exit %d, want %d: %s", code, exitFailure, errs)
	}
	if code, _, errs := replayRun(t, path, "--target", clean.Addr(), "--fail-on", "mismatch"); code != exitUsage {
		t.Errorf("--fail-on mismatch (a typo): exit %d, want %d: %s", code, exitUsage, errs)
	}
}

// TestReplayReportSpreadAndRaces: the samples cover every command that
// differs (a few each, not ten of the first), and a mismatch on a key
// another captured connection wrote is classified a possible race while
// one on a key only its own connection wrote is not.
//
// Captured on an empty engine: a APPENDs "x" to shared and b GETs it
// ("x"), then b reads g:0..g:9 (all missing). The target starts with
// g:0..g:9 set (10 GET mismatches) and shared = "p", so a's APPEND answers
// 2, not 1 (a mismatch; no other connection wrote shared), and b's GET
// shared answers "p" or "px", never "x" (a mismatch; a wrote shared: a
// possible race), whatever order the two connections run in.
func TestReplayReportSpreadAndRaces(t *testing.T) {
	path := captureTwo(t, func(ctx context.Context, a, b *redis.Client) {
		do(t, a, "APPEND", "shared", "x")
		do(t, b, "GET", "shared")
		for i := range 10 {
			do(t, b, "GET", fmt.Sprint("g:", i))
		}
		do(t, a, "STRLEN", "own")
	})
	dst := redistest.Start(t)
	for i := range 10 {
		dst.DoT(t, "SET", fmt.Sprint("g:", i), "there")
	}
	dst.DoT(t, "SET", "shared", "p")
	jsonPath := filepath.Join(t.TempDir(), "rp.json")
	code, out, errs := replayRun(t, path, "--target", dst.Addr(), "--speed", "max", "--json", jsonPath)
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	var rep replay.Report
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Mismatches != 12 || rep.PossibleRaces != 1 {
		t.Fatalf("%d mismatches, %d possible races; want 12, 1\n%s", rep.Mismatches, rep.PossibleRaces, out)
	}
	if g, a := rep.PerCommand["get"], rep.PerCommand["append"]; g.Mismatches != 11 || g.PossibleRaces != 1 || a.Mismatches != 1 || a.PossibleRaces != 0 {
		t.Errorf("get %d mismatches (%d races), append %d (%d); want 11 (1), 1 (0)", g.Mismatches, g.PossibleRaces, a.Mismatches, a.PossibleRaces)
	}
	per := map[string]int{}
	var raceSample, appendClass string
	for _, s := range rep.MismatchSamples {
		per[s.Command]++
		if strings.Contains(s.Request, "shared") && s.Command == "get" {
			raceSample = s.Class
		}
		if s.Command == "append" {
			appendClass = s.Class
		}
	}
	if per["get"] != 3 || per["append"] != 1 {
		t.Errorf("samples per command %v, want get 3 and append 1", per)
	}
	if !strings.HasPrefix(raceSample, `possible race: key "shared" also written by another captured connection`) {
		t.Errorf("GET shared (APPENDed by the other connection) classified %q, want a possible race", raceSample)
	}
	if !strings.HasPrefix(appendClass, "not a race") {
		t.Errorf("APPEND shared (no other connection wrote it) classified %q, want not a race", appendClass)
	}
	if !regexp.MustCompile(`(?m)^get +11 +11 +1 +0 +0 `).MatchString(out) ||
		!regexp.MustCompile(`(?m)^append +1 +1 +0 +0 +0 `).MatchString(out) {
		t.Errorf("the table does not list get 11 (1 race) and append 1:\n%s", out)
	}
	t.Logf("report:\n%s", out)
	if !strings.Contains(out, "mismatches 12 (possible races 1)") {
		t.Errorf("the totals line does not give the races:\n%s", out)
	}
}

// TestReplayMostlyLate: a schedule no replayer keeps (20,000 PINGs on one
// connection, 1 µs apart, at --speed 1: each write takes longer than 1
// µs, so batch i is sent at least i µs late and all but the first
// thousand or so are more than 1 ms late) prints its ratio column as not
// meaningful, and --fail-on late fails it.
func TestReplayMostlyLate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ping.respcap")
	c, err := capture.Start(path, capture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := c.NewConn()
	ping, pong := redistest.Cmd("PING"), []byte("+PONG\r\n")
	const n = 20000
	for i := range n {
		now := int64(i) * int64(time.Microsecond)
		c.Loop(0).Batch(id, now, uint64(i+1), ping, true)
		c.Loop(0).Reply(id, uint64(i+1), now+20_000, pong, false, 20_000, 15_000)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	dst := redistest.Start(t)
	code, out, errs := replayRun(t, path, "--target", dst.Addr(), "--speed", "1", "--fail-on", "late")
	if code != exitFailOn || !strings.Contains(errs, "--fail-on late:") {
		t.Errorf("exit %d, want %d with --fail-on late's reason\n%s%s", code, exitFailOn, out, errs)
	}
	if !strings.Contains(out, "ratio (not meaningful)") || !regexp.MustCompile(`(?m)^ping +20000 .* -$`).MatchString(out) ||
		!strings.Contains(out, "the ratios are not meaningful") {
		t.Errorf("the ratios are not marked as not meaningful:\n%s", out)
	}
	if strings.Contains(out, "slower (p99") {
		t.Errorf("the slower list is printed from ratios that mean nothing:\n%s", out)
	}
}
