package proxy

import (
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/respmeter/respmeter/metrics/slowlog"
	"github.com/respmeter/respmeter/routing/command"
)

// outputGuard applies the client output limit the way Redis's
// client-output-buffer-limit does with a hard and a soft limit: replies
// queued beyond the hard limit (limit + outputSlack, at most 2 x limit)
// evict at once; beyond the limit they evict when the client has taken
// none of its queued bytes for outputStall (it is not reading) or when
// they stay there for 1 s. A client that reads a large reply as fast as it
// can passes over the limit briefly (the engine writes faster than a
// client reads, and gnet cannot pause reading the engine) but keeps taking
// bytes. The hard limit is what bounds memory: a client that stops reading
// while the engine streams it large replies can receive far more than
// outputSlack during outputStall (gnet holds queued bytes in power-of-two
// chunks: up to twice their size in memory).
type outputGuard struct {
	overSince time.Time // when the queued replies went over the limit
	moved     time.Time // when the client was last seen taking queued replies
	prev      int       // gnet's queued bytes after the last write
}

// outputStall is how long a client over the output limit may go without
// taking any of its queued replies before it is evicted.
const outputStall = 100 * time.Millisecond

// outputSlack is how far beyond the output limit a client's queued replies
// may go before it is evicted at once: a fixed overhead over the limit, not
// a multiple of it (docs/cases.md F-02: memory stays under the limit plus
// a small fixed overhead). A single reply larger than limit + outputSlack
// evicts its client, as it would under Redis's hard limit.
const outputSlack = 16 << 20

// exceeded is called after added bytes were written to a client: queued is
// what gnet holds for it, held what the proxy holds besides (replies
// waiting behind slower shards). It reports whether the client must be
// evicted. Under the limit it reads no clock.
func (g *outputGuard) exceeded(queued, held, added, lim int) bool {
	moved := queued < g.prev+added // the socket took queued bytes since the last write
	g.prev = queued
	n := queued + held
	if n <= lim {
		g.overSince, g.moved = time.Time{}, time.Time{}
		return false
	}
	now := time.Now()
	if moved || g.moved.IsZero() {
		g.moved = now
	}
	switch {
	case n > lim+min(lim, outputSlack), now.Sub(g.moved) > outputStall:
		return true
	case g.overSince.IsZero():
		g.overSince = now
	}
	return now.Sub(g.overSince) > time.Second
}

// slowRec records one command, labelled name (its metric label,
// routing.Resolver.Name), in the slow log from its stamps (ns on the
// proxy's clock): t_in, t_sent, t_reply and t_out, and its service time
// (ns). It allocates nothing: under load every command may be slow.
func slowRec(sl *slowlog.Log, name string, argc int32, clientName string, peer net.Addr, key *slowlog.KeyBuf,
	tIn, tSent, tReply, tOut, svc, inj int64, rule string) {
	r := slowlog.Rec{
		Command:    name,
		Args:       int(argc),
		ClientName: clientName,
		Key:        *key,
		Total:      time.Duration(tOut - tIn),
		Upstream:   time.Duration(tReply - tSent),
		Service:    time.Duration(svc),
		Injected:   time.Duration(inj),
		Rule:       rule,
	}
	if a, ok := peer.(*net.TCPAddr); ok {
		ap := a.AddrPort() // an IPv4 peer comes as ::ffff:a.b.c.d
		r.Client = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	sl.Record(&r)
}

// setNameArg returns the client name a CLIENT SETNAME or HELLO ... SETNAME
// request sets, and true. HELLO's options are parsed in order as Redis
// does (HELLO [protover [AUTH username password] [SETNAME clientname]]),
// so AUTH's arguments are never mistaken for a name; the last SETNAME wins.
func setNameArg(id command.ID, args [][]byte) ([]byte, bool) {
	switch {
	case id == command.Client && len(args) == 3 && eqFold(args[1], "setname"):
		return args[2], true
	case id == command.Hello:
		var name []byte
		found := false
		for i := 2; i < len(args); {
			switch {
			case eqFold(args[i], "auth") && i+2 < len(args):
				i += 3
			case eqFold(args[i], "setname") && i+1 < len(args):
				name, found = args[i+1], true
				i += 2
			default:
				i = len(args)
			}
		}
		return name, found
	}
	return nil, false
}

// blockWait returns how long the engine may keep blocking command id with
// arguments args waiting on purpose, in nanoseconds: its timeout argument
// (seconds for BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BZPOPMIN, BZPOPMAX (last
// argument), BLMPOP and BZMPOP (first); milliseconds for XREAD and
// XREADGROUP BLOCK, WAIT (last)), -1 when it may wait forever
// (a timeout of 0, one it cannot read, or a blocking command not listed here, such as WAITAOF, which the built-in table lacks), 0 when it does not block (XREAD
// without BLOCK). The rules are the commands' own, from the Redis 7.0
// command reference.
func blockWait(id command.ID, args [][]byte) int64 {
	if len(args) < 2 {
		return -1
	}
	var arg []byte
	unit := float64(time.Second)
	switch id {
	case command.Blpop, command.Brpop, command.Brpoplpush, command.Blmove, command.Bzpopmin, command.Bzpopmax:
		arg = args[len(args)-1]
	case command.Blmpop, command.Bzmpop:
		arg = args[1]
	case command.Wait:
		arg, unit = args[len(args)-1], float64(time.Millisecond)
	case command.Xread, command.Xreadgroup:
		for i := 1; i+1 < len(args); i++ {
			if eqFold(args[i], "streams") {
				return 0
			}
			if eqFold(args[i], "block") {
				arg, unit = args[i+1], float64(time.Millisecond)
				break
			}
		}
		if arg == nil {
			return 0
		}
	default:
		return -1
	}
	v, err := strconv.ParseFloat(string(arg), 64)
	if err != nil || v <= 0 {
		return -1 // 0 waits forever; a bad one is refused by the engine at once
	}
	return int64(v * unit)
}

// Reply modes set by CLIENT REPLY (https://redis.io/commands/client-reply).
const (
	replyOn uint8 = iota
	replyOff
	replySkipNext
)

// Subscription families; a confirmation's count is per family set as in
// redis-server 7.0 pubsub.c: channels and patterns share one count
// (clientSubscriptionsCount), shard channels have their own.
const (
	famChan uint8 = iota + 1
	famPat
	famShard
)

// eqFold reports whether b equals the lower-case ASCII word w, ignoring case.
func eqFold(b []byte, w string) bool {
	if len(b) != len(w) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}
