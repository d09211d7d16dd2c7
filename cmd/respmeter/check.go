package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/respmeter/respmeter/internal/check"
)

// checkOptions are the flags of "respmeter check".
type checkOptions struct {
	target    string
	conns     int
	commands  int64
	depth     int
	seed      int64
	duration  time.Duration
	noPubSub  bool
	keyPrefix string
	timeout   time.Duration
	tls       clientTLSFlags
}

// newCheckCmd returns the "respmeter check" command, writing its summary
// to stdout. stderr is where cobra writes its own messages (the command
// sets it as its error output). Its errors are *exitError: exitUsage for
// bad flags, exitFailure when a reply did not match, a connection failed,
// the target could not be reached, the run was interrupted or the clean-up
// failed.
func newCheckCmd(stdout, stderr io.Writer) *cobra.Command {
	var o checkOptions
	cmd := &cobra.Command{
		Use:   "check --target HOST:PORT [flags]",
		Short: "Prove that a proxy delivers every reply to its own request",
		Long: `Drive a Redis proxy, or an engine directly, with pipelined batches of random
depth on many connections and check that every reply is the one its request
must get: replies reordered within a pipeline, delivered to another connection,
lost, duplicated or corrupted show as mismatches.

Each connection is a raw RESP2 client that predicts every reply, uniquely where
the command allows: SET of a unique value and a later GET of it, INCR of a
counter whose values no other connection shares, APPEND and LPUSH (the new
length), LRANGE 0 2 (the three newest elements), HSET and HGETALL (the exact
fields, in any order), EVAL returning its unique argument, EVAL returning it as
an error reply (an expected error: "error replies" counts these too), ECHO, and
unless --no-pubsub, PUBLISH of a unique message to a channel that a subscriber
connection of its own must receive, exactly. Values carry bytes such as CR, LF
and '$' to catch proxies that look inside them.

All keys start with --key-prefix (default rmcheck:<random>:) and are deleted at
the end. The requests are a function of --seed (printed when not given), so a
failing run can be repeated.

--tls connects over TLS, with redis-cli's --cacert, --cert, --key, --sni and
--insecure (docs/tls.md).

Prints one summary line:
  commands N, mismatches M, error replies E, connection errors C, duration D (X cmds/s)
and the first mismatch and the first connection error, if any.

Exit codes: 0 every reply matched, 1 mismatches, connection errors, an
unreachable target or an interrupted run, 2 usage error.`,
		Example: `  respmeter check --target 127.0.0.1:6380
  respmeter check --target 127.0.0.1:6380 --conns 50 --commands 100000 --depth 16 --seed 42
  respmeter check --target proxy.internal:6379 --no-pubsub --duration 1m
  respmeter check --target 127.0.0.1:6390 --tls --cacert ca.crt`,
		Args:          noArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCheck(cmd, stdout, stderr, o)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(flagError)
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.StringVar(&o.target, "target", "", "address, `HOST:PORT`, of the proxy or engine to check (required)")
	fl.IntVar(&o.conns, "conns", 200, fmt.Sprintf("checking connections, 1..%d (plus as many subscriber connections)", check.MaxConns))
	fl.Int64Var(&o.commands, "commands", 1_000_000, "requests to send in total")
	fl.IntVar(&o.depth, "depth", check.DefaultMaxDepth, fmt.Sprintf("maximum pipeline depth, 1..%d; each batch's depth is uniform in 1..depth", check.MaxMaxDepth))
	fl.Int64Var(&o.seed, "seed", 0, "seed of the requests (default: random, printed)")
	fl.DurationVar(&o.duration, "duration", 0, "stop starting batches after this long, even before --commands (0: no limit)")
	fl.BoolVar(&o.noPubSub, "no-pubsub", false, "leave out the PUBLISH/SUBSCRIBE round trips (for targets without pub/sub)")
	fl.StringVar(&o.keyPrefix, "key-prefix", "", "prefix of every key and channel used (default rmcheck:<random>:)")
	fl.DurationVar(&o.timeout, "timeout", check.DefaultTimeout, "bound on each connection attempt (TLS handshake included) and on the wait for a batch's replies")
	o.tls.register(fl)
	return cmd
}

// runCheck is the body of "respmeter check".
func runCheck(cmd *cobra.Command, stdout, stderr io.Writer, o checkOptions) error {
	if o.target == "" {
		return usageError(cmd, errors.New("--target HOST:PORT is required"))
	}
	if _, _, err := net.SplitHostPort(o.target); err != nil {
		return usageError(cmd, fmt.Errorf("--target %q: %w", o.target, err))
	}
	switch {
	case o.conns < 1 || o.conns > check.MaxConns:
		return usageError(cmd, fmt.Errorf("--conns must be in 1..%d, got %d", check.MaxConns, o.conns))
	case o.commands < 1:
		return usageError(cmd, fmt.Errorf("--commands must be positive, got %d", o.commands))
	case o.depth < 1 || o.depth > check.MaxMaxDepth:
		return usageError(cmd, fmt.Errorf("--depth must be in 1..%d, got %d", check.MaxMaxDepth, o.depth))
	case o.duration < 0:
		return usageError(cmd, fmt.Errorf("--duration must not be negative, got %v", o.duration))
	case o.timeout <= 0:
		return usageError(cmd, fmt.Errorf("--timeout must be positive, got %v", o.timeout))
	}
	tlsCfg, err := o.tls.config(cmd, stderr)
	if err != nil {
		return err
	}
	if !cmd.Flags().Changed("seed") {
		o.seed = rand.Int64()
	}
	co := check.Options{
		Target:    o.target,
		Conns:     o.conns,
		Commands:  o.commands,
		Duration:  o.duration,
		MaxDepth:  o.depth,
		Seed:      o.seed,
		KeyPrefix: o.keyPrefix,
		PubSub:    !o.noPubSub,
		Timeout:   o.timeout,
		TLS:       tlsCfg,
	}
	pubsub := "on"
	if o.noPubSub {
		pubsub = "off"
	}
	over := ""
	if tlsCfg != nil {
		over = " over TLS"
	}
	fmt.Fprintf(stdout, "checking %s%s: %d connections, %d commands, pipeline depth 1..%d, seed %d, pub/sub %s\n",
		o.target, over, min(int64(o.conns), o.commands), o.commands, o.depth, o.seed, pubsub)

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := check.Run(ctx, co)
	if errors.Is(err, check.ErrOptions) {
		return usageError(cmd, err)
	}
	rate := 0.0
	if s := res.Duration.Seconds(); s > 0 {
		rate = float64(res.Commands) / s
	}
	fmt.Fprintf(stdout, "commands %d, mismatches %d, error replies %d, connection errors %d, duration %v (%.0f cmds/s)\n",
		res.Commands, res.Mismatches, res.ErrorReplies, res.ConnErrors, res.Duration.Round(time.Millisecond), rate)
	if res.FirstMismatch != "" {
		fmt.Fprintf(stdout, "first mismatch: %s\n", res.FirstMismatch)
	}
	printSlotMismatches(stdout, res.Slots)
	if res.FirstConnError != "" {
		fmt.Fprintf(stdout, "first connection error: %s\n", res.FirstConnError)
	}
	var errs []error
	if res.Mismatches > 0 || res.ConnErrors > 0 {
		errs = append(errs, fmt.Errorf("check failed: %d mismatches, %d connection errors", res.Mismatches, res.ConnErrors))
	}
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return failure(errors.Join(errs...))
	}
	return nil
}

// printSlotMismatches writes where (hash slots) and when (seconds from the
// start of the run) the mismatches of keyed requests were seen: the slot
// range they span, then the 10 slots with the most.
func printSlotMismatches(w io.Writer, slots []check.SlotMismatches) {
	if len(slots) == 0 {
		return
	}
	var first, last time.Duration = slots[0].First, slots[0].Last
	for _, sm := range slots {
		first, last = min(first, sm.First), max(last, sm.Last)
	}
	fmt.Fprintf(w, "mismatches in %d hash slots, %d to %d, seen from %.3f s to %.3f s of the run\n",
		len(slots), slots[0].Slot, slots[len(slots)-1].Slot, first.Seconds(), last.Seconds())
	top := slices.Clone(slots)
	slices.SortStableFunc(top, func(a, b check.SlotMismatches) int { return cmp.Compare(b.Mismatches, a.Mismatches) })
	for _, sm := range top[:min(len(top), 10)] {
		fmt.Fprintf(w, "  slot %d: %d mismatches, %.3f s to %.3f s\n", sm.Slot, sm.Mismatches, sm.First.Seconds(), sm.Last.Seconds())
	}
}
