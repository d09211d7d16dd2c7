package proxy_test

// Real clients through the proxy: go-redis v9 (RESP3 by default),
// redis-cli and redis-benchmark, compared with the same client talking to
// the engine directly.

import (
	"context"
	"fmt"
	"os/exec"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
)

func e2eGoRedis(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:         addr,
		MaxRetries:   -1, // a retry would hide a proxy error
		DialTimeout:  2 * time.Second,
		ReadTimeout:  5 * time.Second,
		WriteTimeout: 5 * time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// bothGoRedis runs fn with a go-redis client on the engine and on the
// proxy (each on a flushed data set) and fails t unless the results are
// deeply equal.
func e2eBothGoRedis(t *testing.T, e *e2eEnv, fn func(t *testing.T, c *redis.Client) any) {
	t.Helper()
	var res []any
	for _, tg := range e.targets() {
		e.srv.DoT(t, "FLUSHALL")
		c := e2eGoRedis(t, tg.addr)
		res = append(res, fn(t, c))
	}
	if !reflect.DeepEqual(res[0], res[1]) {
		t.Errorf("go-redis results differ\n direct %#v\n proxy  %#v", res[0], res[1])
	}
}

func TestGoRedisResp3(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	ctx := context.Background()
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	t.Run("HELLO 3 handshake", func(t *testing.T) {
		e2eBothGoRedis(t, e, func(t *testing.T, c *redis.Client) any {
			v, err := c.Do(ctx, "HELLO", "3").Result()
			must(t, err)
			m, ok := v.(map[any]any)
			if !ok {
				t.Fatalf("HELLO 3 gave %T %v, want a RESP3 map", v, v)
			}
			delete(m, "id")
			if m["proto"] != int64(3) {
				t.Errorf("proto = %v", m["proto"])
			}
			return m
		})
	})
	t.Run("hash map reply", func(t *testing.T) {
		e2eBothGoRedis(t, e, func(t *testing.T, c *redis.Client) any {
			must(t, c.HSet(ctx, "gr:h", "a", "1", "b", "", "c", "3").Err())
			m, err := c.HGetAll(ctx, "gr:h").Result()
			must(t, err)
			if len(m) != 3 || m["b"] != "" {
				t.Errorf("HGETALL = %v", m)
			}
			raw, err := c.Do(ctx, "HGETALL", "gr:h").Result()
			must(t, err)
			if _, ok := raw.(map[any]any); !ok {
				t.Errorf("raw HGETALL is %T, want a RESP3 map", raw)
			}
			return m
		})
	})
	t.Run("pipeline of 100", func(t *testing.T) {
		e2eBothGoRedis(t, e, func(t *testing.T, c *redis.Client) any {
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i := 0; i < 100; i++ {
					switch i % 4 {
					case 0:
						p.Set(ctx, fmt.Sprint("gr:k", i%10), i, 0)
					case 1:
						p.Get(ctx, fmt.Sprint("gr:k", (i-1)%10))
					case 2:
						p.Incr(ctx, "gr:n")
					case 3:
						p.ZAdd(ctx, "gr:z", redis.Z{Score: float64(i), Member: i})
					}
				}
				return nil
			})
			must(t, err)
			var out []string
			for _, c := range cmds {
				out = append(out, c.String())
			}
			if len(out) != 100 {
				t.Errorf("%d results", len(out))
			}
			return out
		})
	})
	t.Run("pub/sub", func(t *testing.T) {
		e2eBothGoRedis(t, e, func(t *testing.T, c *redis.Client) any {
			sub := c.Subscribe(ctx, "gr:chan")
			defer sub.Close()
			conf, err := sub.Receive(ctx)
			must(t, err)
			pub := e2eGoRedis(t, e.paddr) // published through the proxy either way
			n, err := pub.Publish(ctx, "gr:chan", "hello").Result()
			must(t, err)
			mctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			msg, err := sub.ReceiveMessage(mctx)
			must(t, err)
			must(t, c.Ping(ctx).Err()) // the normal connection still works
			return []any{fmt.Sprint(conf), n, msg.Channel, msg.Payload}
		})
	})
	t.Run("MULTI/EXEC", func(t *testing.T) {
		e2eBothGoRedis(t, e, func(t *testing.T, c *redis.Client) any {
			cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, "{gr}tx") // one slot, as a transaction through a cluster needs
				p.HSet(ctx, "{gr}txh", "f", "v")
				p.HGetAll(ctx, "{gr}txh")
				p.LPush(ctx, "{gr}txl", "a", "b")
				p.LRange(ctx, "{gr}txl", 0, -1)
				return nil
			})
			must(t, err)
			var out []string
			for _, c := range cmds {
				out = append(out, c.String())
			}
			return out
		})
	})
	t.Run("BLPOP unblocked", func(t *testing.T) {
		e2eBothGoRedis(t, e, func(t *testing.T, c *redis.Client) any {
			other := e2eGoRedis(t, e.paddr)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(200 * time.Millisecond)
				if err := other.RPush(ctx, "gr:bl", "x").Err(); err != nil {
					t.Errorf("RPUSH: %v", err)
				}
			}()
			start := time.Now()
			v, err := c.BLPop(ctx, 0, "gr:bl").Result()
			wg.Wait()
			must(t, err)
			if el := time.Since(start); el < 150*time.Millisecond {
				t.Errorf("BLPOP returned after %v, before the push", el)
			}
			return v
		})
	})
	e.healthy(t)
}

// redisCli runs redis-cli with args (and stdin), failing t on a non-zero
// exit or a timeout.
func e2eRedisCli(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	bin := redistest.Tool(t, "redis-cli")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func e2ePort(t *testing.T, addr string) string {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		t.Fatalf("no port in %q", addr)
	}
	return addr[i+1:]
}

func TestRedisCli(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	for _, tc := range []struct {
		name string
		args [][]string
		want []string
	}{
		{"RESP3", [][]string{{"-3", "HSET", "cli:h", "f", "v"}, {"-3", "HGETALL", "cli:h"}, {"-3", "--no-raw", "HGETALL", "cli:h"}},
			[]string{"1\n", "f v\n", "1# \"f\" => \"v\"\n"}},
		{"RESP2", [][]string{{"SET", "cli:k", "val"}, {"GET", "cli:k"}, {"--no-raw", "LRANGE", "cli:none", "0", "-1"}, {"--no-raw", "INCR", "cli:k"}},
			[]string{"OK\n", "val\n", "(empty array)\n", "(error) ERR value is not an integer or out of range\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var outs [2][]string
			for i, tg := range e.targets() {
				e.srv.DoT(t, "FLUSHALL")
				for _, a := range tc.args {
					outs[i] = append(outs[i], e2eRedisCli(t, "", append([]string{"-p", e2ePort(t, tg.addr)}, a...)...))
				}
			}
			if !reflect.DeepEqual(outs[0], outs[1]) {
				t.Errorf("redis-cli output differs\n direct %q\n proxy  %q", outs[0], outs[1])
			}
			if !reflect.DeepEqual(outs[0], tc.want) {
				t.Errorf("redis-cli output %q, want %q", outs[0], tc.want)
			}
		})
	}
}

// TestRedisCliPipe is C-03's end-to-end check: redis-cli --pipe appends
// its ECHO end marker and counts replies; through the proxy it must report
// zero errors, as directly.
func TestRedisCliPipe(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	var in strings.Builder
	const n = 1000
	for i := 0; i < n; i++ {
		in.Write(respCmd("SET", fmt.Sprint("pipe:", i), strings.Repeat("x", i%50)))
	}
	re := regexp.MustCompile(`errors: ([0-9]+), replies: ([0-9]+)`)
	for _, tg := range e.targets() {
		e.srv.DoT(t, "FLUSHALL")
		out := e2eRedisCli(t, in.String(), "-p", e2ePort(t, tg.addr), "--pipe")
		m := re.FindStringSubmatch(out)
		if m == nil || m[1] != "0" || m[2] != strconv.Itoa(n) {
			t.Errorf("%s: redis-cli --pipe: %q, want errors: 0, replies: %d", tg.name, out, n)
		}
		if got := e.srv.DoT(t, "DBSIZE"); got != int64(n) {
			t.Errorf("%s: DBSIZE %v, want %d", tg.name, got, n)
		}
	}
}

func e2eRedisBenchmark(t *testing.T, args ...string) string {
	t.Helper()
	bin := redistest.Tool(t, "redis-benchmark")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-benchmark %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// e2eBenchLineRe matches a final -q result line (progress lines, separated by
// \r, show rps= instead).
var e2eBenchLineRe = regexp.MustCompile(`(SET|GET): ([0-9.]+) requests per second`)

// TestRedisBenchmarkPipelined: 50 clients, pipelines of 16, SET and GET,
// run clean through the proxy.
func TestRedisBenchmarkPipelined(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	out := e2eRedisBenchmark(t, "-p", e2ePort(t, e.paddr), "-t", "get,set", "-P", "16", "-n", "100000", "-c", "50", "-q")
	t.Logf("redis-benchmark through the proxy:\n%s", out)
	if m := e2eBenchLineRe.FindAllStringSubmatch(out, -1); len(m) != 2 {
		t.Errorf("want a SET and a GET result line, got %q", out)
	}
	if strings.Contains(strings.ToLower(out), "error") {
		t.Errorf("redis-benchmark reported errors: %q", out)
	}
	e2eWaitCount(t, e.set, "get", 100000)
	for _, c := range e.set.Snapshot().Commands {
		if (c.Name == "get" || c.Name == "set") && c.Count != 100000 {
			t.Errorf("%s count %d, want 100000", c.Name, c.Count)
		}
		if c.Errors != 0 {
			t.Errorf("%s: %d error replies", c.Name, c.Errors)
		}
	}
	e.healthy(t)
}

// TestRedisBenchmarkCounts: every GET redis-benchmark sends through the
// proxy is counted once, in metrics.Set and in the Prometheus export, and
// for every command the upstream turnaround never exceeds the total.
func TestRedisBenchmarkCounts(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	out := e2eRedisBenchmark(t, "-p", e2ePort(t, e.paddr), "-t", "get", "-n", "100000", "-q")
	t.Logf("redis-benchmark through the proxy:\n%s", out)
	if strings.Contains(strings.ToLower(out), "error") {
		t.Errorf("redis-benchmark reported errors: %q", out)
	}
	get := e2eWaitCount(t, e.set, "get", 100000)
	if get.Count != 100000 {
		t.Errorf("get count %d, want exactly 100000", get.Count)
	}
	if n := get.Phases[metrics.PhaseTotal].Count(); n != 100000 {
		t.Errorf("get timed %d times, want 100000", n)
	}
	for _, c := range e.set.Snapshot().Commands {
		if !c.Observed() {
			continue
		}
		tot, up := c.Phases[metrics.PhaseTotal], c.Phases[metrics.PhaseUpstream]
		if up.Count() != tot.Count() {
			t.Errorf("%s: %d upstream vs %d total observations", c.Name, up.Count(), tot.Count())
		}
		for _, pct := range []float64{50, 90, 99, 99.9, 100} {
			if u, tt := up.Percentile(pct), tot.Percentile(pct); u > tt {
				t.Errorf("%s p%v: upstream %v > total %v", c.Name, pct, u, tt)
			}
		}
		if up.Sum > tot.Sum {
			t.Errorf("%s: upstream sum %v > total sum %v", c.Name, up.Sum, tot.Sum)
		}
	}

	reg := prometheus.NewRegistry()
	if err := e.set.Register(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, mf := range mfs {
		if mf.GetName() != "respmeter_commands_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "command" && l.GetValue() == "get" {
					found = true
					if v := m.GetCounter().GetValue(); v != 100000 {
						t.Errorf(`respmeter_commands_total{command="get"} = %v, want 100000`, v)
					}
				}
			}
		}
	}
	if !found {
		t.Errorf(`no respmeter_commands_total{command="get"} series`)
	}
}
