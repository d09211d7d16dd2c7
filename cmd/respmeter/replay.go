package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/internal/replay"
	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/metrics/hdrlog"
	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

type replayFlags struct {
	target      string
	speed       string
	connections string
	readOnly    bool
	duration    time.Duration
	jsonOut     string
	hdrLog      string
	slower      float64
	user        string
	auth        string
	progress    bool
	failOn      []string
	part        partitionFlags
	tls         clientTLSFlags
}

// authEnv is the environment variable replay reads the target's password
// from when --auth is not given: redis-cli's, so that one setting serves
// both and the password stays out of the process list.
const authEnv = "REDISCLI_AUTH"

// newReplayCmd is "respmeter replay"; lookupEnv reads authEnv.
func newReplayCmd(stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay FILE... --target HOST:PORT",
		Short: "Replay captured workloads (respmeter proxy --capture) against any RESP engine and compare",
		Long: `Replay one or more capture files (merged into one timeline by their start
times) against --target: one connection per captured connection (or
--connections N, captured connection i on replay connection i mod N), each
connection's requests in their captured order and batches (pipelines stay
pipelines), sent open-loop at the captured time divided by --speed; with
--speed max each connection sends a batch as soon as the previous one is
answered. Connection state captured at start (SELECT, HELLO, CLIENT
SETNAME) is sent first; requests holding a redacted credential and
pub/sub, MONITOR and SYNC requests are skipped.

The report compares every reply with the captured one's summary (RESP
type, size, 64-bit hash): mismatches, error replies that are new or gone,
and per command the count and p50/p99/p99.9 captured (total time through
the proxy) against replayed (from the intended send time: coordinated
omission corrected), with ratios. Mismatches are meaningful when the
target started from the data the captured engine had (its RDB, or a
replica stopped at the capture start). Batches sent more than 1 ms after
their intended time are counted as late: many late batches mean the
replayer, not the target, was the bottleneck.

--auth PASSWORD (or $REDISCLI_AUTH, as redis-cli reads it: the process
list shows flags) and --user USER authenticate every replay connection
and the command-table read with AUTH first, since the captured AUTH is
redacted; a refused AUTH fails the replay. Neither is ever printed.
--tls connects over TLS, with redis-cli's --cacert, --cert, --key, --sni
and --insecure (docs/tls.md).

A progress line (batches sent of the total, elapsed time, late batches)
is kept up to date on stderr when it is a terminal, or written once a
second with --progress; the last one when the replay ends.

Mismatches are classified where the engine's key specs allow: a key that
another captured connection also wrote within the race window is a
possible race (the replay keeps each connection's order, not the order
between connections).

Exit codes: 0 replayed (differences or not, unless --fail-on says
otherwise), 1 runtime failure (the target could not be reached, a file
could not be read), 2 usage error, 3 the target refused the replay (every
command answered with a new error, such as NOAUTH without --auth), 4 a
--fail-on condition held.` + partitionHelp,
		Example: `  respmeter replay app.respcap --target 127.0.0.1:6390 --speed max --json report.json
  respmeter replay a.respcap b.respcap --target valkey:6379 --speed 2 --read-only`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.auth == "" {
				f.auth, _ = lookupEnv(authEnv)
			}
			return runReplay(cmd, stdout, stderr, args, f)
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&f.target, "target", "", "`host:port` of the engine (or proxy) to replay against (required)")
	fs.StringVar(&f.speed, "speed", "1", "1 (captured pace), a factor such as 2.5, or max (as fast as each connection's replies allow)")
	fs.StringVar(&f.connections, "connections", "as-captured", "as-captured, or N replay connections")
	fs.BoolVar(&f.readOnly, "read-only", false, "replay only commands the target flags readonly (COMMAND INFO), keeping its data reusable")
	fs.DurationVar(&f.duration, "duration", 0, "replay only the batches scheduled within this long; 0: all")
	fs.StringVar(&f.jsonOut, "json", "", "write the report as JSON to `file`")
	fs.StringVar(&f.hdrLog, "hdr-log", "", "write the replayed latencies (µs, tags <command>.total) as an HdrHistogram log to `file`, for respmeter report --compare")
	fs.Float64Var(&f.slower, "slower", 1.5, "list commands whose replayed p99 is at least this many times the captured one")
	fs.StringVar(&f.user, "user", "", "`user` to AUTH as on the target (ACL; needs --auth)")
	fs.StringVar(&f.auth, "auth", "", "`password` to AUTH with on the target; prefer $"+authEnv+", the process list shows flags")
	fs.BoolVar(&f.progress, "progress", false, "write a progress line to stderr once a second even when it is not a terminal")
	fs.StringSliceVar(&f.failOn, "fail-on", nil, "exit 4 when any of these happened: mismatches, new-errors, late (more than 1% of batches late); comma-separated")
	f.tls.register(fs)
	f.part.register(fs)
	return cmd
}

func runReplay(cmd *cobra.Command, stdout, stderr io.Writer, files []string, f replayFlags) error {
	if f.target == "" {
		return usageError(cmd, errors.New("--target is required"))
	}
	if f.user != "" && f.auth == "" {
		return usageError(cmd, errors.New("--user needs --auth PASSWORD (or $"+authEnv+")"))
	}
	if err := checkFailOn(f.failOn); err != nil {
		return usageError(cmd, err)
	}
	tlsCfg, err := f.tls.config(cmd, stderr)
	if err != nil {
		return err
	}
	o := replay.Options{Target: f.target, Duration: f.duration, User: f.user, Password: f.auth, TLS: tlsCfg}
	if f.speed != "max" {
		v, err := strconv.ParseFloat(f.speed, 64)
		if err != nil || v <= 0 {
			return usageError(cmd, fmt.Errorf("--speed %q: 1, a positive factor, or max", f.speed))
		}
		o.Speed = v
	}
	if f.connections != "as-captured" {
		n, err := strconv.Atoi(f.connections)
		if err != nil || n <= 0 {
			return usageError(cmd, fmt.Errorf("--connections %q: as-captured or a positive number", f.connections))
		}
		o.Connections = n
	}
	part, startAt, err := f.part.parse(cmd, time.Now())
	if err != nil {
		return err
	}
	o.StartAt = startAt
	w, err := capture.Load(files...)
	if err != nil {
		return failure(err)
	}
	// The target's command table says which replies may differ run to
	// run (tips); the built-in one when it cannot be read.
	ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
	infos, infoErr := command.FetchInfo(ctx, f.target, 5*time.Second, respconn.Options{User: f.user, Password: f.auth, TLS: tlsCfg})
	cancel()
	r := routing.NewResolver(infos)
	o.Compare = func(name string) replay.Compare {
		if name == "hello" || name == "client" {
			// Their replies carry the connection's id (HELLO, CLIENT ID,
			// INFO, LIST), which the engine's tips do not say.
			return replay.Errors
		}
		return replay.CompareByTips(r.Info(r.Lookup([]byte(name))).Tips)
	}
	o.Keys = replayKeys(r)
	if f.readOnly {
		if infoErr != nil {
			return failure(fmt.Errorf("--read-only: read the target's command table: %w", infoErr))
		}
		o.Skip = func(name string, _ []byte) bool {
			return !r.Info(r.Lookup([]byte(name))).Flags.Has(command.FlagReadonly)
		}
	}
	w, all := part.Select(w, slotOf(r))
	start := time.Now()
	stopProgress := func() {}
	if tty := isTerminal(stderr); tty || f.progress {
		total := 0
		for _, c := range w.Conns {
			total += len(c.Batches)
		}
		o.OnSend, stopProgress = startProgress(stderr, tty, total, start)
	}
	rep, err := replay.Run(cmd.Context(), w, o)
	stopProgress()
	if err != nil {
		return failure(err)
	}
	end := time.Now()
	if rep.Start != nil {
		start = rep.Start.At // the schedule's start, not the wait's
	}
	writeReplayReport(stdout, rep, f.slower)
	writeWorkerReport(stdout, part, rep, len(w.Conns), len(all))
	for _, e := range rep.ConnErrors {
		fmt.Fprintf(stderr, "respmeter: replay: %s\n", e)
	}
	if f.jsonOut != "" {
		doc, err := replay.NewWorkerDoc(rep, part, o.Speed, w.Start, all, connNames(w))
		var b []byte
		if err == nil {
			b, err = json.MarshalIndent(doc, "", "  ")
		}
		if err == nil {
			err = os.WriteFile(f.jsonOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			return failure(fmt.Errorf("--json: %w", err))
		}
	}
	if f.hdrLog != "" {
		if err := writeReplayHDRLog(f.hdrLog, rep, start, end); err != nil {
			return failure(fmt.Errorf("--hdr-log: %w", err))
		}
	}
	return replayExit(rep, f.failOn, f.auth != "")
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// startProgress returns a replay.Options.OnSend that counts the batches
// sent (of total) and those sent more than replay.LateAfter late, and
// starts writing a progress line to w: rewritten in place every 200 ms on
// a terminal (tty), a line a second otherwise. stop ends it and writes the
// last line.
func startProgress(w io.Writer, tty bool, total int, start time.Time) (onSend func(*capture.Batch, time.Time, time.Time), stop func()) {
	var sent, late atomic.Int64
	onSend = func(_ *capture.Batch, intended, at time.Time) {
		sent.Add(1)
		if at.Sub(intended) > replay.LateAfter {
			late.Add(1)
		}
	}
	line := func() string {
		n := sent.Load()
		pct := 100.0
		if total > 0 {
			pct = 100 * float64(n) / float64(total)
		}
		return fmt.Sprintf("replay: %d/%d batches sent (%.0f%%), %.1f s, %d late", n, total, pct, time.Since(start).Seconds(), late.Load())
	}
	every, end := time.Second, "\n"
	if tty {
		every, end = 200*time.Millisecond, "\x1b[K" // erase the rest of the previous line
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				if tty {
					fmt.Fprint(w, "\r"+line()+end+"\n")
				} else {
					fmt.Fprint(w, line()+end)
				}
				return
			case <-t.C:
				if tty {
					fmt.Fprint(w, "\r"+line()+end)
				} else {
					fmt.Fprint(w, line()+end)
				}
			}
		}
	})
	var once sync.Once
	return onSend, func() { once.Do(func() { close(done); wg.Wait() }) }
}

// writeReplayHDRLog writes one interval per command, tagged
// "<command>.total" as the proxy's log tags total time.
func writeReplayHDRLog(path string, rep *replay.Report, start, end time.Time) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	hw, err := hdrlog.NewWriter(fh, start)
	if err == nil {
		for _, name := range sortedNames(rep) {
			if err = hw.WriteInterval(start, end, name+".total", rep.Replayed(name)); err != nil {
				break
			}
		}
	}
	return errors.Join(err, fh.Close())
}

func sortedNames(rep *replay.Report) []string {
	names := make([]string, 0, len(rep.PerCommand))
	for n := range rep.PerCommand {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := rep.PerCommand[names[i]].Count, rep.PerCommand[names[j]].Count
		return a > b || a == b && names[i] < names[j]
	})
	return names
}
