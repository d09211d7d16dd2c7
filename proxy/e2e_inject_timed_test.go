package proxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/proxytest"
)

// TestInjectTimedDelay: a 10 ms delay rule on GET with at: 1s and for: 1s,
// added at run time to a proxy in front of a real redis-server, delays only
// the GETs read between 1 and 2 s after it was added (not after the
// proxy's start: the rule is added 200 ms in).
//
// One go-redis client sends GETs of a fresh key each, until 2.6 s after the
// add, and times each call by its own clock. The add happened
// between add0 and add1 (read before and after AddInjection), and a GET
// was read by the proxy between its send and its reply, so the client's
// clock proves its class with no timing margin: answered before add0+1s,
// read before the window; sent after add1+1s and answered before add0+2s,
// read inside it; sent after add1+2s, read after it; any other GET is at an
// edge and may be either. respmeter names, per GET, the rule that touched
// it (the slow log, every GET of 5 ms or more, keyed by its key): every GET
// inside was touched and took at least the 10 ms by the client's clock,
// none before or after was, and the rule's count, the injected phase's
// count and the slow log's agree. The client-seen median of the GETs
// inside exceeds that of those outside by the delay ± 10 %, and the
// injected phase reads 10 ms ± 5 %. GET /inject's state (Counts) is checked
// the same way on each round: inactive before, active inside, inactive
// after, with the window's wall-clock start within the add's bounds.
func TestInjectTimedDelay(t *testing.T) {
	redistest.MoreProcs(t) // the delays' clock holds a thread
	// A stall of the machine (the other tests' load) can skew the medians
	// compared; each attempt measures its own.
	redistest.Retry(t, 3, func(t testing.TB) {
		const delay = 10 * time.Millisecond
		srv := redistest.Start(t)
		sl := slowlog.New(4096, delay/2)
		p, set := proxytest.StartProxy(t, srv.Addr(), func(c *proxy.Config) { c.SlowLog = sl })
		start := time.Now()
		c := injectClient(t, p.Addr(), 5*time.Second)
		ctx := context.Background()
		in, err := proxy.ParseInjection("rules.yaml", []byte(fmt.Sprintf(
			"rules:\n- name: timed\n  commands: [GET]\n  at: 1s\n  for: 1s\n  delay: %v\n", delay)))
		if err != nil {
			t.Fatal(err)
		}

		type call struct {
			key        string
			sent, done time.Time
		}
		var calls []call
		var add0, add1 time.Time
		var stateChecks [3]int // before, inside, after
		for i := 0; add1.IsZero() || time.Since(add1) < 2600*time.Millisecond; i++ {
			if add1.IsZero() && time.Since(start) > 200*time.Millisecond {
				add0 = time.Now()
				if err := p.AddInjection(in); err != nil {
					t.Fatal(err)
				}
				add1 = time.Now()
			}
			k := fmt.Sprintf("timed:%d", i)
			sent := time.Now()
			if err := c.Get(ctx, k).Err(); err != redis.Nil {
				t.Fatalf("GET %s: %v", k, err)
			}
			calls = append(calls, call{k, sent, time.Now()})
			if !add1.IsZero() {
				c0 := time.Now()
				st := p.Injection().Counts()[0]
				c1 := time.Now()
				if w := st.Window; w == nil || w.At != 1 || w.For != 1 || w.End == nil ||
					w.Start.Before(add0.Add(time.Second-time.Millisecond)) || w.Start.After(add1.Add(time.Second+time.Millisecond)) ||
					w.End.Sub(w.Start) != time.Second {
					t.Fatalf("Counts: window %+v, want at 1 for 1, starting 1 s after the add (%v..%v)", w, add0, add1)
				}
				switch {
				case c1.Before(add0.Add(time.Second)), c0.After(add1.Add(2 * time.Second)):
					if st.Active {
						t.Errorf("Counts read %v after the add, outside the window: active", c0.Sub(add1))
					}
					stateChecks[min(2, int(c0.Sub(add1)/time.Second))]++
				case c0.After(add1.Add(time.Second)) && c1.Before(add0.Add(2*time.Second)):
					if !st.Active {
						t.Errorf("Counts read %v after the add, inside the window: not active", c0.Sub(add1))
					}
					stateChecks[1]++
				}
			}
			time.Sleep(time.Millisecond)
		}

		touched := map[string]bool{}
		redistest.Eventually(t, 2*time.Second, func() error {
			clear(touched)
			for _, e := range sl.Entries() {
				if e.Command == "get" && e.Rule != "" {
					if e.Rule != "timed" {
						t.Fatalf("slow log: GET %s touched by rule %q", e.FirstKey, e.Rule)
					}
					touched[e.FirstKey] = true
				}
			}
			n := in.Hits(0)
			if uint64(len(touched)) != n {
				return fmt.Errorf("slow log names %d GETs touched, the rule counted %d", len(touched), n)
			}
			if m := proxytest.Command(t, set, "get").Phases[metrics.PhaseInjected].Count(); uint64(m) != n {
				return fmt.Errorf("injected phase of GET counted %d, the rule %d", m, n)
			}
			return nil
		})
		var before, inside, after, edge int
		var inDur, outDur []time.Duration
		for _, cl := range calls {
			took := cl.done.Sub(cl.sent)
			switch {
			case cl.done.Before(add0.Add(time.Second)):
				before++
				outDur = append(outDur, took)
				if touched[cl.key] {
					t.Errorf("GET %s answered %v after the add, before the window: delayed", cl.key, cl.done.Sub(add0))
				}
			case cl.sent.After(add1.Add(time.Second)) && cl.done.Before(add0.Add(2*time.Second)):
				inside++
				inDur = append(inDur, took)
				if !touched[cl.key] {
					t.Errorf("GET %s sent %v after the add, inside the window: not delayed", cl.key, cl.sent.Sub(add1))
				}
				if took < delay {
					t.Errorf("GET %s inside the window took %v by the client's clock, less than the %v delay", cl.key, took, delay)
				}
			case cl.sent.After(add1.Add(2 * time.Second)):
				after++
				outDur = append(outDur, took)
				if touched[cl.key] {
					t.Errorf("GET %s sent %v after the add, after the window: delayed", cl.key, cl.sent.Sub(add1))
				}
			default:
				edge++
			}
		}
		hits := in.Hits(0)
		t.Logf("GETs before the window %d, inside %d, after %d, at an edge %d; rule touched %d (add took %v); state checked %v",
			before, inside, after, edge, hits, add1.Sub(add0), stateChecks)
		if before < 50 || inside < 30 || after < 30 || stateChecks[0] < 10 || stateChecks[1] < 10 || stateChecks[2] < 10 {
			t.Fatalf("too few GETs to judge: %d before, %d inside, %d after; state checks %v", before, inside, after, stateChecks)
		}
		if hits < uint64(inside) || hits > uint64(inside+edge) {
			t.Errorf("rule touched %d GETs, want between the %d inside and %d with the edges", hits, inside, inside+edge)
		}
		inj := proxytest.Command(t, set, "get").Phases[metrics.PhaseInjected]
		rise := median(inDur) - median(outDur)
		t.Logf("client-seen GET p50 inside %v, outside %v: +%v; injected p50 %v", median(inDur), median(outDur), rise, inj.Percentile(50))
		if p := inj.Percentile(50); p < delay*95/100 || p > delay*105/100 {
			t.Errorf("injected GET p50 = %v, want %v ± 5%%", p, delay)
		}
		// Under -race the detector's work on the loop adds to the rise (as in
		// delayTruth): the client-seen comparison is made without it.
		if !redistest.RaceEnabled() && (rise < delay*9/10 || rise > delay*11/10) {
			t.Errorf("client-seen GET p50 rose by %v inside the window, want %v ± 10%%", rise, delay)
		}
	})
}
