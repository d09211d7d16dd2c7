package proxy

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"

	"github.com/respmeter/respmeter/routing"
	"github.com/respmeter/respmeter/routing/command"
)

// Fault injection: a rule file (Config.Inject, `respmeter proxy --inject
// FILE`) names rules; each request is matched against them, in file order,
// before it is routed, and the first rule whose scope it is in applies its
// effect:
//
//   - delay: the request is held for a duration (fixed, or drawn from a
//     uniform, normal, lognormal or Pareto distribution) and then routed
//     as any other. The client is paused meanwhile (pauseInject), as for
//     a pause of needsPause: its later requests wait behind it, so none
//     overtakes it, and a timer re-enters the event loop when it is due;
//     the loop serves other clients in between. The time the rule asked
//     for is the request's injected phase; the timer's lateness past it
//     is proxy time (respmeter's own). A request read in the same batch
//     as a delayed one and held behind it counts its wait as injected too.
//   - error: the request is answered with the rule's error reply and never
//     forwarded (a rule can only answer with an error: a command the
//     engine did not see never gets a success reply). With retry: a
//     -TRYAGAIN is retried by routing as an engine's is (tryAgain): the
//     request is held for link.tryAgain's back-off and then matched
//     against the rule again, up to maxTryAgain times; its waits are
//     booked as an engine's -TRYAGAIN's (bookRetried), not injected.
//   - timeout: the request is held and never answered, nor is anything
//     the client sends after it, until the client closes its connection.
//   - reply_delay: the request is forwarded at once; its reply, once the
//     engine's is in, is held for the drawn duration (holdReply) before
//     it goes to the client. The engine's time stays the engine's; the
//     hold is the request's injected phase, as is the wait of the
//     replies ready behind it (they keep their order).
//   - reset: the client's connection is closed with a TCP RST (SO_LINGER
//     0, as Toxiproxy's reset_peer), the request not forwarded.
//   - bandwidth, slicer: the request is forwarded at once; its reply
//     goes to the client paced (injwire.go: at a rate, or in slices a
//     delay apart, as Toxiproxy's bandwidth and slicer toxics pace a
//     connection's downstream). The pacing is the request's injected
//     phase, as a reply delay's hold is. Upstream (direction:), the
//     request is held as a delay's until its last byte or slice would
//     have passed (paceRequest), then forwarded whole.
//   - migrate, failover: cluster events on respmeter's own slot map
//     (injtopo.go): a slot range moved to another shard (-ASK through the
//     facade while it runs, then -MOVED), a shard frozen for the window
//     and then failed over to another address.
//
// A probability is drawn per request, or (per: connection) once per
// connection: a pure function of the seed, the rule's name and the
// connection's number (the order the proxy accepted it), so the same
// connections are chosen again in a run that connects in the same order.
//
// A rule may hold only in a window, at: and for: (timed steps of a
// scenario), counted from when its rules are applied: Config.Inject when
// the proxy is made (New), a set added by AddInjection when it is added.
// Applying puts the window on the proxy's clock (injRule.place); a request
// is in it by when it was read, and a rule outside it costs one compare
// (injRule.inWindow).
//
// With no rules Proxy.inject holds nil, and the client pays one load and
// one branch per request (client.route). The rules in force change at run
// time (AddInjection, RemoveInjection: the admin API's /inject) by
// swapping in a new Injection; a request is matched against the set it
// loaded.

// Injection is a parsed rule file. Load one with LoadInjection or
// ParseInjection; it is read-only once in use, but for its counters
// (Counts).
type Injection struct {
	rules []*injRule
	seed  uint64
	// base is the proxy's clock zero once the rules are applied (apply):
	// Counts reads the windows' wall-clock times and the time now from it.
	base time.Time
	// names: a rule is scoped by client name, so the proxy keeps each
	// client's name (CLIENT SETNAME, HELLO SETNAME) with or without the
	// slow log.
	names bool
	// file names the rule file in errors (ParseInjection's name).
	file string
}

// injEffect is what a rule does to a request it matches.
type injEffect uint8

const (
	effDelay injEffect = iota + 1
	effError
	effTimeout
	effReplyDelay
	effReset
	effMigrate   // injtopo.go
	effFailover  // injtopo.go: the shard frozen for the window, then failed over
	effBandwidth // injwire.go: the reply paced at a rate
	effSlicer    // injwire.go: the reply written in slices, a delay apart
)

func (e injEffect) String() string {
	switch e {
	case effDelay:
		return "delay"
	case effError:
		return "error"
	case effTimeout:
		return "timeout"
	case effReplyDelay:
		return "reply_delay"
	case effReset:
		return "reset"
	case effMigrate:
		return "migrate"
	case effFailover:
		return "failover"
	case effBandwidth:
		return "bandwidth"
	case effSlicer:
		return "slicer"
	}
	return "none"
}

type injRule struct {
	name   string
	line   int
	effect injEffect
	// scope: cmds and cats (ACL categories, "@read") match the command's
	// name (lower case; a subcommand also matches by its parent's name);
	// keys, a Redis glob, the first key; prob, a probability in (0, 1].
	cmds []string
	cats []string
	keys []byte
	prob float64
	// perConn: prob is drawn once per connection (connDraw, salted with
	// salt, a hash of the rule's name), not per request.
	perConn bool
	salt    uint64
	// slots: the first key's hash slot in [slotLo, slotHi] (inSlots).
	inSlots        bool
	slotLo, slotHi uint16
	// shards: the address of the shard the request goes to (injShard).
	shards []string
	// clients: the client's address in a prefix or matching a host:port
	// glob, or its name matching a glob; any one of them.
	cliNets  []netip.Prefix
	cliAddrs [][]byte
	cliNames [][]byte
	// flag: the command has this flag (read_only: FlagReadonly, write:
	// FlagWrite), or 0.
	flag command.Flags
	// at, dur: the window as the rule gives it (at:, for:), ns from when
	// its rules are applied; dur 0: to the end. from, span: the window on
	// the proxy's clock (place): a request read at now is in it when
	// now-from, as unsigned, is below span; span is MaxInt64 for no end.
	at, dur    int64
	from, span int64
	delay      dist   // effDelay, effReplyDelay
	reply      []byte // effError: the error reply, "-...\r\n"
	// retry: effError with a -TRYAGAIN reply that respmeter's routing
	// retries as an engine's (client.inject, link.tryAgain's schedule).
	retry bool
	// topo: the cluster event of effMigrate and effFailover (injtopo.go).
	topo *topoEvent
	// wire: the pacing of effBandwidth and effSlicer (injwire.go).
	wire wireRule
	hits atomic.Uint64
}

// InjectCount is one rule in force: what it does, the requests it
// touched, and when it applies.
type InjectCount struct {
	Rule   string `json:"rule"`
	Effect string `json:"effect"` // delay, reply_delay, error, timeout, reset, migrate, failover, bandwidth, slicer
	Count  uint64 `json:"count"`
	// Active: the rule's window holds the time now (a rule without one
	// always does).
	Active bool `json:"active"`
	// Window is the rule's at: and for:, nil when it has neither.
	Window *InjectWindow `json:"window,omitempty"`
}

// InjectWindow is the time window of a rule (at:, for:).
type InjectWindow struct {
	At  float64 `json:"at_seconds"`            // from when its rules were applied
	For float64 `json:"for_seconds,omitempty"` // its length; 0: to the end
	// Start and End are the window's bounds on the wall clock (End nil:
	// no end); zero until the rules are applied.
	Start time.Time  `json:"start"`
	End   *time.Time `json:"end,omitempty"`
}

// Counts returns, per rule in file order, the requests it touched, its
// window and whether the window holds the time now.
func (in *Injection) Counts() []InjectCount {
	var now int64 // not applied: as if at the proxy's clock zero
	if !in.base.IsZero() {
		now = int64(time.Since(in.base))
	}
	out := make([]InjectCount, len(in.rules))
	for i, r := range in.rules {
		out[i] = InjectCount{Rule: r.name, Effect: r.effect.String(), Count: r.hits.Load(), Active: r.inWindow(now)}
		if r.at == 0 && r.dur == 0 {
			continue
		}
		w := &InjectWindow{At: time.Duration(r.at).Seconds(), For: time.Duration(r.dur).Seconds()}
		if !in.base.IsZero() {
			w.Start = in.base.Add(time.Duration(r.from)).UTC()
			if r.dur > 0 {
				end := w.Start.Add(time.Duration(r.dur))
				w.End = &end
			}
		}
		out[i].Window = w
	}
	return out
}

// place puts the rule's window on the proxy's clock, counted from now,
// when its rules are applied.
func (ru *injRule) place(now int64) {
	ru.from, ru.span = now+ru.at, math.MaxInt64
	if ru.dur > 0 {
		ru.span = ru.dur
	}
}

// inWindow reports whether a request read at now (ns on the proxy's
// clock) is in the rule's window, with one compare: before from, now-from
// is negative, so as unsigned at least 1<<63, above any span.
func (ru *injRule) inWindow(now int64) bool { return uint64(now-ru.from) < uint64(ru.span) }

// apply puts the windows of in's rules on the proxy's clock (zero at base),
// counted from now: in is applied now.
func (in *Injection) apply(base time.Time, now int64) {
	in.base = base
	for _, r := range in.rules {
		r.place(now)
	}
}

// String returns the rule's name, or "" for nil.
func (ru *injRule) String() string {
	if ru == nil {
		return ""
	}
	return ru.name
}

// Hits returns the requests rule i (file order, as Counts) touched.
func (in *Injection) Hits(i int) uint64 { return in.rules[i].hits.Load() }

// dist is a delay distribution; durations in nanoseconds.
type dist struct {
	kind string // fixed, uniform, normal, lognormal, pareto, hdr_log
	// fixed: a; uniform: [a, b); normal: mean a, standard deviation b;
	// lognormal: median a, sigma s (of the logarithm); pareto: scale
	// (minimum) a, shape s.
	a, b float64
	s    float64
	// hdr_log: the recorded distribution drawn from (injhdr.go).
	hdr *hdrDist
}

// sample draws one delay (ns, at least 0).
func (d *dist) sample(r *rand.Rand) int64 {
	var v float64
	switch d.kind {
	case "fixed":
		v = d.a
	case "uniform":
		v = d.a + r.Float64()*(d.b-d.a)
	case "normal":
		v = d.a + r.NormFloat64()*d.b
	case "lognormal":
		v = d.a * math.Exp(d.s*r.NormFloat64())
	case "pareto":
		// Inverse transform: xm / U^(1/alpha), U in (0, 1].
		v = d.a / math.Pow(1-r.Float64(), 1/d.s)
	case "hdr_log":
		v = float64(d.hdr.sample(r))
	}
	return int64(max(min(v, float64(time.Hour)), 0))
}

// LoadInjection reads and parses the rule file at path (ParseInjection).
func LoadInjection(path string) (*Injection, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseInjection(path, b)
}

// ParseInjection parses a rule file (YAML); name prefixes error messages,
// which give the line ("rules.yaml:4: ..."). Every key is checked: an
// unknown key, a value of the wrong type, a rule with no effect or two, is
// an error, and nothing of the file is used.
//
//	seed: 1                    # optional: seeds probability and distributions
//	rules:
//	- name: slow-get           # required, unique
//	  commands: [GET, "@write"] # command names or ACL categories
//	  keys: "user:*"           # Redis glob on the first key
//	  slots: [0, 5000]         # the first key's hash slot, inclusive
//	  shards: ["10.0.0.3:6379"] # the shard the request is routed to
//	  clients: [{addr: 10.0.0.0/8}, {addr: "127.0.0.1:*"}, {name: "w-*"}]
//	  write: true              # or read_only: true (the command's flags)
//	  at: 10s                  # a window from when the file is applied...
//	  for: 30s                 # ...and its length
//	  probability: 0.1         # (0, 1], drawn per request...
//	  per: connection          # ...or once per connection
//	  delay: 2ms               # or {dist: lognormal, median: 1ms, sigma: 0.5}, or {hdr_log: path.hlog, tag: get.upstream}
//	  error: "LOADING ..."     # or: reply_delay: (as delay), timeout: true, reset: true,
//	                           # bandwidth: 100KB/s, slicer: {average_size: 64, size_variation: 32, delay: 1ms}
//	  direction: upstream      # bandwidth and slicer: pace the requests, not the replies
//	  retry: true              # with error: "TRYAGAIN ...": respmeter's routing retries it
func ParseInjection(name string, data []byte) (*Injection, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	fail := func(n *yaml.Node, format string, a ...any) error {
		return fmt.Errorf("%s:%d: %s", name, n.Line, fmt.Sprintf(format, a...))
	}
	in := &Injection{seed: 1, file: name}
	if len(doc.Content) == 0 {
		return in, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fail(root, "a rule file is a mapping with rules:")
	}
	names := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "seed":
			s, err := strconv.ParseUint(v.Value, 10, 64)
			if v.Kind != yaml.ScalarNode || err != nil {
				return nil, fail(v, "seed: want an unsigned integer, got %q", v.Value)
			}
			in.seed = s
		case "rules":
			if v.Kind != yaml.SequenceNode {
				return nil, fail(v, "rules: want a list of rules")
			}
			for j, rn := range v.Content {
				// Errors name the rule's place as a JSON path, for a
				// body posted to /inject on one line.
				rfail := func(n *yaml.Node, format string, a ...any) error {
					return fail(n, "rules[%d]: %s", j, fmt.Sprintf(format, a...))
				}
				r, err := parseRule(rn, rfail, filepath.Dir(name))
				if err != nil {
					return nil, err
				}
				if names[r.name] {
					return nil, rfail(rn, "rule %q: name used twice", r.name)
				}
				names[r.name] = true
				in.names = in.names || len(r.cliNames) > 0
				in.rules = append(in.rules, r)
			}
		default:
			return nil, fail(k, "unknown key %q (want seed, rules)", k.Value)
		}
	}
	return in, nil
}

type failFunc func(n *yaml.Node, format string, a ...any) error

// parseRule reads one rule; dir is the directory a relative hdr_log path
// of its delay is read from (the rule file's).
func parseRule(n *yaml.Node, fail failFunc, dir string) (*injRule, error) {
	if n.Kind != yaml.MappingNode {
		return nil, fail(n, "a rule is a mapping (name:, a scope, an effect)")
	}
	r := &injRule{line: n.Line, prob: 1}
	effects := 0
	var retry, direction *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var err error
		switch k.Value {
		case "name":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				return nil, fail(v, "name: want a non-empty string")
			}
			r.name = v.Value
		case "commands":
			var list []string
			if err = v.Decode(&list); err != nil || len(list) == 0 {
				return nil, fail(v, "commands: want a list of command names or @categories")
			}
			for _, c := range list {
				c = strings.ToLower(c)
				if strings.HasPrefix(c, "@") {
					r.cats = append(r.cats, c)
				} else {
					r.cmds = append(r.cmds, c)
				}
			}
		case "keys":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				return nil, fail(v, "keys: want a glob pattern")
			}
			r.keys = []byte(v.Value)
		case "probability":
			p, perr := strconv.ParseFloat(v.Value, 64)
			if v.Kind != yaml.ScalarNode || perr != nil || !(p > 0 && p <= 1) {
				return nil, fail(v, "probability: want a number in (0, 1], got %q", v.Value)
			}
			r.prob = p
		case "slots":
			var sl []int
			if err = v.Decode(&sl); err != nil || len(sl) != 2 || sl[0] < 0 || sl[1] < sl[0] || sl[1] >= routing.NumSlots {
				return nil, fail(v, "slots: want [from, to], hash slots with 0 <= from <= to <= 16383")
			}
			r.inSlots, r.slotLo, r.slotHi = true, uint16(sl[0]), uint16(sl[1])
		case "shards":
			if err = v.Decode(&r.shards); err != nil || len(r.shards) == 0 {
				return nil, fail(v, "shards: want a list of shard addresses (host:port)")
			}
			for _, a := range r.shards {
				if h, p, serr := net.SplitHostPort(a); serr != nil || h == "" || p == "" {
					return nil, fail(v, "shards: %q is not host:port", a)
				}
			}
		case "clients":
			err = parseClients(r, v, fail)
		case "read_only", "write":
			var on bool
			if err = v.Decode(&on); err != nil || !on {
				return nil, fail(v, "%s: want true", k.Value)
			}
			if r.flag != 0 {
				return nil, fail(k, "read_only and write: a rule takes one of them")
			}
			r.flag = command.FlagWrite
			if k.Value == "read_only" {
				r.flag = command.FlagReadonly
			}
		case "at", "for":
			d, derr := time.ParseDuration(v.Value)
			switch {
			case v.Kind != yaml.ScalarNode || derr != nil:
				return nil, fail(v, "%s: want a duration such as 10s, got %q", k.Value, v.Value)
			case d < 0:
				return nil, fail(v, "%s: want a duration of 0 or more, got %q", k.Value, v.Value)
			case k.Value == "for" && d == 0:
				return nil, fail(v, "for: want a duration more than 0 (no for: to the end), got %q", v.Value)
			}
			if k.Value == "at" {
				r.at = int64(d)
			} else {
				r.dur = int64(d)
			}
		case "delay":
			effects++
			r.effect = effDelay
			r.delay, err = parseDist(v, fail, dir)
		case "error":
			effects++
			r.effect = effError
			msg := strings.TrimPrefix(v.Value, "-")
			if v.Kind != yaml.ScalarNode || msg == "" || strings.ContainsAny(msg, "\r\n") {
				return nil, fail(v, "error: want one line of error text, such as \"LOADING Redis is loading the dataset in memory\"")
			}
			r.reply = []byte("-" + msg + "\r\n")
		case "reply_delay":
			effects++
			r.effect = effReplyDelay
			r.delay, err = parseDist(v, fail, dir)
		case "timeout", "reset":
			effects++
			r.effect = effTimeout
			if k.Value == "reset" {
				r.effect = effReset
			}
			var on bool
			if err = v.Decode(&on); err != nil || !on {
				return nil, fail(v, "%s: want true", k.Value)
			}
		case "migrate", "failover":
			effects++
			r.effect = effMigrate
			if k.Value == "failover" {
				r.effect = effFailover
			}
			r.topo, err = parseTopoEvent(k.Value, v, fail)
		case "bandwidth", "slicer":
			effects++
			r.effect = effBandwidth
			if k.Value == "slicer" {
				r.effect = effSlicer
			}
			r.wire, err = parseWire(k, v, fail)
		case "direction":
			if v.Kind != yaml.ScalarNode || v.Value != "downstream" && v.Value != "upstream" {
				return nil, fail(v, "direction: want downstream or upstream, got %q", v.Value)
			}
			direction = v
			r.wire.up = v.Value == "upstream"
		case "retry":
			if err = v.Decode(&r.retry); err != nil {
				return nil, fail(v, "retry: want true or false")
			}
			retry = v
		case "per":
			if v.Kind != yaml.ScalarNode || v.Value != "request" && v.Value != "connection" {
				return nil, fail(v, "per: want request or connection, got %q", v.Value)
			}
			r.perConn = v.Value == "connection"
		default:
			return nil, fail(k, "unknown key %q (want name, commands, keys, slots, shards, clients, read_only, write, at, for, probability, per, delay, reply_delay, error, retry, timeout, reset, migrate, failover, bandwidth, slicer, direction)", k.Value)
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case r.name == "":
		return nil, fail(n, "rule without a name")
	case effects == 0:
		return nil, fail(n, "rule %q: no effect (delay, reply_delay, error, timeout, reset, migrate, failover, bandwidth or slicer)", r.name)
	case effects > 1:
		return nil, fail(n, "rule %q: more than one effect (delay, reply_delay, error, timeout, reset, migrate, failover, bandwidth, slicer)", r.name)
	case direction != nil && r.effect != effBandwidth && r.effect != effSlicer:
		return nil, fail(direction, "rule %q: direction: only with bandwidth or slicer", r.name)
	}
	if r.topo != nil {
		if err := checkTopoRule(r, n, fail); err != nil {
			return nil, err
		}
	}
	if r.retry && (r.effect != effError || !bytes.HasPrefix(r.reply[1:], tryAgainErr)) {
		return nil, fail(retry, "rule %q: retry: only with an error: whose text starts with TRYAGAIN (respmeter retries no other error)", r.name)
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(r.name))
	r.salt = h.Sum64()
	r.place(0) // until applied: as if at the proxy's clock zero
	return r, nil
}

// parseClients reads clients: a list of {addr: CIDR or host:port glob} and
// {name: glob} entries.
func parseClients(r *injRule, n *yaml.Node, fail failFunc) error {
	const want = `clients: want a list of {addr: 10.0.0.0/8}, {addr: "127.0.0.1:*"} or {name: "worker-*"}`
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return fail(n, want)
	}
	for _, e := range n.Content {
		if e.Kind != yaml.MappingNode || len(e.Content) != 2 {
			return fail(e, want)
		}
		k, v := e.Content[0], e.Content[1]
		if v.Kind != yaml.ScalarNode || v.Value == "" {
			return fail(v, "clients: %s: want a non-empty string", k.Value)
		}
		switch k.Value {
		case "addr":
			if pf, err := netip.ParsePrefix(v.Value); err == nil {
				r.cliNets = append(r.cliNets, pf.Masked())
			} else if strings.Contains(v.Value, "/") {
				return fail(v, "clients: addr: %q: %v", v.Value, err)
			} else {
				r.cliAddrs = append(r.cliAddrs, []byte(v.Value))
			}
		case "name":
			r.cliNames = append(r.cliNames, []byte(v.Value))
		default:
			return fail(k, "clients: unknown key %q (want addr or name)", k.Value)
		}
	}
	return nil
}

// parseDist reads a delay: a duration ("2ms": fixed), a mapping with
// dist: and its parameters, or one with hdr_log: (parseHDRDist; a relative
// path is read from dir).
func parseDist(n *yaml.Node, fail failFunc, dir string) (dist, error) {
	dur := func(v *yaml.Node, key string) (float64, error) {
		d, err := time.ParseDuration(v.Value)
		if v.Kind != yaml.ScalarNode || err != nil || d < 0 {
			return 0, fail(v, "%s: want a duration such as 2ms, got %q", key, v.Value)
		}
		return float64(d), nil
	}
	num := func(v *yaml.Node, key string) (float64, error) {
		f, err := strconv.ParseFloat(v.Value, 64)
		if v.Kind != yaml.ScalarNode || err != nil || !(f > 0) || math.IsInf(f, 0) {
			return 0, fail(v, "%s: want a positive number, got %q", key, v.Value)
		}
		return f, nil
	}
	if n.Kind == yaml.ScalarNode {
		a, err := dur(n, "delay")
		return dist{kind: "fixed", a: a}, err
	}
	if n.Kind != yaml.MappingNode {
		return dist{}, fail(n, "delay: want a duration or a mapping with dist:")
	}
	vals := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		vals[n.Content[i].Value] = n.Content[i+1]
	}
	if _, ok := vals["hdr_log"]; ok {
		return parseHDRDist(n, vals, fail, dir)
	}
	params := map[string][]string{
		"fixed":     {"value"},
		"uniform":   {"min", "max"},
		"normal":    {"mean", "stddev"},
		"lognormal": {"median", "sigma"},
		"pareto":    {"min", "alpha"},
	}
	kn, ok := vals["dist"]
	if !ok {
		return dist{}, fail(n, "delay: dist: missing (fixed, uniform, normal, lognormal, pareto), or hdr_log: FILE")
	}
	want, ok := params[kn.Value]
	if !ok {
		return dist{}, fail(kn, "dist: unknown distribution %q (fixed, uniform, normal, lognormal, pareto)", kn.Value)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Value != "dist" && !contains(want, k.Value) {
			return dist{}, fail(k, "delay: unknown key %q for dist %s (want %s)", k.Value, kn.Value, strings.Join(want, ", "))
		}
	}
	for _, k := range want {
		if vals[k] == nil {
			return dist{}, fail(n, "delay: dist %s needs %s", kn.Value, strings.Join(want, ", "))
		}
	}
	d := dist{kind: kn.Value}
	var err error
	switch d.kind {
	case "fixed":
		d.a, err = dur(vals["value"], "value")
	case "uniform":
		if d.a, err = dur(vals["min"], "min"); err == nil {
			d.b, err = dur(vals["max"], "max")
		}
		if err == nil && d.b < d.a {
			err = fail(vals["max"], "max: less than min")
		}
	case "normal":
		if d.a, err = dur(vals["mean"], "mean"); err == nil {
			d.b, err = dur(vals["stddev"], "stddev")
		}
	case "lognormal":
		if d.a, err = dur(vals["median"], "median"); err == nil {
			d.s, err = num(vals["sigma"], "sigma")
		}
	case "pareto":
		if d.a, err = dur(vals["min"], "min"); err == nil {
			d.s, err = num(vals["alpha"], "alpha")
		}
	}
	return d, err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// match returns the first of rules (in's, or one of them) whose scope
// holds request c of s (routed by v, read at now: ns on the proxy's
// clock), or nil. Each scope is
// tested only if the rule has it, the cheap ones first; a probability is
// drawn only for a request otherwise in scope.
func (in *Injection) match(rules []*injRule, s *client, v *topoView, c *routing.Call, now int64, r *rand.Rand) *injRule {
	name := c.Name()
	parent, _, _ := strings.Cut(name, "|")
	for _, ru := range rules {
		if ru.topo != nil {
			// A cluster event whose opening or end is due: applied
			// before this request is routed (settle), if its timer has
			// not yet. A migration touches no request here (the facade
			// answers -ASK, facadeShape.dispatch).
			if ev := ru.topo; !ev.ending.Load() && (now >= ru.from && !ev.opened.Load() || now-ru.from >= ru.span) {
				s.p.settle(ru, now)
			}
			if ru.effect == effMigrate {
				continue
			}
		}
		if !ru.inWindow(now) {
			continue
		}
		if ru.flag != 0 && (c.Info == nil || !c.Info.Flags.Has(ru.flag)) {
			continue
		}
		if (len(ru.cmds) > 0 || len(ru.cats) > 0) && !ru.inCommands(c, name, parent) {
			continue
		}
		if ru.keys != nil || ru.inSlots {
			k, ok := c.FirstKey()
			if !ok || (ru.keys != nil && !routing.MatchGlob(ru.keys, k)) {
				continue
			}
			if sl := routing.Slot(k); ru.inSlots && (sl < ru.slotLo || sl > ru.slotHi) {
				continue
			}
		}
		if ru.shards != nil && !ru.inShards(s, v, c) {
			continue
		}
		if (ru.cliNets != nil || ru.cliAddrs != nil || ru.cliNames != nil) && !ru.inClients(s) {
			continue
		}
		if ru.prob < 1 {
			if ru.perConn {
				if connDraw(in.seed^ru.salt, s.injConn) >= ru.prob {
					continue
				}
			} else if r.Float64() >= ru.prob {
				continue
			}
		}
		return ru
	}
	return nil
}

// inShards reports whether request c of s goes to one of the rule's
// shards (injShard).
func (ru *injRule) inShards(s *client, v *topoView, c *routing.Call) bool {
	sh := s.injShard(v, c)
	if sh < 0 || sh >= len(v.t.Addrs) {
		return false
	}
	return contains(ru.shards, v.t.Addrs[sh])
}

// injShard returns the shard request c of s is routed to, or -1: the
// client's own shard where it has one connection (one engine, a pinned
// client, a client of a facade's virtual node); else the shard of its
// transaction, or of its first key's hash slot; a keyless request, the
// client's home shard (where one that goes to a single shard goes;
// commands sent to every shard count as the home shard's too).
func (s *client) injShard(v *topoView, c *routing.Call) int {
	if s.p.shape.single(s) && s.home >= 0 {
		return s.home
	}
	if s.tx.on && s.tx.shard >= 0 {
		return s.tx.shard
	}
	if k, ok := c.FirstKey(); ok {
		return v.t.Shard(routing.Slot(k))
	}
	return s.home
}

// inClients reports whether s is one of the rule's clients: by address
// (a prefix, or a glob on "host:port") or by name (a glob).
func (ru *injRule) inClients(s *client) bool {
	if !s.injPeerSet {
		// Once per client: its address as a netip.AddrPort and as text.
		s.injPeerSet = true
		if ta, ok := s.peer.(*net.TCPAddr); ok {
			s.injPeerIP = ta.AddrPort().Addr().Unmap()
		}
		if s.peer != nil {
			s.injPeer = []byte(s.peer.String())
		}
	}
	for _, pf := range ru.cliNets {
		if s.injPeerIP.IsValid() && pf.Contains(s.injPeerIP) {
			return true
		}
	}
	for _, g := range ru.cliAddrs {
		if routing.MatchGlob(g, s.injPeer) {
			return true
		}
	}
	for _, g := range ru.cliNames {
		if len(s.injName) > 0 && routing.MatchGlob(g, s.injName) {
			return true
		}
	}
	return false
}

func (ru *injRule) inCommands(c *routing.Call, name, parent string) bool {
	for _, x := range ru.cmds {
		if x == name || x == parent {
			return true
		}
	}
	if len(ru.cats) > 0 && c.Info != nil {
		for _, cat := range c.Info.ACLCategories {
			for _, x := range ru.cats {
				if strings.EqualFold(x, cat) {
					return true
				}
			}
		}
	}
	return false
}

// inject applies the rules to request c of s (size bytes), read at now,
// before it is routed (client.route), and reports what route does next: pause (the
// request and the input after it wait: a delay or a timeout; or the
// client was reset), or answered (e was queued and answered with an
// injected error). Otherwise route goes on with the request; at is then
// the time it counts from (its own read, or that of a delayed request it
// was held behind), inj its injected time so far, and hold how long its
// reply is to be held (ns; a reply delay, holdReply).
func (s *client) inject(in *Injection, v *topoView, c *routing.Call, size int, now int64) (pause, answered bool, at, inj, hold int64) {
	at = now
	if s.injFrom != 0 && s.has(cfResuming) {
		// Held behind a delayed request (read with it): timed from that
		// read; the wait up to the delay's due time is injected.
		at = s.injFrom
		inj = min(now, s.injDue) - at
	}
	if s.injPass {
		// The delayed request itself, now due: not matched again.
		s.injPass = false
		s.injRule, s.injDelayed = s.injDelayed, nil
		return false, false, at, inj, 0
	}
	s.injRule = nil
	if s.l.injRand == nil {
		s.l.injRand = rand.New(rand.NewPCG(in.seed, uint64(s.l.idx)))
	}
	if s.injRetry {
		// The request a -TRYAGAIN retry holds, its back-off over.
		return s.retryTryAgain(in, v, c, now, at)
	}
	ru := in.match(in.rules, s, v, c, now, s.l.injRand)
	if ru == nil {
		return false, false, at, inj, 0
	}
	ru.hits.Add(1)
	switch ru.effect {
	case effError:
		if ru.retry && !s.tx.on && !s.p.shape.single(s) {
			// Retried as an engine's -TRYAGAIN is (link.tryAgain; not in
			// a transaction, nor for a client bound to one shard).
			s.injTry[0], s.injTryAt, s.injTries = ru, now, 0
			return s.tryAgain(ru, c, now, at, inj)
		}
		e := s.newEntry(c.ID, now)
		e.tIn = at
		s.markInjected(e.seq, at, ru, 0)
		if s.tx.on {
			// Refused while queued: EXEC then fails (EXECABORT), as
			// after a queuing error of the engine's.
			s.tx.aborted = true
		}
		s.local(e, ru.reply)
		return false, true, at, inj, 0
	case effTimeout, effReset:
		s.markInjected(s.seq+1, at, ru, 0) // never answered: as the request it would have been
		if ru.effect == effReset {
			s.reset()
		} else {
			s.paused = pauseHung
		}
		return true, false, at, inj, 0
	case effReplyDelay:
		s.injRule = ru
		return false, false, at, inj, ru.delay.sample(s.l.injRand)
	case effBandwidth, effSlicer:
		if !ru.wire.up {
			s.injRule = ru
			return false, false, at, inj, holdWire
		}
	}
	var due int64
	switch ru.effect {
	case effFailover:
		due = ru.from + ru.span // frozen to the window's end
	case effBandwidth, effSlicer:
		due = s.paceRequest(ru, at, size) // upstream (injwire.go)
	default:
		due = at + ru.delay.sample(s.l.injRand)
	}
	if due <= now {
		s.injRule = ru
		return false, false, at, now - at, 0
	}
	s.injPass, s.injDelayed = true, ru
	s.injPause(ru, at, due)
	return true, false, at, inj, 0
}

// injPause holds s, and the request it was routing, read at at, with the
// input after it (pauseInject) until due (ns on the proxy's clock): a
// timer on the delays' clock (injclock.go) resumes it then. A frozen
// shard's rule (ru.topo) releases it instead (releaseFrozen).
func (s *client) injPause(ru *injRule, at, due int64) {
	s.paused, s.injFrom, s.injDue = pauseInject, at, due
	s.injGen++
	gen, el, clock := s.injGen, s.conn.EventLoop(), &s.p.clock
	clock.add(due, func() {
		_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			clock.handedOver(s.p.now() - due)
			if ru.topo != nil {
				s.releaseFrozen(ru, gen)
				return nil
			}
			if !s.gone() && s.paused == pauseInject && s.injGen == gen {
				s.resume()
			}
			return nil
		})) // an error: the loop is stopping
	})
}

// tryAgain answers request c of s (read at at, inj injected before it was
// matched) with rule ru's -TRYAGAIN as routing answers an engine's
// (link.tryAgain): the request and the input after it are held for a
// back-off of tryAgainWait, doubling up to tryAgainWaitMax, and the rule is
// then evaluated again (retryTryAgain); after maxTryAgain retries the
// client gets the error. s.injTry[0] is ru and s.injTryAt the time its
// first -TRYAGAIN was injected. Each retry counts as the metrics'
// TryAgain, and the wait from the first -TRYAGAIN as redirect penalty.
func (s *client) tryAgain(ru *injRule, c *routing.Call, now, at, inj int64) (pause, answered bool, _, _, hold int64) {
	m := s.p.cfg.Metrics
	if s.injTries >= maxTryAgain {
		penalty := now - s.injTryAt
		s.injTry[0], s.injTryAt, s.injTries = nil, 0, 0
		e := s.newEntry(c.ID, now)
		e.tIn = at
		s.markInjected(e.seq, at, ru, 0)
		s.local(e, ru.reply)
		if lm := s.l.m; lm != nil {
			lm.Lock()
			lm.RedirectPenaltyLocked(time.Duration(penalty))
			lm.Unlock()
		}
		return false, true, at, inj, 0
	}
	wait := min(tryAgainWait<<s.injTries, tryAgainWaitMax)
	s.injTries++
	if m != nil {
		m.TryAgain()
	}
	s.injRetry = true
	s.injPause(ru, at, now+int64(wait))
	return true, false, at, inj, 0
}

// retryTryAgain matches the request that s.injTry[0] answered -TRYAGAIN,
// its back-off over, against that rule again, as an engine answers the
// re-sent request again: a rule still in force and matching it (its
// window, its probability, drawn again) answers again (tryAgain); else the
// request goes on as one no rule touched, and its retries are booked as an
// engine's -TRYAGAIN's are (bookRetried, at the end of the batch). The
// other rules are not matched again: the request was matched against them
// when it was read.
func (s *client) retryTryAgain(in *Injection, v *topoView, c *routing.Call, now, at int64) (pause, answered bool, _, inj, hold int64) {
	s.injRetry = false
	ru := s.injTry[0]
	inj = s.injTryAt - at // a wait behind a delayed request, before its first -TRYAGAIN
	if slices.Contains(in.rules, ru) && in.match(s.injTry[:], s, v, c, now, s.l.injRand) != nil {
		ru.hits.Add(1)
		return s.tryAgain(ru, c, now, at, inj)
	}
	s.injRule = ru // the slow log and a capture name the rule
	s.injBook, s.injBookAt = s.seq+1, s.injTryAt
	s.injTry[0], s.injTryAt, s.injTries = nil, 0, 0
	return false, false, at, inj, 0
}

// bookRetried books the retries of request s.injBook, which a retry rule
// answered -TRYAGAIN (first at s.injBookAt) and which then went on to its
// shard, as link.tryAgain books an engine's: from the first -TRYAGAIN on
// the request is in upstream (its tSent, and each part's first send,
// tFirst, so a shard's figures count it from the send that it answered),
// and a redirect penalty runs (each part's redirAt; client.complete). A
// request respmeter answered itself has no part, and stays untimed.
func (s *client) bookRetried() {
	seq, at := s.injBook, s.injBookAt
	s.injBook, s.injBookAt = 0, 0
	for i := s.q.len() - 1; i >= 0; i-- {
		e := s.q.at(i)
		if e.seq > seq {
			continue
		}
		if e.seq == seq && len(e.ps) > 0 {
			e.tSent = at
			for j := range e.ps {
				e.ps[j].tFirst, e.ps[j].redirAt = at, at
			}
		}
		return
	}
}

// markInjected marks request seq of s (read at at) in the capture, if s
// is captured, as touched by rule ru, which injected ns: so that a replay
// of the capture knows which commands a rule touched. A delayed request
// or a held reply is marked with its reply (captureReply); an error, an
// -ASK, a timeout or a reset when the rule touches it.
func (s *client) markInjected(seq uint64, at int64, ru *injRule, ns int64) {
	if s.capBuf != nil {
		s.capBuf.Injected(s.capID, seq, at, ru.name, ru.effect.String(), ns)
	}
}

// connDraw returns the per-connection draw in [0, 1) of connection conn
// for a rule salted with salt (the seed and the rule's name): SplitMix64's
// finaliser (Steele, Lea, Flood 2014) of the two, the top 53 bits.
func connDraw(salt, conn uint64) float64 {
	x := salt + conn*0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// reset closes the client's connection with a TCP RST: SO_LINGER 0 makes
// close(2) drop what is unsent and reset the connection (reset rule). Its
// requests in flight are forgotten as for a client that left.
func (s *client) reset() {
	s.paused = pauseHung
	if s.linger != nil {
		s.linger.close()
		s.linger = nil
	} else {
		_ = unix.SetsockoptLinger(s.conn.Fd(), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1})
		s.l.closeNow(s.conn)
	}
	s.shutdown()
}

// holdReply reports whether e, ready at the head of its client's queue,
// is held by a reply delay (e.hold ns from when its reply came in,
// e.tReply). The first time it arms a timer on the delays' clock
// (injclock.go) that releases e and flushes the client when due; advance
// stops at e meanwhile, so the replies behind it keep their order.
func (s *client) holdReply(e *request) bool {
	if e.hold == holdWire {
		return s.paceReply(e) // a wire rule's (injwire.go)
	}
	if e.holdDue != 0 {
		return true // armed: its timer releases it
	}
	due := e.tReply + e.hold
	if e.tReply == 0 || due <= s.p.now() {
		s.releaseReply(e, max(due, e.tReply))
		return false
	}
	e.holdDue = due
	seq, el, clock := e.seq, s.conn.EventLoop(), &s.p.clock
	clock.add(due, func() {
		_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			clock.handedOver(s.p.now() - due)
			if !s.gone() && s.q.len() > 0 && s.q.front() == e && e.seq == seq && e.holdDue == due {
				s.releaseReply(e, due)
				s.markDirty()
				s.l.flushAll()
			}
			return nil
		})) // an error: the loop is stopping
	})
	return true
}

// releaseReply ends e's reply delay, due at due: the hold is injected
// time, and so is the wait of each reply ready behind it that came in
// before due (up to the next held one). Lateness past due is proxy time.
func (s *client) releaseReply(e *request, due int64) {
	if e.tReply > 0 {
		e.inj += due - e.tReply
	}
	e.hold, e.holdDue = 0, 0
	s.releaseWaiters(0, due)
}

// releaseWaiters books as injected the wait of each reply ready behind the
// head of s's queue, whose hold ran from from to due: from when it came in
// (from at the earliest) to due, up to the next held one.
func (s *client) releaseWaiters(from, due int64) {
	for i := 1; i < s.q.len(); i++ {
		x := s.q.at(i)
		if !x.ready || x.hold != 0 {
			break
		}
		if t := max(x.tReply, from); x.tReply > 0 && t < due {
			x.inj += due - t
		}
	}
}

// Injection returns the rules in force (nil: none).
func (p *Proxy) Injection() *Injection { return p.inject.Load() }

// AddInjection puts the rules of in into force after those in force
// already, which keep their counters; the seed stays the first set's (the
// event loops' random sources are seeded once). A name already in force
// is an error, and nothing changes. A rule scoped by client name needs the
// names kept from the start (a slow log, or such a rule in Config.Inject).
func (p *Proxy) AddInjection(in *Injection) error {
	p.injMu.Lock()
	defer p.injMu.Unlock()
	cur := p.inject.Load()
	next := &Injection{seed: in.seed, base: p.base}
	if cur != nil {
		next.seed, next.names = cur.seed, cur.names
		next.rules = append(next.rules, cur.rules...)
	}
	for i, r := range in.rules {
		for _, o := range next.rules {
			if o.name == r.name {
				return fmt.Errorf("rules[%d]: rule %q: name in force already", i, r.name)
			}
		}
		if len(r.cliNames) > 0 && !p.keepNames {
			return fmt.Errorf("rules[%d]: rule %q: clients: name: client names are not kept (start respmeter with the slow log or a rule scoped by name)", i, r.name)
		}
		next.names = next.names || len(r.cliNames) > 0
	}
	if err := p.checkRules(in); err != nil {
		return err
	}
	// All checked: the new rules' windows count from now, and they go
	// into force together.
	in.apply(p.base, p.now())
	p.armTopo(in)
	next.rules = append(next.rules, in.rules...)
	p.inject.Store(next)
	return nil
}

// checkRules refuses the rules of in that the proxy's shape cannot apply:
// a -TRYAGAIN retried by respmeter (retry:) where it does not route
// requests by hash slot (one engine, pinned clients: there the client is
// the engine's, and retries a -TRYAGAIN itself), and cluster events where
// respmeter does not own the slot map (checkTopoRules). An error names the
// file, the rule's line and its place.
func (p *Proxy) checkRules(in *Injection) error {
	for i, r := range in.rules {
		if r.retry && p.cfg.Route != RouteSlots && p.cfg.Route != RouteFacade {
			return fmt.Errorf("%s:%d: rules[%d]: rule %q: retry needs route slots or facade (respmeter retries -TRYAGAIN where it routes by hash slot; with route %s the client does)",
				in.file, r.line, i, r.name, p.cfg.Route)
		}
	}
	return p.checkTopoRules(in)
}

// RemoveInjection takes the rule named name out of force, or every rule
// when name is empty; it reports whether there was one. Requests a
// removed rule holds (a delay, a held reply, a timeout) stay held. A
// cluster event whose window has opened ends at once (removeTopo).
func (p *Proxy) RemoveInjection(name string) bool {
	p.injMu.Lock()
	defer p.injMu.Unlock()
	cur := p.inject.Load()
	if cur == nil {
		return false
	}
	next := &Injection{seed: cur.seed, names: cur.names, base: cur.base}
	for _, r := range cur.rules {
		if name != "" && r.name != name {
			next.rules = append(next.rules, r)
		} else {
			p.removeTopo(r)
		}
	}
	if len(next.rules) == len(cur.rules) {
		return false
	}
	if len(next.rules) == 0 {
		next = nil
	}
	p.inject.Store(next)
	return true
}

// injectEnd runs at the end of a batch of input: once no delay holds the
// client, the input it held is all processed and nothing more is timed
// from its read.
func (s *client) injectEnd() {
	if s.injBook != 0 {
		s.bookRetried()
	}
	if s.paused == 0 {
		s.injFrom, s.injDue = 0, 0
		// A request a -TRYAGAIN retry held that was routed with no rule
		// in force (all removed meanwhile) is not retried again.
		s.injRetry, s.injTry[0], s.injTryAt, s.injTries = false, nil, 0, 0
	}
}
