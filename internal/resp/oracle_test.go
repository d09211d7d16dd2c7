package resp_test

// The oracle tests compare the request scanner with a real redis-server.
// They live in package resp_test because internal/redistest, which starts
// the engine, reads RESP with this package's type bytes.

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
)

// startRedis runs redis-server on a free loopback port without persistence
// (internal/redistest) and returns its address; it skips with -short or
// without redis-server.
func startRedis(t *testing.T) string {
	t.Helper()
	return redistest.Start(t).Addr()
}

// TestRequestScannerOracle sends each malformed request to a real
// redis-server on a fresh connection and requires the scanner to give the
// same answer: the same error reply, or, where Redis waits for more bytes,
// no frame and no error.
func TestRequestScannerOracle(t *testing.T) {
	addr := startRedis(t)
	for _, tc := range resp.BadRequestCases() {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tc.In); err != nil {
				t.Fatal(err)
			}
			wait := 5 * time.Second
			if tc.Err == nil {
				wait = 300 * time.Millisecond
			}
			_ = c.SetReadDeadline(time.Now().Add(wait))
			got, err := io.ReadAll(c)
			var ne net.Error
			timedOut := errors.As(err, &ne) && ne.Timeout()
			if err != nil && !timedOut {
				t.Fatalf("read: %v (got %q)", err, got)
			}

			n, _, serr := (&resp.RequestScanner{}).Scan(tc.In)
			if tc.Err == nil {
				if len(got) != 0 || !timedOut {
					t.Fatalf("redis answered %q (closed: %v); the case says it waits", got, !timedOut)
				}
				if n != 0 || serr != nil {
					t.Fatalf("scanner: n=%d err=%v; redis waits", n, serr)
				}
				return
			}
			if timedOut {
				t.Fatalf("redis did not close the connection; got %q", got)
			}
			var perr resp.ProtocolError
			if !errors.As(serr, &perr) {
				t.Fatalf("scanner: n=%d err=%v; redis said %q", n, serr, got)
			}
			if !bytes.Equal(perr.Reply(), got) {
				t.Fatalf("scanner reply %q, redis %q", perr.Reply(), got)
			}
			if serr != tc.Err {
				t.Fatalf("scanner err %v, case says %v", serr, tc.Err)
			}
		})
	}
}

// TestRequestScannerOracleValid sends every valid case to redis-server,
// followed by a marker PING: the number of replies before the marker must
// match what the scanner says (one per multibulk or inline frame, none for
// empty ones).
func TestRequestScannerOracleValid(t *testing.T) {
	addr := startRedis(t)
	for _, tc := range resp.ValidRequestCases() {
		if tc.Kind == 0 {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			const marker = "$6\r\nMARKER\r\n"
			if _, err := c.Write([]byte(string(tc.In) + "*2\r\n$4\r\nPING\r\n" + marker)); err != nil {
				t.Fatal(err)
			}
			rd := bufio.NewReader(c)
			f := resp.NewReplyFramer()
			replies := 0
			var cur []byte
			for {
				b, err := rd.ReadByte()
				if err == io.EOF && replies == 1 && len(tc.Args) > 0 && strings.EqualFold(tc.Args[0], "QUIT") {
					return // QUIT answers and closes before the marker
				}
				if err != nil {
					t.Fatalf("after %d replies: %v", replies, err)
				}
				cur = append(cur, b)
				_, done, ferr := f.Feed([]byte{b})
				if ferr != nil {
					t.Fatal(ferr)
				}
				if done {
					if string(cur) == marker {
						break
					}
					replies++
					cur = cur[:0]
				}
			}
			want := 1
			if tc.Kind == resp.KindEmpty {
				want = 0
			}
			if replies != want {
				t.Fatalf("redis sent %d replies before PONG, scanner expects %d", replies, want)
			}
		})
	}
}
