package proxy

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/respmeter/respmeter/routing"
)

// failConn is a memConn whose next write fails as a socket's does once its
// peer has reset the connection (an engine killed between two of
// respmeter's writes: ECONNRESET), and which then closes itself inside the
// Write, as gnet's Conn.Write does: gnet v2.9.7's conn.write calls the
// event loop's close, and so the handler's OnClose, before it returns.
type failConn struct {
	memConn
	p    *Proxy
	fail bool
}

func (c *failConn) Write(b []byte) (int, error) {
	if !c.fail {
		return c.memConn.Write(b)
	}
	c.fail = false // closed: the one failed write
	err := os.NewSyscallError("write", syscall.ECONNRESET)
	c.p.OnClose(c, err)
	return 0, err
}

// TestWriteFailsInsideFlush: the write of a pipeline to an engine connection
// fails, and gnet closes that connection inside the write, while flushAll is
// still walking the connections it writes; the close fails the requests on
// it and flushes again (link.fail). Each of those requests gets the error
// reply, the requests for the other shards still go out and are answered
// in order, and nothing panics. (respmeter crashed here, with a nil
// dereference in flushAll, in a chaos soak whose engine was killed between
// two writes.)
func TestWriteFailsInsideFlush(t *testing.T) {
	for _, tc := range []struct {
		name           string
		routed, shared bool
	}{
		{"default", false, false},
		{"slots", true, false},
		{"slots-shared", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s *client
			var cl *memConn
			var ln *link
			if tc.routed {
				s, cl, ln = routedPair(t, tc.shared, nil)
			} else {
				s, cl, ln = pair(t, true, nil)
			}
			fc := &failConn{p: s.p, fail: true}
			fc.SetContext(ln)
			ln.c = fc

			// key:a goes to the failing connection (shard 0); under
			// routing one key for each other shard follows it in the
			// same pipeline.
			req := getReq
			want := "-ERR upstream 127.0.0.1:1 connection lost: write: connection reset by peer\r\n"
			var others []*link
			if tc.routed {
				topo := s.p.router.load().t
				for shard := 1; shard < len(topo.Addrs); shard++ {
					key := keyOfShard(t, topo, shard)
					req = append(append([]byte{}, req...), fmt.Sprintf("*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key)...)
					others = append(others, linkOf(t, s, shard))
					want += "$5\r\nvalue\r\n"
				}
			}
			cl.in = req
			s.clientTraffic(cl) // flushAll: the first write fails and closes its link
			for i, o := range others {
				up := o.c.(*memConn)
				if !strings.Contains(string(up.out), "GET") {
					t.Fatalf("shard %d's request was not sent: %q", i+1, up.out)
				}
				up.in = getReply
				o.traffic(up)
			}
			if string(cl.out) != want {
				t.Fatalf("the client got %q, want %q", cl.out, want)
			}
			if !ln.dead {
				t.Fatal("the connection whose write failed is still in use")
			}
		})
	}
}

// keyOfShard returns a key whose hash slot topo gives to shard.
func keyOfShard(t *testing.T, topo *routing.Topology, shard int) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if k := fmt.Sprintf("key:%d", i); topo.Shard(routing.Slot([]byte(k))) == shard {
			return k
		}
	}
	t.Fatalf("no key of shard %d among 1000", shard)
	return ""
}

// linkOf returns the connection to shard that memPair gave s: its own, or
// the loop's shared one.
func linkOf(t *testing.T, s *client, shard int) *link {
	t.Helper()
	if s.p.shared {
		return s.l.shared[shard*2]
	}
	return s.links[shard]
}
