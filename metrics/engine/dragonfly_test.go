package engine

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// dragonflyFake is a scripted engine answering the poller's commands as
// Dragonfly documents them (see dragonflyLatency and dragonflyCommands in
// parse_test.go, written by hand, not captured): LATENCY HISTOGRAM with
// histogram (an empty array, or an error where the command is missing),
// INFO latencystats in the Redis line format with upper-case names, and
// INFO commandstats whose counters grow by 100 GET calls of 15 µs and 40
// SET calls of 20 µs per answer. Dragonfly itself cannot be built here
// (its build fetches third-party sources), so this is the only test of the
// poller's fallback over a connection.
type dragonflyFake struct {
	histogram string // "*0" or an error text
	mu        sync.Mutex
	stats     int      // INFO commandstats answers so far
	seen      []string // commands received, upper case, "INFO LATENCYSTATS"
}

func (f *dragonflyFake) handle(c redcon.Conn, cmd redcon.Command) {
	var words []string
	for _, a := range cmd.Args {
		words = append(words, strings.ToUpper(string(a)))
	}
	line := strings.Join(words, " ")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, line)
	switch line {
	case "CLIENT SETNAME " + strings.ToUpper(pollName):
		c.WriteString("OK")
	case "INFO SERVER":
		c.WriteBulkString("# Server\r\nredis_version:7.4.0\r\ndragonfly_version:df-v1.25.0\r\nrun_id:df1\r\n")
	case "LATENCY HISTOGRAM":
		if f.histogram == "*0" {
			c.WriteArray(0)
		} else {
			c.WriteError(f.histogram)
		}
	case "INFO LATENCYSTATS":
		c.WriteBulkString(dragonflyLatency)
	case "INFO COMMANDSTATS":
		f.stats++
		n := f.stats
		c.WriteBulkString(fmt.Sprintf("# Commandstats\r\ncmdstat_GET:calls=%d,usec=%d,usec_per_call=15\r\ncmdstat_set:calls=%d,usec=%d,usec_per_call=20\r\n",
			100*n, 1500*n, 40*n, 800*n))
	default:
		c.WriteError("ERR unknown command '" + line + "'")
	}
}

func (f *dragonflyFake) count(line string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.seen {
		if s == line {
			n++
		}
	}
	return n
}

func startDragonflyFake(t *testing.T, histogram string) (*dragonflyFake, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &dragonflyFake{histogram: histogram}
	srv := redcon.NewServer("", f.handle, nil, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return f, ln.Addr().String()
}

// TestPollerDragonflyFallback: against an engine whose LATENCY HISTOGRAM
// gives nothing (empty, or refused), every poll asks INFO latencystats,
// and the poller's sources, percentiles and per-interval means come from
// latencystats and commandstats.
func TestPollerDragonflyFallback(t *testing.T) {
	for _, hist := range []string{"*0", "ERR unknown command 'LATENCY'"} {
		t.Run(hist, func(t *testing.T) {
			f, addr := startDragonflyFake(t, hist)
			p := NewPoller(addr, 20*time.Millisecond, []string{"other", "get", "set"}, nil)
			stop := runUntilCancel(t, p.Run)
			waitFor(t, 5*time.Second, "3 polls", func() bool { return p.Stats().Polls >= 3 })
			stop()
			if got := p.Sources(); !slices.Equal(got, []string{SourceLatencyStats, SourceCommandStats}) {
				t.Errorf("Sources = %v, want [latencystats commandstats]", got)
			}
			if h, l := f.count("LATENCY HISTOGRAM"), f.count("INFO LATENCYSTATS"); h < 3 || l != h {
				t.Errorf("%d LATENCY HISTOGRAM, %d INFO LATENCYSTATS: want the fallback after each of at least 3", h, l)
			}
			if mean, calls, ok := p.EngineMean("get"); !ok || calls != 100 || mean != 15*time.Microsecond {
				t.Errorf("EngineMean(get) = %v, %d, %v; want 15µs, 100 calls per interval", mean, calls, ok)
			}
			st := p.Stats()
			if st.Errors != 0 {
				t.Errorf("%d poll errors", st.Errors)
			}
			var get, set CommandStats
			for _, c := range st.Commands {
				switch c.Command {
				case "get":
					get = c
				case "set":
					set = c
				}
			}
			if get.PctSource != SourceLatencyStats || get.P50 != 11500*time.Nanosecond || get.P99 != 40100*time.Nanosecond {
				t.Errorf("get = %+v, want p50 11.5µs and p99 40.1µs from latencystats", get)
			}
			if set.PctSource != SourceLatencyStats || set.P50 != 15*time.Microsecond || set.LastMean != 20*time.Microsecond {
				t.Errorf("set = %+v, want p50 15µs from latencystats, last mean 20µs", set)
			}
		})
	}
}
