package check

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

func TestResolve(t *testing.T) {
	o, err := Options{Target: "127.0.0.1:6379"}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if o.Conns != DefaultConns || o.Commands != DefaultCommands || o.MaxDepth != DefaultMaxDepth || o.Timeout != DefaultTimeout {
		t.Errorf("defaults not applied: %+v", o)
	}
	if !strings.HasPrefix(o.KeyPrefix, "rmcheck:") || len(o.KeyPrefix) != len("rmcheck:")+16+1 {
		t.Errorf("default KeyPrefix %q", o.KeyPrefix)
	}
	if o2, _ := (Options{Target: "h:1"}).resolve(); o2.KeyPrefix == o.KeyPrefix {
		t.Errorf("two default prefixes are equal: %q", o.KeyPrefix)
	}
	if d := DefaultOptions("h:1"); !d.PubSub || d.Conns != DefaultConns {
		t.Errorf("DefaultOptions: %+v", d)
	}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no target", Options{}, "Target"},
		{"no port", Options{Target: "localhost"}, "Target"},
		{"conns", Options{Target: "h:1", Conns: -1}, "Conns"},
		{"too many conns", Options{Target: "h:1", Conns: MaxConns + 1}, "Conns"},
		{"commands", Options{Target: "h:1", Commands: -5}, "Commands"},
		{"depth", Options{Target: "h:1", MaxDepth: -1}, "MaxDepth"},
		{"duration", Options{Target: "h:1", Duration: -time.Second}, "Duration"},
		{"timeout", Options{Target: "h:1", Timeout: -time.Second}, "Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.o.resolve()
			if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrOptions naming %s", err, tc.want)
			}
			if _, err := Run(context.Background(), tc.o); !errors.Is(err, ErrOptions) {
				t.Errorf("Run: got %v, want ErrOptions", err)
			}
		})
	}
}

func TestReadReply(t *testing.T) {
	good := []string{
		"+OK\r\n",
		"-ERR x\r\n",
		":-12\r\n",
		"$-1\r\n",
		"$0\r\n\r\n",
		"$4\r\na\r\nb\r\n",
		"*-1\r\n",
		"*0\r\n",
		"*3\r\n$1\r\na\r\n:1\r\n*2\r\n+x\r\n$-1\r\n",
	}
	for _, in := range good {
		for _, oneByte := range []bool{false, true} {
			var r = bytes.NewReader([]byte(in + "+next\r\n"))
			br := bufio.NewReaderSize(r, 16)
			if oneByte {
				br = bufio.NewReaderSize(iotest.OneByteReader(r), 16)
			}
			got, err := readReply(br, []byte("keep"))
			if err != nil || string(got) != "keep"+in {
				t.Errorf("readReply(%q, oneByte %v) = %q, %v", in, oneByte, got, err)
			}
			if next, err := readReply(br, nil); err != nil || string(next) != "+next\r\n" {
				t.Errorf("after %q: next reply %q, %v", in, next, err)
			}
		}
	}
	for _, in := range []string{
		"OK\r\n",
		"+OK\n",
		"$x\r\n",
		"$-2\r\n",
		"$2\r\nabcd\r\n",
		"*-2\r\n",
		"_\r\n",
		"%1\r\n+a\r\n+b\r\n",
		"$99999999999\r\n",
		strings.Repeat("*1\r\n", maxNesting+1) + ":1\r\n",
	} {
		_, err := readReply(bufio.NewReader(strings.NewReader(in)), nil)
		if !errors.Is(err, errProtocol) {
			t.Errorf("readReply(%q): got %v, want errProtocol", in, err)
		}
	}
	// A line longer than the buffer is a protocol error too.
	if _, err := readReply(bufio.NewReaderSize(strings.NewReader("+"+strings.Repeat("a", 100)+"\r\n"), 16), nil); !errors.Is(err, errProtocol) {
		t.Errorf("long line: got %v, want errProtocol", err)
	}
	for _, in := range []string{"", "+OK", "$5\r\nab", "*2\r\n:1\r\n"} {
		_, err := readReply(bufio.NewReader(strings.NewReader(in)), nil)
		if err == nil || errors.Is(err, errProtocol) {
			t.Errorf("readReply(%q): got %v, want an I/O error", in, err)
		}
	}
}

func TestSameFieldMap(t *testing.T) {
	want := "*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n"
	for _, tc := range []struct {
		got  string
		same bool
	}{
		{want, true},
		{"*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\na\r\n$1\r\n1\r\n", true},
		{"*4\r\n$1\r\nb\r\n$1\r\n1\r\n$1\r\na\r\n$1\r\n2\r\n", false},
		{"*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\na\r\n$1\r\n1\r\n", false},
		{"*2\r\n$1\r\na\r\n$1\r\n1\r\n", false},
		{"*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n:2\r\n", false},
		{"+OK\r\n", false},
	} {
		if got := sameFieldMap([]byte(want), []byte(tc.got)); got != tc.same {
			t.Errorf("sameFieldMap(%q) = %v, want %v", tc.got, got, tc.same)
		}
	}
}

func TestShow(t *testing.T) {
	req := appendCommand(nil, []byte("SET"), []byte("rmcheck:k_1_2"), []byte("a b\r\n"))
	if got, want := showCommand(req), `SET rmcheck:k_1_2 "a b\r\n"`; got != want {
		t.Errorf("showCommand = %s, want %s", got, want)
	}
	long := appendCommand(nil, []byte("ECHO"), bytes.Repeat([]byte("x"), 1000))
	if got := showCommand(long); !strings.HasSuffix(got, "…(1000 bytes)") || len(got) > maxShown {
		t.Errorf("showCommand(long) = %s", got)
	}
	if got := show(bytes.Repeat([]byte("y"), 1000)); !strings.HasSuffix(got, "…(1000 bytes)") {
		t.Errorf("show(long) = %s", got)
	}
}

// smallLimits makes a worker delete its string and trim its list often.
func smallLimits(w *worker) { w.maxStr, w.maxList = 300, 10 }

// build returns the requests of the first n batches of connection id.
func build(o Options, id, n int) ([]byte, [numKinds]int64) {
	w := newWorker(id, 1<<40, &o, &recorder{})
	smallLimits(w)
	var all []byte
	for range n {
		w.buildBatch()
		all = append(all, w.out...)
	}
	return all, w.kinds
}

func TestDeterministic(t *testing.T) {
	o := Options{Target: "h:1", MaxDepth: 64, Seed: 7, KeyPrefix: "p:", PubSub: true}
	a, kinds := build(o, 3, 300)
	b, _ := build(o, 3, 300)
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed gave different requests")
	}
	for k, n := range kinds {
		if n == 0 {
			t.Errorf("kind %d never built in 300 batches: %v", k, kinds)
		}
	}
	if c, _ := build(o, 4, 300); bytes.Equal(a, c) {
		t.Error("two connections sent the same requests")
	}
	o.Seed = 8
	if c, _ := build(o, 3, 300); bytes.Equal(a, c) {
		t.Error("two seeds gave the same requests")
	}
}

// dbsize returns the number of keys of s.
func dbsize(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	return s.Do("DBSIZE").(int64)
}

// runOK runs o and fails t unless every reply matched.
func runOK(t *testing.T, o Options) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v (%+v)", err, res)
	}
	if res.Commands != o.Commands || res.Mismatches != 0 || res.ConnErrors != 0 || res.FirstMismatch != "" || res.FirstConnError != "" {
		t.Fatalf("Run against %s: %+v", o.Target, res)
	}
	// About one request in 32 is an expected error reply.
	if o.Commands >= 10_000 && (res.ErrorReplies < o.Commands/64 || res.ErrorReplies > o.Commands/16) {
		t.Errorf("%d error replies in %d commands", res.ErrorReplies, o.Commands)
	}
	return res
}

func rate(r Result) float64 { return float64(r.Commands) / r.Duration.Seconds() }

func TestRunDirect(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	s := redistest.Start(t)
	o := DefaultOptions(s.Addr())
	o.Conns, o.Commands, o.Seed = 20, 20_000, 1
	res := runOK(t, o)
	t.Logf("direct: %d commands, %d mismatches, %d error replies in %v (%.0f cmds/s)",
		res.Commands, res.Mismatches, res.ErrorReplies, res.Duration, rate(res))
	if n := dbsize(t, s); n != 0 {
		t.Errorf("%d keys left after the clean-up", n)
	}
	if n := s.Do("PUBSUB", "NUMSUB", o.KeyPrefix+"chan_0").([]any); n[1] != int64(0) {
		t.Errorf("subscriber still subscribed: %v", n)
	}
}

// TestWorkerLimits runs one connection whose string and list reach their
// limits often, so the DEL and LTRIM that bound them are checked too.
func TestWorkerLimits(t *testing.T) {
	s := redistest.Start(t)
	o, err := DefaultOptions(s.Addr()).resolve()
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(0, 5_000, &o, &recorder{})
	smallLimits(w)
	w.run(context.Background(), time.Time{})
	if w.commands != 5_000 || w.mismatches != 0 || w.connErrors != 0 || w.kinds[kLTrim] == 0 || w.kinds[kDelString] == 0 {
		t.Fatalf("commands %d, mismatches %d, conn errors %d, kinds %v: %s %s",
			w.commands, w.mismatches, w.connErrors, w.kinds, w.rec.firstMismatch, w.rec.firstConnError)
	}
	if err := cleanup(context.Background(), &o, []*worker{w}); err != nil {
		t.Fatal(err)
	}
	if n := dbsize(t, s); n != 0 {
		t.Errorf("%d keys left after the clean-up", n)
	}
}

func TestRunFewCommands(t *testing.T) {
	s := redistest.Start(t)
	o := DefaultOptions(s.Addr())
	o.Conns, o.Commands, o.MaxDepth, o.PubSub = 8, 3, 1, false
	res := runOK(t, o)
	if res.Commands != 3 {
		t.Errorf("%d commands, want 3", res.Commands)
	}
}

// checkSlots checks res.Slots against the rest of res: slots in order,
// each with mismatches seen within the run, adding up to no more than
// res.Mismatches (the subscriber's are not in it) and to some of them.
func checkSlots(t *testing.T, res Result) {
	t.Helper()
	var sum int64
	for i, sm := range res.Slots {
		if i > 0 && sm.Slot <= res.Slots[i-1].Slot {
			t.Errorf("Slots out of order: %+v", res.Slots)
		}
		if sm.Mismatches <= 0 || sm.First < 0 || sm.First > sm.Last || sm.Last > res.Duration {
			t.Errorf("slot %d: %+v, run of %v", sm.Slot, sm, res.Duration)
		}
		sum += sm.Mismatches
	}
	if sum > res.Mismatches || (res.Mismatches > 0 && sum == 0) {
		t.Errorf("Slots add up to %d mismatches of %d", sum, res.Mismatches)
	}
}

func TestRunBrokenTarget(t *testing.T) {
	s := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		fault func(int64, [][]byte) [][]byte
	}{
		{"swap", swapEvery(100)},
		{"corrupt", corruptEvery(97)},
		{"drop", dropEvery(300)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startFaultyProxy(t, s.Addr(), tc.fault)
			o := DefaultOptions(p.addr())
			o.Conns, o.Commands, o.Seed, o.Timeout = 10, 5_000, 2, time.Second
			res, err := Run(context.Background(), o)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			t.Logf("%s: %+v", tc.name, res)
			if tc.name == "drop" && res.Mismatches == 0 && res.ConnErrors > 0 {
				// The lost reply was the last of its batch: the wait for
				// it timed out.
				return
			}
			if res.Mismatches == 0 {
				t.Fatalf("no mismatch found through a proxy that breaks replies: %+v", res)
			}
			if !strings.Contains(res.FirstMismatch, "expected ") || !strings.Contains(res.FirstMismatch, ", got ") {
				t.Errorf("FirstMismatch does not show both replies: %s", res.FirstMismatch)
			}
			if tc.name == "swap" && res.ConnErrors != 0 {
				t.Errorf("swapped replies gave connection errors: %s", res.FirstConnError)
			}
			checkSlots(t, res)
		})
	}
}

func TestRunThroughRespmeter(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	s := redistest.Start(t)
	p, _ := proxytest.StartProxy(t, s.Addr(), nil)
	o := DefaultOptions(s.Addr())
	o.Conns, o.Commands, o.Seed = 100, 50_000, 3 // about 3 s each under -race
	direct := runOK(t, o)
	o.Target = p.Addr()
	proxied := runOK(t, o)
	t.Logf("direct:          %d commands, %d mismatches in %v (%.0f cmds/s)", direct.Commands, direct.Mismatches, direct.Duration, rate(direct))
	t.Logf("through respmeter: %d commands, %d mismatches in %v (%.0f cmds/s)", proxied.Commands, proxied.Mismatches, proxied.Duration, rate(proxied))
	if n := dbsize(t, s); n != 0 {
		t.Errorf("%d keys left after the clean-up", n)
	}
}

// TestRunThroughRespmeterRouted: the same check through --route slots over
// three shards (every pipeline splits into per-shard pipelines whose
// replies are put back in order), and through shared upstream
// connections.
func TestRunThroughRespmeterRouted(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	var shards []*redistest.Server
	var addrs []string
	for range 3 {
		s := redistest.Start(t)
		shards = append(shards, s)
		addrs = append(addrs, s.Addr())
	}
	for _, tc := range []struct {
		name string
		mod  func(*proxy.Config)
	}{
		{"slots", func(c *proxy.Config) { c.Route, c.Shards = proxy.RouteSlots, addrs }},
		{"slots+shared", func(c *proxy.Config) {
			c.Route, c.Shards, c.UpstreamMode = proxy.RouteSlots, addrs, proxy.UpstreamShared
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, set := proxytest.StartProxy(t, "", tc.mod)
			o := DefaultOptions(p.Addr())
			o.Conns, o.Commands, o.Seed = 100, 50_000, 5
			res := runOK(t, o)
			t.Logf("%s: %d commands, %d mismatches, %d error replies in %v (%.0f cmds/s)", tc.name, res.Commands, res.Mismatches, res.ErrorReplies, res.Duration, rate(res))
			for _, s := range shards {
				if n := dbsize(t, s); n != 0 {
					t.Errorf("%d keys left on %s after the clean-up", n, s.Addr())
				}
			}
			served := 0
			for _, sh := range set.Snapshot().Shards {
				if sh.Count > 0 {
					served++
				}
			}
			if served != 3 {
				t.Errorf("%d shards served commands, want 3", served)
			}
		})
	}
}

func TestRunUnreachable(t *testing.T) {
	o := DefaultOptions(redistest.ClosedAddr(t))
	o.Conns, o.Commands = 4, 100
	res, err := Run(context.Background(), o)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("got %v, want ErrUnreachable", err)
	}
	if res.ConnErrors != 4 || res.Commands != 0 || res.FirstConnError == "" {
		t.Errorf("%+v", res)
	}
}

// TestRunSetupFails: a target that refuses the set-up (here: it wants a
// password) gives connection errors, not mismatches.
func TestRunSetupFails(t *testing.T) {
	s := redistest.Start(t, "--requirepass", "secret")
	o := DefaultOptions(s.Addr())
	o.Conns, o.Commands = 3, 100
	res, err := Run(context.Background(), o)
	if res.ConnErrors != 3 || res.Mismatches != 0 || res.Commands != 0 || !strings.Contains(res.FirstConnError, "NOAUTH") {
		t.Errorf("%+v", res)
	}
	if errors.Is(err, ErrUnreachable) || err == nil || !strings.Contains(err.Error(), "clean-up") {
		t.Errorf("got error %v, want a failed clean-up", err)
	}
}

func TestRunStops(t *testing.T) {
	redistest.VerifyNoLeaks(t)
	s := redistest.Start(t)
	t.Run("duration", func(t *testing.T) {
		o := DefaultOptions(s.Addr())
		o.Conns, o.Commands, o.Duration = 4, 1<<40, 300*time.Millisecond
		start := time.Now()
		res, err := Run(context.Background(), o)
		if err != nil || res.Mismatches != 0 || res.ConnErrors != 0 || res.Commands == 0 {
			t.Fatalf("Run: %+v, %v", res, err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("Duration 300ms: Run took %v", el)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		o := DefaultOptions(s.Addr())
		o.Conns, o.Commands = 4, 1<<40
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		res, err := Run(ctx, o)
		if !errors.Is(err, context.DeadlineExceeded) || res.Mismatches != 0 || res.ConnErrors != 0 || res.Commands == 0 {
			t.Fatalf("Run: %+v, %v", res, err)
		}
	})
	if n := dbsize(t, s); n != 0 {
		t.Errorf("%d keys left after the clean-up", n)
	}
}
