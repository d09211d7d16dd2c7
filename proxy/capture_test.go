package proxy

import (
	"path/filepath"
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
		// AllocsPerRun runs the function once more to warm up.
		if n != 100+runs+1 || st.Dropped != 0 {
			t.Errorf("shared=%v: %d GETs with their reply in the file (%d dropped), want %d", shared, n, st.Dropped, 100+runs+1)
		}
	}
}

// BenchmarkCaptureHotPath is BenchmarkRoutedHotPath with and without a
// capture running (the writer goroutine's cost is not on this path).
func BenchmarkCaptureHotPath(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "capture-off"
		if on {
			name = "capture-on"
		}
		b.Run(name, func(b *testing.B) {
			s, cl, ln := routedPair(b, true, nil)
			if on {
				if err := s.p.StartCapture(CaptureConfig{File: filepath.Join(b.TempDir(), "c"), BufferBytes: 16 << 20}); err != nil {
					b.Fatal(err)
				}
				defer func() { _, _ = s.p.StopCapture() }()
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				roundTrip(s, cl, ln, getReq, getReply)
			}
		})
	}
}
