package proxy

import (
	"net"
	"os"
	"time"
)

// linger delivers the remaining replies of a client that half-closed its
// connection. gnet closes a socket as soon as a read returns EOF, so the
// client keeps a duplicate descriptor of it (see client.clientClosed) and
// hands reply bytes to a goroutine that writes them through the Go runtime's
// poller. Used only in that rare case: the fast path never sees it.
type linger struct {
	ch     chan []byte
	queued int  // bytes handed to the writer (loop side only)
	limit  int  // ClientOutputLimit; <= 0 unlimited
	broken bool // stopped taking bytes: the client gets a prefix of its stream
}

// lingerQueue bounds the reply chunks queued for a half-closed client.
const lingerQueue = 4096

func newLinger(p *Proxy, fd int, limit int) *linger {
	l := &linger{ch: make(chan []byte, lingerQueue), limit: limit}
	f := os.NewFile(uintptr(fd), "client")
	conn, err := net.FileConn(f) // dups fd again
	_ = f.Close()
	p.lingers.Add(1)
	go func() {
		defer p.lingers.Done()
		for b := range l.ch {
			if err != nil {
				continue
			}
			_ = conn.SetWriteDeadline(time.Now().Add(p.cfg.DrainTimeout))
			if _, werr := conn.Write(b); werr != nil {
				err = werr
			}
		}
		if conn != nil {
			_ = conn.Close()
		}
	}()
	return l
}

// write queues a copy of b (b aliases the loop's read buffer). When the
// client does not read fast enough (the queue or the output limit is full)
// it stops taking bytes for good, so the client sees a prefix of its reply
// stream and then EOF, never a stream with a gap.
func (l *linger) write(b []byte) {
	if l.broken {
		return
	}
	l.queued += len(b)
	if l.limit > 0 && l.queued > l.limit {
		l.broken = true
		return
	}
	select {
	case l.ch <- append([]byte(nil), b...):
	default:
		l.broken = true
	}
}

// close flushes what was queued, then closes the connection.
func (l *linger) close() { close(l.ch) }

// lingerTimeout bounds how long a half-closed client's replies are waited
// for.
const lingerTimeout = 60 * time.Second
