package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/routing"
)

// Pub/sub confirmations order what other connections do after them: the
// engine writes a (P|S)(UN)SUBSCRIBE confirmation once it has changed the
// client's subscriptions, so a PUBLISH sent by anyone after the client read
// the confirmation is delivered to it (after SUBSCRIBE) or not (after
// UNSUBSCRIBE), whatever connection or event loop the PUBLISH comes
// through. A proxy that answered a confirmation itself, or forwarded the
// command after answering it, would break that order.
//
// The oracles are the engine's own: PUBLISH's count of receivers, and the
// subscriber's PING afterwards (the engine queues a message for the
// subscriber when it runs PUBLISH, so a message reaches the subscriber
// before the reply to any command it sends after that).

// orderRounds is the number of subscribe/unsubscribe cycles each case
// runs: each is a chance for the order to break, and a cycle is a few
// round trips.
const orderRounds = 150

// TestSubscribeReplyOrdersPublish runs, for channels, patterns and shard
// channels, RESP2 and RESP3, unsubscribing by name and without names, a
// subscriber cycling SUBSCRIBE and UNSUBSCRIBE through the proxy, each
// confirmation read before another connection publishes: through the proxy
// on a connection of its own (likely another event loop) or directly to
// the engine. Every PUBLISH after a SUBSCRIBE confirmation must count the
// subscriber and reach it before its next reply; every PUBLISH after an
// UNSUBSCRIBE confirmation must count no one and never reach it.
func TestSubscribeReplyOrdersPublish(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	for _, fam := range []struct {
		name             string
		sub, unsub, pub  string
		channel, pattern string
	}{
		{"channel", "SUBSCRIBE", "UNSUBSCRIBE", "PUBLISH", "po:ch", ""},
		{"pattern", "PSUBSCRIBE", "PUNSUBSCRIBE", "PUBLISH", "po:pat:x", "po:pat:*"},
		{"shard channel", "SSUBSCRIBE", "SUNSUBSCRIBE", "SPUBLISH", "po:sch", ""},
	} {
		for _, resp3 := range []bool{false, true} {
			for _, byName := range []bool{true, false} {
				name := fmt.Sprintf("%s/resp%d/unsubscribe-all", fam.name, map[bool]int{false: 2, true: 3}[resp3])
				if byName {
					name = fmt.Sprintf("%s/resp%d/unsubscribe-by-name", fam.name, map[bool]int{false: 2, true: 3}[resp3])
				}
				t.Run(name, func(t *testing.T) {
					target := fam.channel
					if fam.pattern != "" {
						target = fam.pattern
					}
					unsub := respCmd(fam.unsub)
					if byName {
						unsub = respCmd(fam.unsub, target)
					}
					// Publishers: two connections through the proxy (with
					// the subscriber's, they cannot all be on one of its
					// two event loops) and one directly to the engine.
					pubs := []*redistest.Conn{redistest.Dial(t, e.paddr), redistest.Dial(t, e.paddr), redistest.Dial(t, e.srv.Addr())}
					publish := func(round int, msg string, want string) {
						t.Helper()
						p := pubs[round%len(pubs)]
						p.Send(t, respCmd(fam.pub, fam.channel, msg))
						got, err := p.ReadFrame(5 * time.Second)
						if err != nil || string(got) != want {
							t.Fatalf("round %d: %s %s %s (publisher %d of %d): got %q (%v), want %q", round, fam.pub, fam.channel, msg, round%len(pubs)+1, len(pubs), got, err, want)
						}
					}
					var sub *redistest.Conn
					for round := range orderRounds {
						if round%10 == 0 {
							// A fresh subscriber now and then, which has sent
							// an ordinary command first (under shared
							// connections: from a shared connection).
							if sub != nil {
								_ = sub.Close()
							}
							sub = redistest.Dial(t, e.paddr)
							if resp3 {
								hello3(t, sub)
							}
							sub.Roundtrip(t, respCmd("GET", "po:k"), nilReply(resp3))
						}
						sub.Send(t, respCmd(fam.sub, target))
						if f, err := sub.ReadFrame(5 * time.Second); err != nil || !bytes.Contains(f, []byte(strings.ToLower(fam.sub))) || !bytes.HasSuffix(f, []byte(":1\r\n")) {
							t.Fatalf("round %d: %s %s: got %q (%v), want its confirmation with count 1", round, fam.sub, target, f, err)
						}
						in := fmt.Sprintf("in-%d", round)
						publish(round, in, ":1\r\n")
						if frames := framesBeforePong(t, sub, resp3); len(frames) != 1 || !bytes.Contains(frames[0], []byte(in)) {
							t.Fatalf("round %d: after %s's confirmation and a %s counting it (publisher %d), the subscriber got %q before its PING reply: want the message %q", round, fam.sub, fam.pub, round%len(pubs)+1, frames, in)
						}
						sub.Send(t, unsub)
						if f, err := sub.ReadFrame(5 * time.Second); err != nil || !bytes.Contains(f, []byte("unsubscribe")) || !bytes.HasSuffix(f, []byte(":0\r\n")) {
							t.Fatalf("round %d: %q: got %q (%v), want its confirmation with count 0", round, unsub, f, err)
						}
						out := fmt.Sprintf("out-%d", round)
						publish(round+1, out, ":0\r\n")
						if frames := framesBeforePong(t, sub, resp3); len(frames) != 0 {
							t.Fatalf("round %d: after the UNSUBSCRIBE confirmation, a %s (publisher %d) still reached the subscriber: got %q before its PING reply", round, fam.pub, (round+1)%len(pubs)+1, frames)
						}
					}
				})
			}
		}
	}
	e.healthy(t)
}

// nilReply is GET's reply for a missing key.
func nilReply(resp3 bool) []byte {
	if resp3 {
		return []byte("_\r\n")
	}
	return []byte("$-1\r\n")
}

// framesBeforePong sends PING on c and returns the frames that came before
// its reply (+PONG, or a subscribed RESP2 connection's [pong, ""]).
func framesBeforePong(t *testing.T, c *redistest.Conn, resp3 bool) [][]byte {
	t.Helper()
	c.Send(t, respCmd("PING"))
	var frames [][]byte
	for {
		f, err := c.ReadFrame(5 * time.Second)
		if err != nil {
			t.Fatalf("PING: got %q after %q (%v)", f, frames, err)
		}
		if string(f) == "+PONG\r\n" || string(f) == "*2\r\n$4\r\npong\r\n$0\r\n\r\n" {
			return frames
		}
		frames = append(frames, f)
	}
}

// TestSubscribeReplyOrdersPublishGoRedis is the same order seen by a
// go-redis v9 RESP3 subscriber (PubSub): each confirmation received before
// another go-redis client publishes, through the proxy.
func TestSubscribeReplyOrdersPublishGoRedis(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: e.paddr, Protocol: 3, MaxRetries: -1, DisableIdentity: true,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	pub := e2eGoRedis(t, e.paddr)
	ps := c.Subscribe(ctx)
	t.Cleanup(func() { _ = ps.Close() })
	receive := func(round int, what string) any {
		t.Helper()
		m, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if err != nil {
			t.Fatalf("round %d: %s: %v", round, what, err)
		}
		return m
	}
	for round := range orderRounds {
		for _, step := range []struct {
			kind string
			do   func(context.Context, ...string) error
			n    int64 // the subscriber's count, and the receivers of a PUBLISH after it
		}{{"subscribe", ps.Subscribe, 1}, {"unsubscribe", ps.Unsubscribe, 0}} {
			if err := step.do(ctx, "po:gr"); err != nil {
				t.Fatal(err)
			}
			if m, ok := receive(round, step.kind).(*redis.Subscription); !ok || m.Kind != step.kind || int64(m.Count) != step.n {
				t.Fatalf("round %d: %s: got %#v, want its confirmation with count %d", round, step.kind, m, step.n)
			}
			msg := fmt.Sprintf("%s-%d", step.kind, round)
			if n, err := pub.Publish(ctx, "po:gr", msg).Result(); err != nil || n != step.n {
				t.Fatalf("round %d: PUBLISH after the %s confirmation: %d receivers (%v), want %d", round, step.kind, n, err, step.n)
			}
			if err := ps.Ping(ctx, "p"); err != nil {
				t.Fatal(err)
			}
			if step.n == 1 {
				if m, ok := receive(round, "the message").(*redis.Message); !ok || m.Payload != msg {
					t.Fatalf("round %d: got %#v before the PING reply, want the message %q", round, m, msg)
				}
			}
			if m, ok := receive(round, "PING").(*redis.Pong); !ok {
				t.Fatalf("round %d: after the %s confirmation, got %#v where the PING reply was due", round, step.kind, m)
			}
		}
	}
	e.healthy(t)
}

// TestSessionResetOrdersShards: under --route slots over three engines, a
// client's session spans several shard connections. A command that ends
// subscriptions or tracking on all of them (RESET, CLIENT TRACKING off,
// SUNSUBSCRIBE without names) must be answered only once every one of
// those engines has run it, as one engine answers once it has: a publish
// or write sent to any of them after the client read the reply must find
// the client gone from its subscribers and trackers, and the client must
// get no message or invalidation after the reply. The two shards that are
// not the client's home are reached through a relay that delays each
// direction by relayDelay, so a reply given after the home shard alone
// answered comes well before the others have run the command; publishes
// and writes go directly to the engines.
func TestSessionResetOrdersShards(t *testing.T) {
	t.Parallel()
	const relayDelay = 30 * time.Millisecond
	srvs, addrs := startShards(t, 3)
	topo, _ := routing.EvenSplit(addrs)
	routed := []string{addrs[0], redistest.StartDelayRelay(t, addrs[1], relayDelay), redistest.StartDelayRelay(t, addrs[2], relayDelay)}
	chans := []string{keyOn(t, topo, "rs:sch:", 0), keyOn(t, topo, "rs:sch:", 1), keyOn(t, topo, "rs:sch:", 2)}
	keys := []string{keyOn(t, topo, "rs:k:", 0), keyOn(t, topo, "rs:k:", 1), keyOn(t, topo, "rs:k:", 2)}
	probes := []string{keyOn(t, topo, "rs:probe:", 0), keyOn(t, topo, "rs:probe:", 1), keyOn(t, topo, "rs:probe:", 2)} // never written
	pubs := []*redistest.Conn{redistest.Dial(t, addrs[0]), redistest.Dial(t, addrs[1]), redistest.Dial(t, addrs[2])}
	do := func(t *testing.T, i int, want string, args ...string) {
		t.Helper()
		pubs[i].Send(t, respCmd(args...))
		if got, err := pubs[i].ReadFrame(5 * time.Second); err != nil || string(got) != want {
			t.Fatalf("%v directly on shard %d: got %q (%v), want %q", args, i, got, err, want)
		}
	}
	for _, mode := range []string{proxy.UpstreamPrivate, proxy.UpstreamShared} {
		p, _ := startRouted(t, proxy.RouteSlots, routed, func(c *proxy.Config) { c.UpstreamMode = mode })
		// homeClient dials until the proxy gives a client shard 0 (the one
		// without a relay) as its home: the shard whose reply it gets to a
		// connection-state command.
		homeClient := func(t *testing.T, resp3 bool) *redistest.Conn {
			t.Helper()
			for i := range 12 {
				c := redistest.Dial(t, p.Addr())
				if resp3 {
					hello3(t, c)
				}
				name := fmt.Sprintf("rs-%s-%d", mode, i)
				c.Roundtrip(t, respCmd("CLIENT", "SETNAME", name), []byte("+OK\r\n"))
				if len(engineClients(srvs[0], "name="+name)) == 1 {
					return c
				}
				_ = c.Close()
			}
			t.Fatal("no client of 12 got shard 0 as its home")
			return nil
		}
		flush := func(t *testing.T) {
			for i := range srvs {
				do(t, i, "+OK\r\n", "FLUSHALL")
			}
		}
		t.Run(mode+"/pubsub", func(t *testing.T) {
			flush(t)
			for _, end := range []string{"RESET", "SUNSUBSCRIBE"} {
				for round := range 2 {
					c := homeClient(t, round%2 == 1)
					for i, ch := range chans {
						c.Send(t, respCmd("SSUBSCRIBE", ch))
						if f, err := c.ReadFrame(5 * time.Second); err != nil || !bytes.HasSuffix(f, []byte(fmt.Sprintf(":%d\r\n", i+1))) {
							t.Fatalf("SSUBSCRIBE %s: got %q (%v)", ch, f, err)
						}
					}
					for i, ch := range chans {
						do(t, i, ":1\r\n", "SPUBLISH", ch, "in")
					}
					// The shards' messages come as their connections
					// deliver them, not ordered with the home shard's PING
					// reply (see docs/routing.md, Known limits).
					for n := 0; n < len(chans); {
						f, err := c.ReadFrame(5 * time.Second)
						if err != nil {
							t.Fatalf("%s round %d: %d of the 3 messages (%v)", end, round, n, err)
						}
						if bytes.Contains(f, []byte("smessage")) {
							n++
						}
					}
					c.Send(t, respCmd("PING"))
					if f, err := c.ReadFrame(5 * time.Second); err != nil || !bytes.Contains(bytes.ToLower(f), []byte("pong")) {
						t.Fatalf("%s round %d: PING: got %q (%v)", end, round, f, err)
					}
					switch end {
					case "RESET":
						c.Roundtrip(t, respCmd("RESET"), []byte("+RESET\r\n"))
					default:
						c.Send(t, respCmd("SUNSUBSCRIBE"))
						for range chans {
							if f, err := c.ReadFrame(5 * time.Second); err != nil || !bytes.Contains(f, []byte("sunsubscribe")) {
								t.Fatalf("SUNSUBSCRIBE: got %q (%v)", f, err)
							}
						}
					}
					for i, ch := range chans {
						do(t, i, ":0\r\n", "SPUBLISH", ch, "out")
					}
					if frames := framesBeforeReads(t, c, probes, round%2 == 1 && end != "RESET"); len(frames) != 0 {
						t.Fatalf("%s round %d: after its reply, the client got %q", end, round, frames)
					}
					_ = c.Close()
				}
			}
		})
		t.Run(mode+"/tracking", func(t *testing.T) {
			flush(t)
			for round := range 2 {
				c := homeClient(t, true)
				c.Roundtrip(t, respCmd("CLIENT", "TRACKING", "on"), []byte("+OK\r\n"))
				for _, k := range keys {
					c.Roundtrip(t, respCmd("GET", k), []byte("_\r\n"))
				}
				off := respCmd("CLIENT", "TRACKING", "off")
				if round%2 == 1 {
					off = respCmd("RESET")
				}
				c.Send(t, off)
				if f, err := c.ReadFrame(5 * time.Second); err != nil || string(f) != "+OK\r\n" && string(f) != "+RESET\r\n" {
					t.Fatalf("%q: got %q (%v)", off, f, err)
				}
				for i, k := range keys {
					do(t, i, "+OK\r\n", "SET", k, "v")
				}
				if frames := framesBeforeReads(t, c, probes, round%2 == 0); len(frames) != 0 {
					t.Fatalf("round %d: after %q's reply and a write on every shard, the client got %q", round, off, frames)
				}
				for i, k := range keys {
					do(t, i, ":1\r\n", "DEL", k)
				}
				_ = c.Close()
			}
		})
	}
}

// framesBeforeReads sends GET of each of keys (keys never written, one on
// each shard) on c and returns the frames that came before their replies: a
// message or push a shard's connection sent before its GET reply comes
// before that reply.
func framesBeforeReads(t *testing.T, c *redistest.Conn, keys []string, resp3 bool) [][]byte {
	t.Helper()
	for _, k := range keys {
		c.Send(t, respCmd("GET", k))
	}
	var frames [][]byte
	for n := 0; n < len(keys); {
		f, err := c.ReadFrame(5 * time.Second)
		if err != nil {
			t.Fatalf("GET %v: got %q after %q (%v)", keys, f, frames, err)
		}
		if bytes.Equal(f, nilReply(resp3)) {
			n++
			continue
		}
		frames = append(frames, f)
	}
	return frames
}

// TestQuitEndsSubscriptions: a subscriber's QUIT closes its engine
// connections before the client reads +OK (its own in every shape: under
// shared connections a subscriber has moved to private ones; under --route
// slots each shard's engine answers QUIT), so a PUBLISH sent by another
// connection after +OK counts no receiver, as directly (checked on the
// engine too).
func TestQuitEndsSubscriptions(t *testing.T) {
	t.Parallel()
	e := e2eSetup(t)
	for _, tg := range e.targets() {
		t.Run(tg.name, func(t *testing.T) { quitEndsSubscriptions(t, e, tg.addr) })
	}
	e.healthy(t)
}

func quitEndsSubscriptions(t *testing.T, e *e2eEnv, addr string) {
	pubs := []*redistest.Conn{redistest.Dial(t, e.paddr), redistest.Dial(t, e.srv.Addr())}
	for round := range orderRounds {
		sub := redistest.Dial(t, addr)
		if round%2 == 1 {
			hello3(t, sub)
		}
		sub.Send(t, respCmd("SUBSCRIBE", "po:quit"))
		if f, err := sub.ReadFrame(5 * time.Second); err != nil || !bytes.HasSuffix(f, []byte(":1\r\n")) {
			t.Fatalf("round %d: SUBSCRIBE: got %q (%v)", round, f, err)
		}
		sub.Roundtrip(t, respCmd("QUIT"), []byte("+OK\r\n"))
		p := pubs[round%len(pubs)]
		p.Send(t, respCmd("PUBLISH", "po:quit", "after"))
		if got, err := p.ReadFrame(5 * time.Second); err != nil || string(got) != ":0\r\n" {
			t.Fatalf("round %d: PUBLISH after the subscriber read QUIT's +OK (publisher %d): got %q (%v), want :0", round, round%len(pubs)+1, got, err)
		}
		_ = sub.Close()
	}
}

// hello3 switches c to RESP3.
func hello3(t *testing.T, c *redistest.Conn) {
	t.Helper()
	c.Send(t, respCmd("HELLO", "3"))
	if f, err := c.ReadFrame(5 * time.Second); err != nil || len(f) == 0 || f[0] != resp.TypeMap {
		t.Fatalf("HELLO 3: %q %v", f, err)
	}
}
