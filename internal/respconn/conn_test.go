package respconn_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/respconn"
)

const opTimeout = 10 * time.Second

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

	t.Run("password and name", func(t *testing.T) {
		o := opts
		o.Password, o.Name = password, "respmeter-test"
		c, err := respconn.Dial(ctx, s.Addr(), o)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		v, err := c.Do(opTimeout, "CLIENT", "GETNAME")
		if err != nil || v.Str != "respmeter-test" {
			t.Fatalf("CLIENT GETNAME = %v, %v", v, err)
		}
	})

	t.Run("ACL user", func(t *testing.T) {
		o := opts
		o.User, o.Password = "meter", "meter-pw"
		c, err := respconn.Dial(ctx, s.Addr(), o)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		v, err := c.Do(opTimeout, "ACL", "WHOAMI")
		if err != nil || v.Str != "meter" {
			t.Fatalf("ACL WHOAMI = %v, %v", v, err)
		}
	})

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
		c, err := respconn.Dial(ctx, s.Addr(), o)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		v, err := c.Do(opTimeout, "PING")
		if err != nil || !v.IsError() || !strings.HasPrefix(v.Str, "NOAUTH") {
			t.Fatalf("PING = %v, %v; want -NOAUTH", v, err)
		}
	})

	t.Run("pipeline and RESP3", func(t *testing.T) {
		o := opts
		o.Password = password
		c, err := respconn.Dial(ctx, s.Addr(), o)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
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
		if vs[1].Type != respconn.TypeInteger || vs[1].Int != 1 {
			t.Errorf("HSET = %v", vs[1])
		}
		if err := vs[2].Err(); err == nil || !strings.HasPrefix(vs[2].Str, "WRONGTYPE") {
			t.Errorf("INCR on a hash = %v", vs[2])
		}
		if vs[3].Type != respconn.TypeMap {
			t.Errorf("HELLO 3 = %v, want a map", vs[3])
		}
		if got := vs[4].Any(); vs[4].Type != respconn.TypeMap || len(vs[4].Elems) != 2 || got.(map[string]any)["f"] != "v" {
			t.Errorf("HGETALL over RESP3 = %v", vs[4])
		}
		if vs[5].Type != respconn.TypeNull || !vs[5].Null {
			t.Errorf("GET missing over RESP3 = %+v, want _", vs[5])
		}
	})

	t.Run("ctx unblocks", func(t *testing.T) {
		o := opts
		o.Password = password
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		c, err := respconn.Dial(cctx, s.Addr(), o)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		done := make(chan error, 1)
		go func() {
			_, err := c.Do(0, "BLPOP", "never-pushed", "0") // blocks forever
			done <- err
		}()
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
