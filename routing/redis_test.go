package routing

import (
	"context"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/respconn"
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
	t.Cleanup(func() { rc.Close() })
	return rc
}

// respConn is the oracle tests' connection to a real engine.
type respConn struct{ *respconn.Conn }

func dialRESP(addr string) (*respConn, error) {
	c, err := respconn.Dial(context.Background(), addr, respconn.Options{Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	return &respConn{c}, nil
}

// pipeline sends all cmds (binary arguments) in one write and reads one
// reply per command, within 30 s.
func (rc *respConn) pipeline(cmds [][][]byte) ([]respconn.Value, error) {
	strs := make([][]string, len(cmds))
	for i, args := range cmds {
		for _, a := range args {
			strs[i] = append(strs[i], string(a))
		}
	}
	return rc.Pipeline(30*time.Second, strs...)
}
