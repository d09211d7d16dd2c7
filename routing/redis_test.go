package routing

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
)

// startClusterRedis runs a cluster-enabled redis-server without persistence
// (internal/redistest) and returns a connection to it. It skips the test with
// -short or when redis-server is not in PATH. The node owns no slots:
// COMMAND GETKEYS and CLUSTER KEYSLOT need none.
func startClusterRedis(t *testing.T) *respConn {
	t.Helper()
	srv := redistest.Start(t, "--cluster-enabled", "yes")
	rc, err := dialRESP(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.c.Close() })
	return rc
}

// respConn is a minimal RESP2 client for the oracle tests.
type respConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialRESP(addr string) (*respConn, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	return &respConn{c: c, r: bufio.NewReader(c)}, nil
}

// reply is a decoded RESP2 reply: kind is the type byte ('+', '-', ':',
// '$', '*'); str holds simple strings, errors, integers and bulk strings.
type reply struct {
	kind byte
	str  string
	null bool
	arr  []reply
}

func (r reply) String() string {
	switch {
	case r.null:
		return "(nil)"
	case r.kind == '*':
		parts := make([]string, len(r.arr))
		for i, e := range r.arr {
			parts[i] = e.String()
		}
		return "[" + strings.Join(parts, " ") + "]"
	case r.kind == '$':
		return strconv.Quote(r.str)
	}
	return string(r.kind) + r.str
}

// pipeline sends all cmds in one go (writing from a goroutine, so neither
// side's socket buffer can stall the other) and reads one reply per command.
func (rc *respConn) pipeline(cmds [][][]byte) ([]reply, error) {
	rc.c.SetDeadline(time.Now().Add(30 * time.Second))
	werr := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(rc.c, 64<<10)
		for _, args := range cmds {
			fmt.Fprintf(w, "*%d\r\n", len(args))
			for _, a := range args {
				fmt.Fprintf(w, "$%d\r\n", len(a))
				w.Write(a)
				w.WriteString("\r\n")
			}
		}
		werr <- w.Flush()
	}()
	out := make([]reply, 0, len(cmds))
	for range cmds {
		r, err := rc.read()
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, <-werr
}

func (rc *respConn) read() (reply, error) {
	line, err := rc.r.ReadString('\n')
	if err != nil {
		return reply{}, err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return reply{}, fmt.Errorf("bad reply line %q", line)
	}
	r := reply{kind: line[0], str: line[1 : len(line)-2]}
	switch r.kind {
	case '+', '-', ':':
		return r, nil
	case '$', '*':
		n, err := strconv.Atoi(r.str)
		if err != nil {
			return reply{}, fmt.Errorf("bad length in %q", line)
		}
		if n < 0 {
			r.null = true
			return r, nil
		}
		if r.kind == '$' {
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(rc.r, buf); err != nil {
				return reply{}, err
			}
			r.str = string(buf[:n])
			return r, nil
		}
		r.str = ""
		for range n {
			e, err := rc.read()
			if err != nil {
				return reply{}, err
			}
			r.arr = append(r.arr, e)
		}
		return r, nil
	}
	return reply{}, errors.New("unknown reply type in " + strconv.Quote(line))
}
