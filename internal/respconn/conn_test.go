package respconn_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
)

const opTimeout = 10 * time.Second

// mustDial dials addr with opts and closes the connection at the end of t.
func mustDial(t *testing.T, ctx context.Context, addr string, opts respconn.Options) *respconn.Conn {
	t.Helper()
	c, err := respconn.Dial(ctx, addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestConnRedis talks to a real redis-server that requires a password:
// AUTH with the password and with an ACL user, a refused AUTH that does not
// leak the password, CLIENT SETNAME, pipelining, RESP3 after HELLO 3, and
// ctx unblocking a blocked read.
func TestConnRedis(t *testing.T) {
	const password = "s3cret-pw"
	s := redistest.Start(t, "--requirepass", password)
	s.Do("ACL", "SETUSER", "meter", "on", ">meter-pw", "~*", "+@all")
	ctx := context.Background()
	opts := respconn.Options{Timeout: opTimeout}

	// Logged in (and named) as opts say: the engine's own view is the oracle.
	for _, tt := range []struct {
		name string
		opts respconn.Options
		ask  []string
		want string
	}{
		{"password and name", respconn.Options{Timeout: opTimeout, Password: password, Name: "respmeter-test"},
			[]string{"CLIENT", "GETNAME"}, "respmeter-test"},
		{"ACL user", respconn.Options{Timeout: opTimeout, User: "meter", Password: "meter-pw"},
			[]string{"ACL", "WHOAMI"}, "meter"},
		{"password is the default user", respconn.Options{Timeout: opTimeout, Password: password},
			[]string{"ACL", "WHOAMI"}, "default"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, err := mustDial(t, ctx, s.Addr(), tt.opts).Do(opTimeout, tt.ask...)
			if err != nil || v.Str != tt.want {
				t.Fatalf("%v = %v, %v; want %q", tt.ask, v, err, tt.want)
			}
		})
	}

	t.Run("wrong password", func(t *testing.T) {
		o := opts
		o.User, o.Password = "meter", "wrong-pw-123"
		c, err := respconn.Dial(ctx, s.Addr(), o)
		if err == nil {
			c.Close()
			t.Fatal("Dial with a wrong password succeeded")
		}
		var se respconn.ServerError
		if !errors.As(err, &se) || !strings.HasPrefix(string(se), "WRONGPASS") {
			t.Errorf("err = %v, want a WRONGPASS ServerError", err)
		}
		if strings.Contains(err.Error(), "wrong-pw-123") {
			t.Errorf("error quotes the password: %v", err)
		}
	})

	t.Run("no password", func(t *testing.T) {
		// CLIENT SETNAME's -NOAUTH is ignored; the first command sees it.
		o := opts
		o.Name = "respmeter-test"
		c := mustDial(t, ctx, s.Addr(), o)
		v, err := c.Do(opTimeout, "PING")
		if err != nil || !v.IsError() || !strings.HasPrefix(v.Str, "NOAUTH") {
			t.Fatalf("PING = %v, %v; want -NOAUTH", v, err)
		}
	})

	t.Run("pipeline and RESP3", func(t *testing.T) {
		o := opts
		o.Password = password
		c := mustDial(t, ctx, s.Addr(), o)
		vs, err := c.Pipeline(opTimeout,
			[]string{"DEL", "h"},
			[]string{"HSET", "h", "f", "v"},
			[]string{"INCR", "h"},
			[]string{"HELLO", "3"},
			[]string{"HGETALL", "h"},
			[]string{"GET", "missing"})
		if err != nil {
			t.Fatal(err)
		}
		if vs[1].Type != resp.TypeInteger || vs[1].Int != 1 {
			t.Errorf("HSET = %v", vs[1])
		}
		if err := vs[2].Err(); err == nil || !strings.HasPrefix(vs[2].Str, "WRONGTYPE") {
			t.Errorf("INCR on a hash = %v", vs[2])
		}
		if vs[3].Type != resp.TypeMap {
			t.Errorf("HELLO 3 = %v, want a map", vs[3])
		}
		if got := vs[4].Any(); vs[4].Type != resp.TypeMap || len(vs[4].Elems) != 2 || got.(map[string]any)["f"] != "v" {
			t.Errorf("HGETALL over RESP3 = %v", vs[4])
		}
		if vs[5].Type != resp.TypeNull || !vs[5].Null {
			t.Errorf("GET missing over RESP3 = %+v, want _", vs[5])
		}
	})

	t.Run("ctx unblocks", func(t *testing.T) {
		o := opts
		o.Password = password
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		c := mustDial(t, cctx, s.Addr(), o)
		done := make(chan error, 1)
		go func() {
			_, err := c.Do(0, "BLPOP", "never-pushed", "0") // blocks forever
			done <- err
		}()
		// Cancel only once the engine holds the BLPOP: Do is then in Read.
		redistest.Eventually(t, opTimeout, func() error {
			if info := s.Do("INFO", "clients").(string); !strings.Contains(info, "blocked_clients:1") {
				return errors.New("BLPOP not blocked yet")
			}
			return nil
		})
		cancel()
		select {
		case err := <-done:
			if err == nil {
				t.Error("BLPOP returned without error after cancel")
			}
		case <-time.After(opTimeout):
			t.Fatal("Do still blocked after ctx was cancelled")
		}
	})
}
