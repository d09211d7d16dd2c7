package proxy

import (
	"context"
	"errors"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"gopkg.in/yaml.v3"

	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/routing"
)

// Cluster events (rules with a migrate: or failover: effect): they change
// the slot map respmeter routes by (router.view, the map of --shards)
// when their window opens or ends, and what the facade announces
// (Proxy.annc), as a Redis Cluster's resharding and failover do (Redis
// Cluster specification, "Redirection and resharding", "Replica
// election and promotion"):
//
//   - migrate: when the window opens the rule's slots get the target
//     (to:) as their owner in the routing map and the keys of those
//     slots are moved there (moveKeys: SCAN and MIGRATE, as redis-cli
//     --cluster reshard); the facade still announces the old owner, whose
//     virtual node answers the slots' requests with -ASK to the target's
//     node, which serves them after ASKING. When the window ends the
//     announced layout catches up (at once, or announce_after later), so
//     the old owner's node answers -MOVED and cluster clients refresh.
//     Slot routing sends the slots' requests to the target from the start.
//   - failover: the rule's shard is frozen for the window (its requests
//     held, as a delay up to the window's end); when the window ends the
//     new address (to:) is promoted if it is a replica (REPLICAOF NO ONE,
//     once it has the master's writes), then every slot of the shard is
//     the new address's, announced at once or announce_after later, and
//     the held requests are routed by the new map.
//
// The events of one rule run once each (topoEvent.opened, ending), from a
// timer armed when the rule is applied or from a request that finds the
// window over first (settle), so the map has changed before a request of
// the new window is routed; the requests a failover froze wait for its
// end (releaseFrozen).

// topoEvent is the cluster event of a migrate: or failover: rule.
type topoEvent struct {
	to    string // the target shard (migrate) or the new address (failover)
	late  int64  // announce_after, ns: how long the old layout is announced after the change
	shard string // failover: the shard failed over (the rule's one shards: entry)
	// opened: the window's opening has been applied; ending: its end is
	// being applied (a failover promotes its new address first); closed:
	// the end has been applied.
	opened, ending, closed atomic.Bool
	timers                 []*time.Timer
}

// announce is the layout the facade announces (CLUSTER SLOTS, SHARDS,
// NODES) while it differs from the routing map: the old layout v until
// until (ns on the proxy's clock; math.MaxInt64 while a migration runs),
// and the slot ranges being migrated, answered -ASK by their announced
// owner. Immutable; Proxy.annc holds the current one (nil: announce the
// routing map).
type announce struct {
	v     *topoView
	until int64
	ask   []askRange
}

// askRange is a range of slots a migrate rule moves.
type askRange struct {
	lo, hi uint16
	rule   *injRule
}

// asking returns the migrate rule that moves slot, or nil.
func (a *announce) asking(slot uint16) *injRule {
	for _, r := range a.ask {
		if slot >= r.lo && slot <= r.hi {
			return r.rule
		}
	}
	return nil
}

// announced returns the layout the facade announces now: v, the routing
// map, unless an old layout is announced still.
func (p *Proxy) announced(v *topoView) *topoView {
	if a := p.annc.Load(); a != nil && p.now() < a.until {
		return a.v
	}
	return v
}

// parseTopoEvent reads migrate: {to: HOST:PORT, announce_after: 5s} or
// failover: (the same keys).
func parseTopoEvent(key string, n *yaml.Node, fail failFunc) (*topoEvent, error) {
	want := key + ": want a mapping with to: HOST:PORT (and announce_after: a duration)"
	if n.Kind != yaml.MappingNode {
		return nil, fail(n, want)
	}
	ev := &topoEvent{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "to":
			if h, p, err := net.SplitHostPort(v.Value); v.Kind != yaml.ScalarNode || err != nil || h == "" || p == "" {
				return nil, fail(v, "%s: to: %q is not host:port", key, v.Value)
			}
			ev.to = v.Value
		case "announce_after":
			d, err := time.ParseDuration(v.Value)
			if v.Kind != yaml.ScalarNode || err != nil || d < 0 {
				return nil, fail(v, "%s: announce_after: want a duration of 0 or more, got %q", key, v.Value)
			}
			ev.late = int64(d)
		default:
			return nil, fail(k, "%s: unknown key %q (want to, announce_after)", key, k.Value)
		}
	}
	if ev.to == "" {
		return nil, fail(n, want)
	}
	return ev, nil
}

// checkTopoRule checks the scope of a migrate: or failover: rule: a window
// with an end, and migrate's slots: or failover's one shard as the only
// scope.
func checkTopoRule(r *injRule, n *yaml.Node, fail failFunc) error {
	key := r.effect.String()
	if r.dur == 0 {
		return fail(n, "rule %q: %s needs for: (the migration or the freeze lasts that long)", r.name, key)
	}
	if r.cmds != nil || r.cats != nil || r.keys != nil || r.cliNets != nil || r.cliAddrs != nil ||
		r.cliNames != nil || r.flag != 0 || r.prob < 1 || r.perConn {
		return fail(n, "rule %q: %s takes no scope but %s", r.name, key, map[bool]string{true: "slots:", false: "shards:"}[r.effect == effMigrate])
	}
	if r.effect == effMigrate {
		if !r.inSlots || r.shards != nil {
			return fail(n, "rule %q: migrate needs slots: [from, to] and no shards:", r.name)
		}
		return nil
	}
	if r.inSlots || len(r.shards) != 1 {
		return fail(n, "rule %q: failover needs shards: with one address and no slots:", r.name)
	}
	if r.shards[0] == r.topo.to {
		return fail(n, "rule %q: failover: to: is the shard itself", r.name)
	}
	r.topo.shard = r.shards[0]
	return nil
}

// checkTopoRules refuses cluster events where respmeter does not own the
// slot map: they need --route slots or facade over --shards.
func (p *Proxy) checkTopoRules(in *Injection) error {
	for i, r := range in.rules {
		if r.topo == nil {
			continue
		}
		if p.router.cluster || (p.cfg.Route != RouteSlots && p.cfg.Route != RouteFacade) {
			return errors.New(in.file + ":" + strconv.Itoa(r.line) + ": rules[" + strconv.Itoa(i) + "]: rule " + strconv.Quote(r.name) + ": " + r.effect.String() +
				" needs route slots or facade over shards (respmeter's own slot map)")
		}
	}
	return nil
}

// armTopo arms the timers of in's cluster events, once in is applied.
func (p *Proxy) armTopo(in *Injection) {
	for _, r := range in.rules {
		if r.topo == nil {
			continue
		}
		now := p.now()
		ru := r
		r.topo.timers = append(r.topo.timers,
			time.AfterFunc(time.Duration(max(r.from-now, 0)), func() { p.settle(ru, p.now()) }),
			time.AfterFunc(time.Duration(max(r.from+r.span-now, 0)), func() { p.settle(ru, p.now()) }))
	}
}

// disarmTopo stops the timers of the cluster events of rules. An event
// already applied stays: a migration or failover is not undone.
func disarmTopo(rules []*injRule) {
	for _, r := range rules {
		if r.topo == nil {
			continue
		}
		for _, t := range r.topo.timers {
			t.Stop()
		}
	}
}

// removeTopo stops the timers of rule r's cluster event, if it has one;
// if its window has opened and not ended, it ends now: a migration
// completes, a frozen shard fails over.
func (p *Proxy) removeTopo(r *injRule) {
	if r.topo == nil {
		return
	}
	disarmTopo([]*injRule{r})
	if r.topo.opened.Load() {
		p.endTopo(r)
	}
}

// endTopo applies the end of ru's window, once: at once for a migration;
// for a failover once its new address is promoted (promote, on a goroutine
// of its own: the frozen requests wait for it, releaseFrozen).
func (p *Proxy) endTopo(ru *injRule) {
	ev := ru.topo
	if !ev.ending.CompareAndSwap(false, true) {
		return
	}
	end := func() {
		p.topoMu.Lock()
		p.topoEnd(ru, p.now())
		p.topoMu.Unlock()
		ev.closed.Store(true)
	}
	if ru.effect == effMigrate {
		end()
		return
	}
	go func() {
		p.promote(ev.shard, ev.to)
		end()
	}()
}

// releaseFrozen resumes s, whose request a failover rule ru froze (gen:
// the delay's number), once the failover is over: the window's end applied
// (endTopo), so that the request is routed by the new map. Until then it
// looks again every millisecond; that wait past the window's end (the
// promotion's) is respmeter's time, not injected. On s's loop.
func (s *client) releaseFrozen(ru *injRule, gen uint64) {
	if !ru.topo.closed.Load() {
		s.p.settle(ru, s.p.now())
		el := s.conn.EventLoop()
		time.AfterFunc(time.Millisecond, func() {
			_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
				s.releaseFrozen(ru, gen)
				return nil
			})) // an error: the loop is stopping
		})
		return
	}
	if !s.gone() && s.paused == pauseInject && s.injGen == gen {
		s.resume()
	}
}

// settle applies the events of rule ru due at now (ns on the proxy's
// clock): the opening of its window, its end, or both, each once.
func (p *Proxy) settle(ru *injRule, now int64) {
	ev := ru.topo
	if now >= ru.from && ev.opened.CompareAndSwap(false, true) && ru.effect == effMigrate {
		p.topoMu.Lock()
		p.migrateStart(ru)
		p.topoMu.Unlock()
	}
	if now-ru.from >= ru.span && ev.opened.Load() {
		p.endTopo(ru)
	}
}

// migrateStart gives ru's slots to its target in the routing map, keeps
// the old layout announced with those slots answered -ASK, and moves
// their keys. Under topoMu.
func (p *Proxy) migrateStart(ru *injRule) {
	cur := p.router.load()
	next := newTopoView(cur.t.WithSlots(ru.slotLo, ru.slotHi, ru.topo.to))
	a := &announce{v: cur, until: math.MaxInt64}
	if old := p.annc.Load(); old != nil && p.now() < old.until {
		a.v, a.ask = old.v, slices.Clone(old.ask)
	}
	a.ask = append(a.ask, askRange{ru.slotLo, ru.slotHi, ru})
	p.annc.Store(a)
	p.router.view.Store(next)
	p.log.Info("inject: slots migrating", "rule", ru.name, "slots", strconv.Itoa(int(ru.slotLo))+"-"+strconv.Itoa(int(ru.slotHi)), "to", ru.topo.to)
	go p.moveKeys(ru, cur)
}

// topoEnd ends ru's window: a migration's slots are announced as the
// target's (after announce_after); a frozen shard's slots become the new
// address's. Under topoMu.
func (p *Proxy) topoEnd(ru *injRule, now int64) {
	ev := ru.topo
	cur := p.router.load()
	old := p.annc.Load()
	a := &announce{v: cur, until: now + ev.late}
	if old != nil && now < old.until {
		a.v, a.until = old.v, max(old.until, a.until)
		for _, r := range old.ask {
			if r.rule != ru {
				a.ask = append(a.ask, r)
			}
		}
		if len(a.ask) == 0 && old.until == math.MaxInt64 {
			a.until = now + ev.late // the last migration over
		}
	}
	if ru.effect == effMigrate {
		go p.moveKeys(ru, p.router.load()) // what was written to the source meanwhile
	} else if sh := cur.t.Index(ev.shard); sh >= 0 {
		t := cur.t
		for _, r := range cur.t.Ranges(sh) {
			t = t.WithSlots(r[0], r[1], ev.to)
		}
		p.router.view.Store(newTopoView(t))
		p.log.Info("inject: shard failed over", "rule", ru.name, "shard", ev.shard, "to", ev.to)
	}
	if a.until <= now && len(a.ask) == 0 {
		a = nil
	}
	p.annc.Store(a)
	if p.facade != nil {
		p.facade.warnUnnoded(p)
	}
}

// moveKeys moves the keys of ru's slots from the shards that owned them in
// from (the map before the migration) to its target: SCAN each source, and
// MIGRATE each key of those slots (Redis's MIGRATE, without REPLACE: a key
// the target has already was written there since, through the migration,
// and the source's older copy is deleted).
func (p *Proxy) moveKeys(ru *injRule, from *topoView) {
	seen := map[int]bool{}
	for s := int(ru.slotLo); s <= int(ru.slotHi); s++ {
		sh := from.t.Shard(uint16(s))
		if sh < 0 || seen[sh] || from.t.Addrs[sh] == ru.topo.to {
			continue
		}
		seen[sh] = true
		if err := p.moveShardKeys(from.t.Addrs[sh], ru); err != nil {
			p.log.Warn("inject: moving keys failed", "rule", ru.name, "from", from.t.Addrs[sh], "to", ru.topo.to, "err", err)
		}
	}
}

func (p *Proxy) moveShardKeys(src string, ru *injRule) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := p.cfg.login()
	c, err := respconn.Dial(ctx, src, opts)
	if err != nil {
		return err
	}
	defer c.Close()
	host, port, _ := net.SplitHostPort(ru.topo.to)
	mig := []string{"MIGRATE", host, port, "", "0", "5000"}
	var auth []string
	switch {
	case opts.Password != "" && opts.User != "":
		auth = []string{"AUTH2", opts.User, opts.Password}
	case opts.Password != "":
		auth = []string{"AUTH", opts.Password}
	}
	cursor := "0"
	for {
		v, err := c.Do(5*time.Second, "SCAN", cursor, "COUNT", "1000")
		if err != nil {
			return err
		}
		if err := v.Err(); err != nil || len(v.Elems) != 2 {
			return errors.New("SCAN: unexpected reply")
		}
		cursor = v.Elems[0].Str
		var keys []string
		for _, k := range v.Elems[1].Elems {
			if sl := routing.Slot([]byte(k.Str)); sl >= ru.slotLo && sl <= ru.slotHi {
				keys = append(keys, k.Str)
			}
		}
		if len(keys) > 0 {
			cmds := make([][]string, len(keys))
			for i, k := range keys {
				cmds[i] = slices.Concat(mig, auth, []string{"KEYS", k})
			}
			rs, err := c.Pipeline(30*time.Second, cmds...)
			if err != nil {
				return err
			}
			var stale [][]string
			for i, r := range rs {
				if r.IsError() {
					if !strings.Contains(r.Str, "BUSYKEY") { // "ERR Target instance replied with error: BUSYKEY ..."
						return errors.New("MIGRATE " + keys[i] + ": " + r.Str)
					}
					stale = append(stale, []string{"DEL", keys[i]})
				}
			}
			if len(stale) > 0 {
				if _, err := c.Pipeline(5*time.Second, stale...); err != nil {
					return err
				}
			}
		}
		if cursor == "0" {
			return nil
		}
	}
}

// promote makes to, the new address of a failover, a master: when it is
// a replica, once its replication offset has reached the master's
// (shard, frozen by the rule: no new writes reach it) and stays put,
// REPLICAOF NO ONE, as a Sentinel or a cluster replica's election does.
// Waits at most 2 s for the offset.
func (p *Proxy) promote(shard, to string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := p.cfg.login()
	c, err := respconn.Dial(ctx, to, opts)
	if err != nil {
		p.log.Warn("inject: failover: cannot reach the new master", "to", to, "err", err)
		return
	}
	defer c.Close()
	info := func(c *respconn.Conn, field string) string {
		v, err := c.Do(5*time.Second, "INFO", "replication")
		if err != nil || v.IsError() {
			return ""
		}
		for _, l := range strings.Split(v.Str, "\n") {
			if val, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
				return val
			}
		}
		return ""
	}
	if info(c, "role") != "slave" {
		return // a master already
	}
	// Writes sent before the freeze may still be on their way to the
	// master: wait until its offset stays put 50 ms and the replica has
	// reached it.
	if m, err := respconn.Dial(ctx, shard, opts); err == nil {
		offset := func(c *respconn.Conn, field string) int64 {
			n, _ := strconv.ParseInt(info(c, field), 10, 64)
			return n
		}
		for end, want := time.Now().Add(2*time.Second), int64(-1); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			got := offset(m, "master_repl_offset")
			if got == want && offset(c, "slave_repl_offset") >= want {
				break
			}
			want = got
		}
		_ = m.Close()
	}
	if v, err := c.Do(5*time.Second, "REPLICAOF", "NO", "ONE"); err != nil || v.IsError() {
		p.log.Warn("inject: failover: REPLICAOF NO ONE failed", "to", to)
		return
	}
	p.log.Info("inject: failover: promoted", "to", to)
}
