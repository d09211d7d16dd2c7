package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/internal/replay"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/routing"
)

// partitionFlags are replay's flags for one worker of a partitioned
// replay.
type partitionFlags struct {
	partition string // "I/N"; "" for the whole capture
	by        string
	startAt   string
}

func (f *partitionFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.partition, "partition", "", "replay only share `I/N` of the capture (worker I of N, from 0), for a replay from N machines merged with 'respmeter report merge'")
	fs.StringVar(&f.by, "partition-by", replay.ByConnection, "how --partition shares the capture: connection (whole captured connections) or slot (each command by its key's hash slot range; orders across slots are lost)")
	fs.StringVar(&f.startAt, "start-at", "", "start the schedule at this wall-clock `TIME` (RFC 3339, or Unix seconds), the same for every worker; the report prints the start skew")
}

// partitionHelp is the part of replay's help on partitioned replay.
const partitionHelp = `

Partitioned replay: --partition I/N replays share I of N (counted from
0) of the capture, so that N workers on N machines replay it together:
by connection (the default), the captured connections in the capture's
order are dealt round-robin, connection k to worker k mod N, each whole
with its order and batches; --partition-by slot gives each keyed command
to the worker owning its hash slot's range (slot*N/16384), keyless ones
by connection, which splits a connection's pipelines and transactions
and loses its order across slots (replies that depend on it may differ).
--start-at TIME (RFC 3339 such as 2026-01-02T15:04:05Z, or Unix seconds)
waits, once connected, until TIME on this machine's clock and starts the
schedule there; the report prints how late it started (start skew). Each
worker's --json names its partition and the connections it replayed, and
holds its histograms: 'respmeter report merge' merges the workers'
reports into one, refusing overlaps and naming what is missing.`

// parse checks the flags: the partition (0/1 when not given) and the
// start time (zero when not given).
func (f *partitionFlags) parse(cmd *cobra.Command, now time.Time) (replay.Partition, time.Time, error) {
	p := replay.Partition{Index: 0, Count: 1, By: replay.ByConnection}
	if f.partition != "" {
		var err error
		if p, err = replay.ParsePartition(f.partition, f.by); err != nil {
			return p, time.Time{}, usageError(cmd, fmt.Errorf("--%w", err))
		}
	} else if cmd.Flags().Changed("partition-by") {
		return p, time.Time{}, usageError(cmd, errors.New("--partition-by needs --partition I/N"))
	}
	if f.startAt == "" {
		return p, time.Time{}, nil
	}
	at, err := parseStartAt(f.startAt)
	if err != nil {
		return p, time.Time{}, usageError(cmd, err)
	}
	if now.Sub(at) > time.Hour {
		return p, time.Time{}, usageError(cmd, fmt.Errorf("--start-at %s is more than an hour ago", f.startAt))
	}
	return p, at, nil
}

// parseStartAt parses RFC 3339 (fractions allowed) or Unix seconds
// (fractions allowed).
func parseStartAt(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if v, err := strconv.ParseFloat(s, 64); err == nil && v > 0 {
		sec := int64(v)
		return time.Unix(sec, int64((v-float64(sec))*1e9)), nil
	}
	return time.Time{}, fmt.Errorf("--start-at %q: RFC 3339 (2026-01-02T15:04:05Z) or Unix seconds", s)
}

// slotOf returns a request's hash slot by the target's command table r
// (its first key's; ok false for a keyless command).
func slotOf(r *routing.Resolver) func(name string, req []byte) (int, bool) {
	var scan resp.RequestScanner
	var args [][]byte
	return func(_ string, req []byte) (int, bool) {
		scan.Reset()
		n, kind, err := scan.Scan(req)
		if err != nil || n == 0 {
			return 0, false
		}
		args = resp.Args(req[:n], kind, args[:0])
		k, ok := r.FirstKey(args)
		if !ok {
			return 0, false
		}
		return int(routing.Slot(k)), true
	}
}

// names returns the ConnName of each of w's connections.
func connNames(w *capture.Workload) []string {
	out := make([]string, len(w.Conns))
	for i, c := range w.Conns {
		out[i] = replay.ConnName(c)
	}
	return out
}

// writeWorkerReport writes the partition and start lines of a worker's
// report: nothing for a replay of the whole capture without a start time.
func writeWorkerReport(out io.Writer, p replay.Partition, rep *replay.Report, replayed, captured int) {
	if p.Count > 1 {
		fmt.Fprintf(out, "partition %s by %s: %d of %d captured connections\n", p, p.By, replayed, captured)
	}
	if s := rep.Start; s != nil {
		fmt.Fprintf(out, "start at %s, start skew %.3f ms (this machine's clock)\n",
			s.At.UTC().Format(time.RFC3339Nano), float64(s.SkewUS)/1e3)
		if s.ReadyUS < 0 {
			fmt.Fprintf(out, "warning: ready only %.3f ms after the start time (loading the capture, connecting): give a later --start-at\n",
				-float64(s.ReadyUS)/1e3)
		}
	}
}

// joinNames lists names, at most 10 then "and N more".
func joinNames(names []string) string {
	const most = 10
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:most], ", "), len(names)-most)
}
