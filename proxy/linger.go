package proxy

import (
	"net"
	"os"
	"time"
)

// linger delivers the remaining replies of a client that half-closed its
// connection. gnet closes a socket as soon as a read returns EOF, so the
// session keeps a duplicate descriptor of it (see session.clientClosed) and
// hands reply bytes to a goroutine that writes them through the Go runtime's
// poller. Used only in that rare case: the fast path never sees it.
type linger struct {
	ch chan []byte
}

// lingerQueue bounds the reply chunks queued for a half-closed client; when
// it is full the client is not reading and the rest is dropped.
const lingerQueue = 256

func newLinger(p *Proxy, fd int) *linger {
	l := &linger{ch: make(chan []byte, lingerQueue)}
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

// write queues a copy of b (b aliases the loop's read buffer).
func (l *linger) write(b []byte) {
	select {
	case l.ch <- append([]byte(nil), b...):
	default:
	}
}

// close flushes what was queued, then closes the connection.
func (l *linger) close() { close(l.ch) }
