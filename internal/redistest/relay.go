package redistest

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// RelayOptions shape the upstream-to-client direction of a Relay; the
// client-to-upstream direction is always copied as it comes.
type RelayOptions struct {
	// MinChunk and MaxChunk bound the size of each write towards the
	// client (uniform in [MinChunk, MaxChunk]); 0 forwards reads whole.
	MinChunk, MaxChunk int
	// Delay is the pause after each chunk.
	Delay time.Duration
	// Seed makes the chunk sizes reproducible; connection i uses Seed+i.
	Seed uint64
}

// Relay is a loopback TCP relay that forwards every accepted connection to
// an upstream address, optionally slicing the upstream's bytes into small
// delayed chunks (a stand-in for Toxiproxy's slicer toxic). It is closed by
// t.Cleanup.
type Relay struct {
	ln       net.Listener
	upstream string
	o        RelayOptions

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	n      uint64
	wg     sync.WaitGroup
}

// StartRelay listens on a free loopback port and relays to upstream.
func StartRelay(t testing.TB, upstream string, o RelayOptions) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: relay listen: %v", err)
	}
	if o.MaxChunk < o.MinChunk {
		o.MaxChunk = o.MinChunk
	}
	r := &Relay{ln: ln, upstream: upstream, o: o, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.Close)
	return r
}

// Addr returns the relay's listening address.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.DialTimeout("tcp", r.upstream, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !r.track(c) || !r.track(u) {
			_ = c.Close()
			_ = u.Close()
			return
		}
		r.mu.Lock()
		seed := r.o.Seed + r.n
		r.n++
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(u, c, nil)
		go r.pipe(c, u, rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
	}
}

// pipe copies src to dst (sliced when rng is set) and closes both ends when
// either side ends.
func (r *Relay) pipe(dst, src net.Conn, rng *rand.Rand) {
	defer r.wg.Done()
	defer func() {
		_ = src.Close()
		_ = dst.Close()
	}()
	if rng == nil || r.o.MaxChunk <= 0 {
		_, _ = io.Copy(dst, src)
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for b := buf[:n]; len(b) > 0; {
			k := r.o.MinChunk
			if span := r.o.MaxChunk - r.o.MinChunk; span > 0 {
				k += rng.IntN(span + 1)
			}
			k = max(1, min(k, len(b)))
			if _, werr := dst.Write(b[:k]); werr != nil {
				return
			}
			b = b[k:]
			if r.o.Delay > 0 {
				time.Sleep(r.o.Delay)
			}
		}
		if err != nil {
			return
		}
	}
}

// Close stops accepting, closes every relayed connection and waits for
// the relay's goroutines.
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	_ = r.ln.Close()
	r.wg.Wait()
}
