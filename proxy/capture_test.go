package proxy

import (
	"bytes"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/respmeter/respmeter/internal/capture"
)

// TestCaptureHotPathAllocs: with a capture running, a command through a
// routed session still allocates nothing, and every one is in the file.
func TestCaptureHotPathAllocs(t *testing.T) {
	for _, shared := range []bool{false, true} {
		s, cl, ln := routedPair(t, shared, nil)
		path := filepath.Join(t.TempDir(), "c.respcap")
		if err := s.p.StartCapture(CaptureConfig{File: path}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			roundTrip(s, cl, ln, getReq, getReply)
		}
		const runs = 1000
		allocs := testing.AllocsPerRun(runs, func() { roundTrip(s, cl, ln, getReq, getReply) })
		if allocs != 0 {
			t.Errorf("shared=%v: %v allocations per captured command, want 0", shared, allocs)
		}
		st, err := s.p.StopCapture()
		if err != nil {
			t.Fatal(err)
		}
		n := answeredGets(t, path)
		// AllocsPerRun runs the function once more to warm up.
		if n != 100+runs+1 || st.Dropped != 0 {
			t.Errorf("shared=%v: %d GETs with their reply in the file (%d dropped), want %d", shared, n, st.Dropped, 100+runs+1)
		}
	}
}

// BenchmarkCaptureHotPath is BenchmarkRoutedHotPath with and without a
// capture running. ns/op is the event loop's time only: the writer
// goroutine (redaction, compression) runs beside it, so cpu-ns/op is the
// CPU time (user + system, getrusage RUSAGE_SELF: every thread of the
// process) per command over the loop, the capture's stop included, so
// that all its records are written; capture-on fails if any was dropped
// (a dropped record costs less than a written one). With -count N the
// two run interleaved; compare them per pair (BENCHMARKS.md, "Capture").
//
// The -p16 variants send 16 GETs in one client read and their 16 replies
// in one engine read, as memtier --pipeline=16 drives it: one batch record
// and 16 reply records per round trip. b.N counts commands there too (a
// multiple of 16 is run), so every figure is per command.
func BenchmarkCaptureHotPath(b *testing.B) {
	for _, depth := range []int{1, 16} {
		for _, on := range []bool{false, true} {
			name := "capture-off"
			if on {
				name = "capture-on"
			}
			if depth > 1 {
				name += fmt.Sprintf("-p%d", depth)
			}
			b.Run(name, func(b *testing.B) {
				s, cl, ln := routedPair(b, true, nil)
				req, reply := bytes.Repeat(getReq, depth), bytes.Repeat(getReply, depth)
				if on {
					if err := s.p.StartCapture(CaptureConfig{File: filepath.Join(b.TempDir(), "c")}); err != nil {
						b.Fatal(err)
					}
				}
				trips := (b.N + depth - 1) / depth
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := cpuTime(b)
				for i := 0; i < trips; i++ {
					roundTrip(s, cl, ln, req, reply)
				}
				cmds := int64(trips * depth)
				defer func() { b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(cmds), "cpu-ns/op") }()
				if on {
					st, err := s.p.StopCapture()
					if err != nil {
						b.Fatal(err)
					}
					// A batch and a group of replies per round trip, and the
					// connection record (format version 1, for an A/B
					// against a tree before it: a record per reply).
					want := 2*int64(trips) + 1
					if capture.Version < 2 {
						want = cmds + int64(trips) + 1
					}
					if st.Dropped != 0 || st.Records != want {
						b.Fatalf("%d records written, %d dropped, want %d and 0", st.Records, st.Dropped, want)
					}
					b.ReportMetric(float64(st.Bytes)/float64(cmds), "file-B/op")
					b.ReportMetric(float64(st.Raw)/float64(cmds), "raw-B/op")
				}
			})
		}
	}
}

// TestCaptureMarksSecretBatches: the event loop marks a read clean only
// when no request in it can carry a credential: a read mixing GET and
// AUTH, and an inline AUTH, are redacted by the writer; plain GETs are
// written as read.
func TestCaptureMarksSecretBatches(t *testing.T) {
	s, cl, up := pair(t, true, nil)
	path := filepath.Join(t.TempDir(), "c.respcap")
	if err := s.p.StartCapture(CaptureConfig{File: path}); err != nil {
		t.Fatal(err)
	}
	auth := []byte("*2\r\n$4\r\nAUTH\r\n$9\r\npw-pipe-1\r\n")
	roundTrip(s, cl, up, getReq, getReply)
	roundTrip(s, cl, up, append(append(append([]byte{}, getReq...), auth...), getReq...), []byte("$5\r\nvalue\r\n+OK\r\n$5\r\nvalue\r\n"))
	roundTrip(s, cl, up, []byte("AUTH pw-inline-2\r\n"), []byte("+OK\r\n"))
	roundTrip(s, cl, up, getReq, getReply)
	if _, err := s.p.StopCapture(); err != nil {
		t.Fatal(err)
	}
	w, err := capture.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// Every request byte in the file is in a Cmd's Req or a Conn's State.
	var got []string
	for _, c := range w.Conns {
		reqs := [][]byte{c.State}
		for _, b := range c.Batches {
			for _, cmd := range b.Cmds {
				got = append(got, cmd.Name)
				reqs = append(reqs, cmd.Req)
				if cmd.Name == "auth" && !bytes.Contains(cmd.Req, []byte(capture.Redacted)) {
					t.Errorf("AUTH recorded as %q, want its password %s", cmd.Req, capture.Redacted)
				}
			}
		}
		for _, r := range reqs {
			for _, pw := range []string{"pw-pipe-1", "pw-inline-2"} {
				if bytes.Contains(r, []byte(pw)) {
					t.Errorf("credential %q in the capture file: %q", pw, r)
				}
			}
		}
	}
	if want := "[get get auth get auth get]"; fmt.Sprint(got) != want {
		t.Errorf("commands %v, want %v", got, want)
	}
}

// cpuTime returns the CPU time (user + system) the process has used so
// far, in ns.
func cpuTime(tb testing.TB) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestCaptureGroupsReplies: the replies the loop finishes for a client in
// one pass are one record (format version 2's 'G'): a pipeline of 16 GETs
// answered in one engine read is a connection, a batch and one group; the
// same answered in two reads, two groups. Every GET has its reply.
func TestCaptureGroupsReplies(t *testing.T) {
	for _, reads := range []int{1, 2} {
		s, cl, ln := routedPair(t, true, nil)
		path := filepath.Join(t.TempDir(), "c.respcap")
		if err := s.p.StartCapture(CaptureConfig{File: path}); err != nil {
			t.Fatal(err)
		}
		up := ln.c.(*memConn)
		cl.in = bytes.Repeat(getReq, 16)
		s.clientTraffic(cl)
		for i := range reads {
			up.in = bytes.Repeat(getReply, 16/reads)
			ln.traffic(up)
			if i == 0 && reads == 2 && len(cl.out) != 8*len(getReply) {
				t.Fatalf("client got %q after the first engine read", cl.out)
			}
		}
		st, err := s.p.StopCapture()
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(2 + reads); st.Records != want || st.Dropped != 0 {
			t.Errorf("%d engine read(s): %d records (%d dropped), want %d", reads, st.Records, st.Dropped, want)
		}
		if n := answeredGets(t, path); n != 16 {
			t.Errorf("%d engine read(s): %d GETs with their reply in the file, want 16", reads, n)
		}
	}
}

// answeredGets returns the number of GETs in the capture file with getReply
// for their reply.
func answeredGets(t *testing.T, path string) int {
	t.Helper()
	w, err := capture.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	want := capture.Summarize(getReply)
	for _, c := range w.Conns {
		for _, b := range c.Batches {
			for _, cmd := range b.Cmds {
				if cmd.Name == "get" && cmd.Reply != nil && *cmd.Reply == want {
					n++
				}
			}
		}
	}
	return n
}
