package replay

import (
	"context"
	"runtime"
	"testing"

	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/internal/redistest"
)

// TestReplayAllocsPerBatch: once a replay runs, sending a batch and
// comparing its replies allocates nothing: garbage made per batch is
// collected while other senders wait for their times, and a collection's
// pauses and assists are the tail of their lateness. Counted over 2,000
// batches of 2 GETs at speed max (the allocations of the start, per
// connection and per command name, come to well under one per batch).
func TestReplayAllocsPerBatch(t *testing.T) {
	srv := redistest.Start(t)
	const batches = 2000
	reply := capture.Summarize([]byte("$-1\r\n"))
	c := &capture.Conn{ID: 1}
	for i := range batches {
		c.Batches = append(c.Batches, capture.Batch{T: int64(i), Cmds: []capture.Cmd{
			{Seq: uint64(2*i + 1), Name: "get", Req: redistest.Cmd("GET", "a:1"), Reply: &reply, Total: 1000},
			{Seq: uint64(2*i + 2), Name: "get", Req: redistest.Cmd("GET", "a:2"), Reply: &reply, Total: 1000},
		}})
	}
	w := &capture.Workload{Conns: []*capture.Conn{c}}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	rep, err := Run(context.Background(), w, Options{Target: srv.Addr()})
	runtime.ReadMemStats(&m1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Commands != 2*batches || rep.Mismatches != 0 || len(rep.ConnErrors) > 0 {
		t.Fatalf("%d commands replayed, %d mismatches, errors %v; want %d, 0, none", rep.Commands, rep.Mismatches, rep.ConnErrors, 2*batches)
	}
	if per := float64(m1.Mallocs-m0.Mallocs) / batches; per > 0.5 {
		t.Errorf("%.2f allocations per batch (%d over %d batches), want none per batch", per, m1.Mallocs-m0.Mallocs, batches)
	}
}
