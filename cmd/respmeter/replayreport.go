package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/respmeter/respmeter/internal/replay"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// Replay's own exit codes, beside exitOK, exitFailure and exitUsage.
const (
	// exitRefused: the target refused the replay (every command answered
	// with a new error, or every connection failed).
	exitRefused = 3
	// exitFailOn: a condition named by --fail-on held.
	exitFailOn = 4
)

// failOnWhat are --fail-on's values and what each says of a report.
var failOnWhat = []struct {
	name string
	held func(*replay.Report) (string, bool)
}{
	{"mismatches", func(r *replay.Report) (string, bool) {
		return fmt.Sprintf("%d mismatches (%d possible races)", r.Mismatches, r.PossibleRaces), r.Mismatches > 0
	}},
	{"new-errors", func(r *replay.Report) (string, bool) {
		return fmt.Sprintf("%d new errors", r.NewErrors), r.NewErrors > 0
	}},
	{"late", func(r *replay.Report) (string, bool) {
		return fmt.Sprintf("%d of %d batches late", r.LateBatches, r.Batches), lateShare(r) > lateWarn
	}},
}

// lateWarn is the share of late batches above which the report warns that
// the replayer was the bottleneck (and --fail-on late fails).
const lateWarn = 0.01

func lateShare(r *replay.Report) float64 {
	if r.Batches == 0 {
		return 0
	}
	return float64(r.LateBatches) / float64(r.Batches)
}

// checkFailOn checks --fail-on's values.
func checkFailOn(vals []string) error {
	for _, v := range vals {
		ok := false
		for _, w := range failOnWhat {
			ok = ok || v == w.name
		}
		if !ok {
			return fmt.Errorf("--fail-on %q: mismatches, new-errors or late", v)
		}
	}
	return nil
}

// replayExit is replay's verdict on rep as an exit: exitRefused when the
// target refused the replay (with a hint to set the password when it
// answered NOAUTH and none was given), exitFailOn when a --fail-on
// condition held, nil otherwise.
func replayExit(rep *replay.Report, failOn []string, authGiven bool) error {
	if why, ok := rep.Refused(); ok {
		e := &exitError{code: exitRefused, err: fmt.Errorf("replay: the target refused the replay: %s", why)}
		switch {
		case rep.NewErrorKinds["NOAUTH"] > 0 && !authGiven:
			e.hint = "The target wants a password: pass it in $" + authEnv + " (or --auth), with --user for an ACL user."
		case rep.NewErrorKinds["WRONGPASS"] > 0 || rep.NewErrorKinds["NOPERM"] > 0:
			e.hint = "The target refused the credentials or their permissions: check --user and $" + authEnv + "."
		}
		return e
	}
	var held []error
	for _, v := range failOn {
		for _, w := range failOnWhat {
			if what, ok := w.held(rep); v == w.name && ok {
				held = append(held, fmt.Errorf("replay: --fail-on %s: %s", v, what))
			}
		}
	}
	if len(held) > 0 {
		return &exitError{code: exitFailOn, err: errors.Join(held...)}
	}
	return nil
}

// replayKeys returns replay.Options.Keys from the target's command table
// (r): the keys its key specs give and its write flag.
func replayKeys(r *routing.Resolver) func(string, []byte) ([][]byte, bool) {
	var scan resp.RequestScanner
	return func(_ string, req []byte) ([][]byte, bool) {
		scan.Reset()
		n, kind, err := scan.Scan(req)
		if err != nil || n == 0 {
			return nil, false
		}
		args := resp.Args(req[:n], kind, nil)
		if len(args) == 0 {
			return nil, false
		}
		id := r.Lookup(args[0])
		keys, err := r.KeysOf(id, args, nil)
		if err != nil {
			return nil, false
		}
		return keys, r.Info(id).Flags.Has(command.FlagWrite)
	}
}

// writeReplayReport writes rep as text: the totals, a per-command table
// (differences, then latencies captured against replayed), the commands
// that got slower, and samples of each kind of difference, a few per
// command.
func writeReplayReport(out io.Writer, rep *replay.Report, slower float64) {
	fmt.Fprintf(out, "replayed %d commands in %.3f s on %d connections (%d skipped)\n",
		rep.Commands, rep.DurationSeconds, rep.Connections, rep.Skipped)
	fmt.Fprintf(out, "mismatches %d (possible races %d), new errors %d, gone errors %d, late batches %d of %d (send lag p99 %d µs)\n",
		rep.Mismatches, rep.PossibleRaces, rep.NewErrors, rep.GoneErrors, rep.LateBatches, rep.Batches, rep.SendLagP99US)
	late := rep.MostlyLate()
	switch {
	case late:
		fmt.Fprintf(out, "warning: %.1f%% of batches were sent more than %v late: the replayer, not the target, set the pace; the ratios are not meaningful (replay at a lower --speed, or on a less busy host)\n",
			100*lateShare(rep), replay.LateAfter)
	case lateShare(rep) > lateWarn:
		fmt.Fprintf(out, "warning: %.1f%% of batches were sent more than %v late: the replayer was the bottleneck, latencies include its delay\n",
			100*lateShare(rep), replay.LateAfter)
	}
	ratioHead := "ratio"
	if late {
		ratioHead = "ratio (not meaningful)"
	}
	fmt.Fprintf(out, "\n%-16s %9s %10s %6s %8s %8s %26s %26s %22s\n", "command", "count", "mismatches", "races",
		"new-err", "gone-err", "captured p50/p99/p99.9 µs", "replayed p50/p99/p99.9 µs", ratioHead)
	for _, n := range sortedNames(rep) {
		s := rep.PerCommand[n]
		ratio := fmt.Sprintf("%.2f/%.2f/%.2f", s.Ratio[0], s.Ratio[1], s.Ratio[2])
		if late {
			ratio = "-"
		}
		fmt.Fprintf(out, "%-16s %9d %10d %6d %8d %8d %26s %26s %22s\n", n, s.Count, s.Mismatches, s.PossibleRaces,
			s.NewErrors, s.GoneErrors,
			fmt.Sprintf("%d/%d/%d", s.CapturedUS[0], s.CapturedUS[1], s.CapturedUS[2]),
			fmt.Sprintf("%d/%d/%d", s.ReplayedUS[0], s.ReplayedUS[1], s.ReplayedUS[2]), ratio)
	}
	if len(rep.Injected) > 0 {
		var marks []string
		for _, k := range slices.Sorted(maps.Keys(rep.Injected)) {
			marks = append(marks, fmt.Sprintf("%s %d", k, rep.Injected[k]))
		}
		fmt.Fprintf(out, "\ninjected in the capture (sent as any other; captured times without the delays): %s\n", strings.Join(marks, ", "))
	}
	if sl := rep.Slower(slower); len(sl) > 0 && !late {
		fmt.Fprintf(out, "\nslower (p99 at least %.1fx captured): %s\n", slower, strings.Join(sl, ", "))
	}
	for _, g := range []struct {
		what string
		s    []replay.Sample
	}{{"mismatches", rep.MismatchSamples}, {"new errors", rep.NewErrorSamples}, {"gone errors", rep.GoneErrSamples}} {
		if len(g.s) == 0 {
			continue
		}
		fmt.Fprintf(out, "\n%s (a few per command):\n", g.what)
		for _, s := range g.s {
			fmt.Fprintf(out, "  %s: %s\n    captured %s\n    replayed %s\n", s.Command, s.Request, s.Captured, s.Replayed)
			if s.Class != "" {
				fmt.Fprintf(out, "    %s\n", s.Class)
			}
		}
	}
}
