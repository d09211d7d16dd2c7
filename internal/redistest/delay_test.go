package redistest

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// startEcho runs a loopback TCP echo server until the test ends.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// echoRoundTrips sends n 8-byte messages one at a time through addr and
// returns the round trips, sorted.
func echoRoundTrips(t *testing.T, addr string, n int) []time.Duration {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	msg := []byte("ping1234")
	got := make([]byte, len(msg))
	out := make([]time.Duration, 0, n)
	for i := 0; i < n+5; i++ {
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if i >= 5 { // the first ones pay for the dial behind the relay
			out = append(out, time.Since(start))
		}
	}
	slices.Sort(out)
	return out
}

// TestDelayRelayRoundTrip: with 1 ms each way, every round trip through the
// relay to an echo server takes at least 2 ms (a chunk is never written
// before it is due) and the median less than 3 ms. Not parallel: it times.
func TestDelayRelayRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test skipped with -short")
	}
	VerifyNoLeaks(t)
	echo := startEcho(t)
	const oneWay = time.Millisecond
	const n = 100

	base := echoRoundTrips(t, StartDelayRelay(t, echo, 0), n)
	delayed := echoRoundTrips(t, StartDelayRelay(t, echo, oneWay), n)
	coarse := echoRoundTrips(t, startDelayRelay(t, echo, oneWay, false).ln.Addr().String(), n)
	q := func(ds []time.Duration, p int) time.Duration { return ds[len(ds)*p/100] }
	t.Logf("no delay:               min %v p50 %v p90 %v max %v", base[0], q(base, 50), q(base, 90), base[n-1])
	t.Logf("1ms each way:           min %v p50 %v p90 %v max %v (p50 - no-delay p50 = %v)",
		delayed[0], q(delayed, 50), q(delayed, 90), delayed[n-1], q(delayed, 50)-q(base, 50))
	t.Logf("1ms with time.Sleep:    min %v p50 %v p90 %v max %v (p50 - no-delay p50 = %v)",
		coarse[0], q(coarse, 50), q(coarse, 90), coarse[n-1], q(coarse, 50)-q(base, 50))

	if delayed[0] < 2*oneWay {
		t.Errorf("fastest round trip %v < 2 x %v: a chunk was written before it was due", delayed[0], oneWay)
	}
	if p50 := q(delayed, 50); p50 >= 3*oneWay {
		t.Errorf("median round trip %v >= 2 x %v + 1 ms", p50, oneWay)
	}
}

// TestDelayRelayStream: bytes arrive unchanged and in order in both
// directions, whatever the chunking, with and without delay, and a
// half-close is passed on after the data.
func TestDelayRelayStream(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short")
	}
	VerifyNoLeaks(t)
	echo := startEcho(t)
	for _, d := range []time.Duration{0, 200 * time.Microsecond} {
		addr := StartDelayRelay(t, echo, d)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		want := make([]byte, 4<<20)
		rng := rand.New(rand.NewPCG(1, uint64(d)))
		for i := range want {
			want[i] = byte(rng.Uint32())
		}
		done := make(chan error, 1)
		go func() {
			// Writes of random sizes, so that the relay sees many chunks.
			for b := want; len(b) > 0; {
				k := min(len(b), 1+rng.IntN(40000))
				if _, err := c.Write(b[:k]); err != nil {
					done <- err
					return
				}
				b = b[k:]
			}
			done <- c.(*net.TCPConn).CloseWrite()
		}()
		got, err := io.ReadAll(c) // ends with the echo's half-close, relayed
		if err != nil {
			t.Fatalf("delay %v: read: %v", d, err)
		}
		if werr := <-done; werr != nil {
			t.Fatalf("delay %v: write: %v", d, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("delay %v: %d bytes back, want %d, equal prefix %d", d, len(got), len(want), commonPrefix(got, want))
		}
		_ = c.Close()
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestDelaySleepPrecise: SleepPrecise never returns early and is late by a few
// µs at the median, where time.Sleep is late by ~100 µs (logged).
func TestDelaySleepPrecise(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test skipped with -short")
	}
	const d = time.Millisecond
	for _, f := range []struct {
		name string
		fn   func(time.Duration)
	}{{"SleepPrecise", SleepPrecise}, {"time.Sleep", time.Sleep}} {
		late := make([]time.Duration, 100)
		for i := range late {
			start := time.Now()
			f.fn(d)
			late[i] = time.Since(start) - d
		}
		slices.Sort(late)
		t.Logf("%-12s %v: late by min %v p50 %v p90 %v max %v", f.name, d, late[0], late[50], late[90], late[99])
		if f.name != "SleepPrecise" {
			continue
		}
		if late[0] < 0 {
			t.Errorf("SleepPrecise(%v) returned %v early", d, -late[0])
		}
		if late[50] > 50*time.Microsecond {
			t.Errorf("SleepPrecise(%v) late by %v at the median, want <= 50µs", d, late[50])
		}
	}
}
