// Package check proves that a Redis proxy, or an engine reached directly,
// answers every request with that request's own reply.
//
// The classic proxy bug under load is a reply delivered to the wrong
// command: a pipeline's replies reordered, one connection's reply sent to
// another, a reply lost or duplicated, a value cut or corrupted. Run drives
// a target with many connections, each a raw RESP2 client of this package
// (no client library between the checker and the bytes) sending pipelined
// batches of random depth, and compares every reply with a prediction made
// when the request was built. The predictions are unique wherever the
// command allows it: every value written, echoed or published carries its
// connection and request number, a GET reads a key exactly once, an INCR
// counter starts at a base unique to its connection, LRANGE and HGETALL are
// only sent after the list or hash changed. A few replies are necessarily
// common (+OK, small counts); the unique ones around them catch a swap.
//
// Commands used: SET, GET, DEL, INCR, APPEND, LPUSH, LTRIM, LRANGE, HSET,
// HGETALL, EVAL (a script returning its argument, and one returning it as
// an error reply), ECHO, and with Options.PubSub, SUBSCRIBE and PUBLISH.
// Everything but the keys' random prefix is a function of Options.Seed.
//
// Concurrency: Run may be called from several goroutines at once; each call
// uses its own connections and goroutines and waits for them before it
// returns.
package check

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/respmeter/respmeter/internal/tlsconf"
)

// Defaults of Options.
const (
	// DefaultConns is the default of Options.Conns.
	DefaultConns = 50
	// DefaultCommands is the default of Options.Commands.
	DefaultCommands = 100_000
	// DefaultMaxDepth is the default of Options.MaxDepth.
	DefaultMaxDepth = 64
	// DefaultTimeout is the default of Options.Timeout.
	DefaultTimeout = 10 * time.Second
)

// Bounds of Options.
const (
	// MaxConns bounds Options.Conns.
	MaxConns = 10_000
	// MaxMaxDepth bounds Options.MaxDepth.
	MaxMaxDepth = 10_000
)

// Display limits of mismatch descriptions.
const (
	// maxShown bounds the bytes of a reply or command shown in a mismatch.
	maxShown = 120
	// maxArgShown bounds the bytes of one command argument shown.
	maxArgShown = 48
)

// Errors.
var (
	// ErrOptions is wrapped by Run's error for invalid Options; nothing was
	// sent then.
	ErrOptions = errors.New("check: invalid options")
	// ErrUnreachable is wrapped by Run's error when not one connection to
	// the target could be opened.
	ErrUnreachable = errors.New("check: target unreachable")
	// errProtocol marks reply bytes that are not RESP2.
	errProtocol = errors.New("protocol error in reply")
)

// Options configure Run. Zero numeric fields take their defaults; note that
// the zero Options has PubSub off, while DefaultOptions has it on.
type Options struct {
	// Target is the proxy or engine to check, host:port. Required.
	Target string
	// Conns is the number of checking connections, each driven by its own
	// goroutine (and, with PubSub, paired with a subscriber connection).
	// Default DefaultConns, at most MaxConns; no more connections than
	// Commands are opened.
	Conns int
	// Commands is the number of requests to send in total, split evenly
	// across the connections. Default DefaultCommands. The set-up and
	// clean-up requests (DEL and SET of a connection's own keys, SUBSCRIBE)
	// are not counted.
	Commands int64
	// Duration, when positive, caps the run: no batch is started after it,
	// even if fewer than Commands requests were sent. Default 0, no cap.
	Duration time.Duration
	// MaxDepth bounds the pipeline: each batch holds a number of requests
	// drawn uniformly from 1..MaxDepth, written at once before its replies
	// are read. Default DefaultMaxDepth, at most MaxMaxDepth.
	MaxDepth int
	// Seed makes the run reproducible: the same Seed, Options and target
	// give the same requests on every connection, byte for byte, except
	// for the default KeyPrefix.
	Seed int64
	// KeyPrefix starts every key and channel name the checker uses.
	// Default "rmcheck:<16 random hex digits>:", so that concurrent or
	// earlier runs cannot collide. A prefix given here must not be in use
	// by another run at the same time.
	KeyPrefix string
	// PubSub adds publish/subscribe round trips: every connection gets a
	// subscriber connection subscribed to a channel of its own, and about
	// one batch in 16 PUBLISHes a unique message there, which must be
	// answered :1 and arrive, exactly, on the subscriber. DefaultOptions
	// turns it on; turn it off for targets without pub/sub.
	PubSub bool
	// Timeout bounds each connection attempt and the wait for the replies
	// of one batch (and for a published message); missing them is a
	// connection error. Default DefaultTimeout.
	Timeout time.Duration
	// TLS, when set, makes every connection speak TLS with it (the
	// handshake within Timeout; tlsconf.NewDialer of what
	// internal/tlsconf.Client builds); nil speaks plaintext.
	TLS *tlsconf.Dialer
}

// DefaultOptions returns the Options of a default run against target:
// DefaultConns connections, DefaultCommands requests, depth 1..
// DefaultMaxDepth, seed 0, a random key prefix, PubSub on.
func DefaultOptions(target string) Options {
	return Options{
		Target:   target,
		Conns:    DefaultConns,
		Commands: DefaultCommands,
		MaxDepth: DefaultMaxDepth,
		PubSub:   true,
		Timeout:  DefaultTimeout,
	}
}

// resolve returns o with defaults filled in, or an error wrapping
// ErrOptions.
func (o Options) resolve() (Options, error) {
	if o.Conns == 0 {
		o.Conns = DefaultConns
	}
	if o.Commands == 0 {
		o.Commands = DefaultCommands
	}
	if o.MaxDepth == 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	var errs []error
	if _, _, err := net.SplitHostPort(o.Target); err != nil || o.Target == "" {
		errs = append(errs, fmt.Errorf("option Target %q is not host:port", o.Target))
	}
	if o.Conns < 1 || o.Conns > MaxConns {
		errs = append(errs, fmt.Errorf("option Conns must be in 1..%d, got %d", MaxConns, o.Conns))
	}
	if o.Commands < 1 {
		errs = append(errs, fmt.Errorf("option Commands must be positive, got %d", o.Commands))
	}
	if o.MaxDepth < 1 || o.MaxDepth > MaxMaxDepth {
		errs = append(errs, fmt.Errorf("option MaxDepth must be in 1..%d, got %d", MaxMaxDepth, o.MaxDepth))
	}
	if o.Duration < 0 {
		errs = append(errs, fmt.Errorf("option Duration must not be negative, got %v", o.Duration))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("option Timeout must not be negative, got %v", o.Timeout))
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%w: %w", ErrOptions, errors.Join(errs...))
	}
	if o.KeyPrefix == "" {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand.Read)
		o.KeyPrefix = "rmcheck:" + hex.EncodeToString(b[:]) + ":"
	}
	return o, nil
}

// Result is the outcome of Run.
type Result struct {
	// Commands is the number of requests whose replies were read and
	// checked (set-up and clean-up requests not counted).
	Commands int64
	// Mismatches is the number of replies, and published messages, that
	// differed from their prediction, unexpected error replies and replies
	// that were not RESP2 included. A lost reply shows as a mismatch of
	// every later reply on its connection or, at the end of a batch, as a
	// connection error.
	Mismatches int64
	// ErrorReplies is the number of error replies received, both those
	// the checker provokes on purpose (an EVAL of redis.error_reply, about
	// one request in 32) and unexpected ones, which are mismatches too.
	ErrorReplies int64
	// ConnErrors is the number of connections that failed: could not be
	// opened, broke, or timed out waiting for a reply (Options.Timeout). A
	// failed connection sends nothing more.
	ConnErrors int64
	// Duration is the wall time from the first connection attempt to the
	// last reply checked, without the clean-up.
	Duration time.Duration
	// FirstMismatch describes the first mismatch seen, "" if none: the
	// connection, the request number and command, and the expected and
	// actual bytes, each cut to about 120 bytes.
	FirstMismatch string
	// FirstConnError describes the first connection error, "" if none.
	FirstConnError string
	// Slots holds the mismatches of keyed requests by the hash slot of
	// their key (Redis Cluster specification, "Key distribution model"),
	// in slot order, with when they were seen: where in the keyspace and
	// when a target lost or misplaced writes (a slot migration, for one).
	// Mismatches of a subscriber's messages and of requests of several
	// keys (a DEL of the keys read) are not in it.
	Slots []SlotMismatches
}

// SlotMismatches is the mismatches of one hash slot.
type SlotMismatches struct {
	Slot       uint16
	Mismatches int64
	// First and Last are when the first and the last of them were seen
	// (their reply read), from the start of the run.
	First, Last time.Duration
}

// recorder collects the first mismatch and connection error across the
// workers of one run; any goroutine may call its methods.
type recorder struct {
	mu             sync.Mutex
	firstMismatch  string
	firstConnError string
}

func (r *recorder) mismatch(desc func() string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstMismatch == "" {
		r.firstMismatch = desc()
	}
}

func (r *recorder) connError(desc string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstConnError == "" {
		r.firstConnError = desc
	}
}

// Run checks the target of o: it opens the connections, sends o.Commands
// requests in pipelined batches, verifies every reply, then deletes the
// keys it created (on fresh connections, bounded by o.Timeout) and returns
// the counts. Deviations are reported in the Result, not as errors.
//
// The error wraps ErrOptions for invalid options (nothing sent),
// ErrUnreachable when no connection could be opened, ctx's error when ctx
// ended before the run did (the Result then covers what was checked), or
// reports a clean-up that failed; the Result is valid in all but the first
// case.
func Run(ctx context.Context, o Options) (Result, error) {
	o, err := o.resolve()
	if err != nil {
		return Result{}, err
	}
	conns := min(int64(o.Conns), o.Commands)
	rec := &recorder{}
	workers := make([]*worker, conns)
	for i := range workers {
		quota := o.Commands / conns
		if int64(i) < o.Commands%conns {
			quota++
		}
		workers[i] = newWorker(i, quota, &o, rec)
	}

	start := time.Now()
	var stopAt time.Time
	if o.Duration > 0 {
		stopAt = start.Add(o.Duration)
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		w.start = start
		wg.Go(func() { w.run(ctx, stopAt) })
	}
	wg.Wait()

	res := Result{Duration: time.Since(start)}
	reached, interrupted := false, false
	for _, w := range workers {
		interrupted = interrupted || w.interrupted
		res.Commands += w.commands
		res.Mismatches += w.mismatches
		res.ErrorReplies += w.errorReplies
		res.ConnErrors += w.connErrors
		reached = reached || w.connected
	}
	res.FirstMismatch, res.FirstConnError = rec.firstMismatch, rec.firstConnError
	res.Slots = slotMismatches(workers)
	if !reached {
		return res, fmt.Errorf("%w: %s: %s", ErrUnreachable, o.Target, res.FirstConnError)
	}
	var errs []error
	if interrupted {
		errs = append(errs, fmt.Errorf("check: stopped early: %w", context.Cause(ctx)))
	}
	if err := cleanup(context.WithoutCancel(ctx), &o, workers); err != nil {
		errs = append(errs, fmt.Errorf("check: clean-up: %w", err))
	}
	return res, errors.Join(errs...)
}

// slotMismatches joins the workers' mismatches by hash slot, in slot order.
func slotMismatches(workers []*worker) []SlotMismatches {
	by := map[uint16]*SlotMismatches{}
	for _, w := range workers {
		for slot, sm := range w.slots {
			t := by[slot]
			if t == nil {
				c := *sm
				by[slot] = &c
				continue
			}
			t.Mismatches += sm.Mismatches
			t.First, t.Last = min(t.First, sm.First), max(t.Last, sm.Last)
		}
	}
	out := make([]SlotMismatches, 0, len(by))
	for _, sm := range by {
		out = append(out, *sm)
	}
	slices.SortFunc(out, func(a, b SlotMismatches) int { return int(a.Slot) - int(b.Slot) })
	return out
}
