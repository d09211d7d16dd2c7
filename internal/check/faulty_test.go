package check

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
)

// faultyProxy is a deliberately broken loopback proxy: it relays requests
// unchanged and hands the replies of each connection, cut into frames, to
// fault before relaying them. It is closed by t.Cleanup.
type faultyProxy struct {
	ln       net.Listener
	upstream string
	// fault may reorder, change or drop frames; n counts the connection's
	// frames before these. It runs on the connection's relay goroutine.
	fault func(n int64, frames [][]byte) [][]byte

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func startFaultyProxy(t *testing.T, upstream string, fault func(n int64, frames [][]byte) [][]byte) *faultyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultyProxy{ln: ln, upstream: upstream, fault: fault, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *faultyProxy) addr() string { return p.ln.Addr().String() }

func (p *faultyProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *faultyProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.DialTimeout("tcp", p.upstream, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, u) {
			_ = c.Close()
			_ = u.Close()
			return
		}
		p.wg.Go(func() { p.requests(u, c) })
		p.wg.Go(func() { p.replies(c, u) })
	}
}

// requests copies the client's bytes to the upstream as they come.
func (p *faultyProxy) requests(u, c net.Conn) {
	defer u.Close()
	defer c.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := u.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// replies frames the upstream's bytes and relays what fault makes of each
// read's complete frames.
func (p *faultyProxy) replies(c, u net.Conn) {
	defer u.Close()
	defer c.Close()
	buf := make([]byte, 64<<10)
	var pending, out []byte
	var count int64
	for {
		n, err := u.Read(buf)
		pending = append(pending, buf[:n]...)
		frames, rest, ferr := redistest.SplitFrames(pending)
		if ferr != nil {
			return
		}
		if len(frames) > 0 {
			before := count
			count += int64(len(frames))
			out = out[:0]
			for _, f := range p.fault(before, frames) {
				out = append(out, f...)
			}
			if _, werr := c.Write(out); werr != nil {
				return
			}
			pending = append(pending[:0], rest...)
		}
		if err != nil {
			return
		}
	}
}

func (p *faultyProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// swapEvery returns a fault that swaps the replies numbered k*every-1 and
// k*every of a connection when both come in the same read.
func swapEvery(every int64) func(int64, [][]byte) [][]byte {
	return func(n int64, frames [][]byte) [][]byte {
		for i := 0; i+1 < len(frames); i++ {
			if (n+int64(i)+1)%every == 0 {
				frames[i], frames[i+1] = frames[i+1], frames[i]
				i++
			}
		}
		return frames
	}
}

// corruptEvery returns a fault that changes the last byte of reply
// k*every of a connection when it is a non-empty bulk string.
func corruptEvery(every int64) func(int64, [][]byte) [][]byte {
	return func(n int64, frames [][]byte) [][]byte {
		for i, f := range frames {
			if (n+int64(i)+1)%every == 0 && f[0] == resp.TypeBlobString && !bytes.HasPrefix(f, []byte("$0")) && !bytes.HasPrefix(f, []byte("$-")) {
				f[len(f)-3] ^= 0x20
			}
		}
		return frames
	}
}

// dropEvery returns a fault that loses reply k*every of a connection.
func dropEvery(every int64) func(int64, [][]byte) [][]byte {
	return func(n int64, frames [][]byte) [][]byte {
		out := frames[:0]
		for i, f := range frames {
			if (n+int64(i)+1)%every != 0 {
				out = append(out, f)
			}
		}
		return out
	}
}
