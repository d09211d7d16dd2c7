package command

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/routing/command/internal/cmdgen"
)

// Errors of FetchInfo, besides the dial and I/O errors it wraps.
var (
	// ErrRefused means the engine answered both COMMAND INFO and COMMAND
	// with an error reply (NOAUTH, for one: FetchInfo does not
	// authenticate). The wrapping error quotes the replies.
	ErrRefused = errors.New("command: engine refused COMMAND INFO and COMMAND")

	// ErrBadReply means the engine's reply is not RESP2, or not shaped as
	// the Redis docs of COMMAND INFO describe an entry (a field of the
	// wrong type, fewer than 6 elements, no entries at all). The wrapping
	// error says what was wrong.
	ErrBadReply = errors.New("command: malformed COMMAND INFO reply")
)

// FetchInfo connects to addr ("host:port" of a Redis-compatible engine),
// asks for its command table and returns it keyed by lower-case command
// name, as Info entries with the meaning described at Info (subcommands in
// Info.Subcommands, keyed by the lower-case part after '|'). It sends COMMAND
// INFO without names (every command, Redis 7.0+) and, when that is answered
// with an error reply or an empty array (Redis before 7.0 lists nothing,
// Dragonfly refuses), COMMAND, on one RESP2 connection it closes before
// returning. It does not authenticate and does not speak TLS.
//
// Each entry is decoded by the generator's own decoder (the one that
// captures testdata/commands.json) and converted as the generator writes
// commands_gen.go, so an engine of the table's version (ServerVersion)
// gives entries equal, field by field, to ID.Info of the built-in table.
// The reply of another engine is taken leniently, so that one new field or
// flag does not lose the whole table: command and key spec flags without a
// constant here are dropped; a begin_search or find_keys of a type not known
// here, or without the fields its type needs, becomes BeginSearchUnknown or
// FindKeysUnknown (Keys then finds no keys from that spec); key spec fields
// not known here are ignored; entries of 6 to 9 elements (Redis 5 and 6,
// Dragonfly: no ACL categories, tips, key specs or subcommands) have those
// fields empty; null entries are skipped and of two entries with one name
// the first is kept.
//
// timeout bounds the whole exchange, dial included; 0 means no bound but
// ctx's. login's User and Password, when set, authenticate the connection
// first (AUTH; never part of an error). When ctx ends first the error wraps ctx.Err(). Other errors are
// the dial or I/O error (wrapped), ErrRefused or ErrBadReply, all prefixed
// with addr.
//
// The map and its entries are new on every call and belong to the caller;
// Lookup and ID.Info never see them.
func FetchInfo(ctx context.Context, addr string, timeout time.Duration, login respconn.Options) (map[string]*Info, error) {
	m, err := fetchInfo(ctx, addr, timeout, login)
	if err != nil {
		return nil, fmt.Errorf("command: fetch command table from %s: %w", addr, err)
	}
	return m, nil
}

func fetchInfo(ctx context.Context, addr string, timeout time.Duration, login respconn.Options) (map[string]*Info, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// fail reports an I/O error as the end of ctx when that caused it, and
	// a reply that is not RESP as ErrBadReply.
	fail := func(err error) error {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		if errors.Is(err, respconn.ErrProtocol) {
			return fmt.Errorf("%w: %w", ErrBadReply, err)
		}
		return err
	}
	c, err := respconn.Dial(ctx, addr, respconn.Options{User: login.User, Password: login.Password, TLS: login.TLS})
	if err != nil {
		return nil, fail(err)
	}
	defer c.Close() // Dial closes it as soon as ctx ends, so fail sees ctx.Err()

	v, err := c.Do(0, "COMMAND", "INFO")
	if err != nil {
		return nil, fail(err)
	}
	infoAnswer := "an empty array"
	if v.IsError() {
		infoAnswer = fmt.Sprintf("%q", v.Str)
	}
	if v.IsError() || (v.IsArray() && len(v.Elems) == 0) {
		if v, err = c.Do(0, "COMMAND"); err != nil {
			return nil, fail(err)
		}
		if v.IsError() {
			return nil, fmt.Errorf("%w: COMMAND INFO answered %s, COMMAND %q", ErrRefused, infoAnswer, v.Str)
		}
	}
	if !v.IsArray() {
		return nil, fmt.Errorf("%w: got %T, want array", ErrBadReply, v.Any())
	}
	m := make(map[string]*Info, len(v.Elems))
	for _, e := range v.Elems {
		if e.Null { // COMMAND INFO's answer for an unknown name; none asked
			continue
		}
		cmd, err := cmdgen.DecodeCommand(e.Any(), true)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadReply, err)
		}
		if _, dup := m[cmd.Name]; !dup {
			m[cmd.Name] = infoOf(cmd)
		}
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%w: no commands", ErrBadReply)
	}
	return m, nil
}

// infoOf converts a decoded entry to an Info as cmdgen.Generate writes it
// into commands_gen.go: flags as bits, empty lists as nil, subcommands keyed
// by the part of their name after "parent|". Unlike the generator it
// drops what it cannot represent instead of failing (see FetchInfo).
func infoOf(c *cmdgen.Command) *Info {
	in := &Info{
		Name:     c.Name,
		Arity:    c.Arity,
		FirstKey: c.FirstKey,
		LastKey:  c.LastKey,
		Step:     c.Step,
	}
	for _, n := range c.Flags {
		in.Flags |= Flags(bitOf(n, flagNames[:]))
	}
	if len(c.ACLCategories) > 0 {
		in.ACLCategories = c.ACLCategories
	}
	if len(c.Tips) > 0 {
		in.Tips = c.Tips
	}
	if len(c.KeySpecs) > 0 {
		in.KeySpecs = make([]KeySpec, len(c.KeySpecs))
		for i, ks := range c.KeySpecs {
			in.KeySpecs[i] = keySpecOf(ks)
		}
	}
	for _, s := range c.Subcommands {
		name := strings.TrimPrefix(s.Name, c.Name+"|")
		if name == "" {
			continue
		}
		if in.Subcommands == nil {
			in.Subcommands = make(map[string]*Info, len(c.Subcommands))
		}
		if _, dup := in.Subcommands[name]; !dup {
			in.Subcommands[name] = infoOf(s)
		}
	}
	return in
}

// keySpecOf converts one key spec as cmdgen.Generate writes it; a
// begin_search or find_keys it cannot represent is left unknown.
func keySpecOf(ks *cmdgen.KeySpec) KeySpec {
	k := KeySpec{Notes: ks.Notes}
	for _, n := range ks.Flags {
		k.Flags |= KeySpecFlags(bitOf(n, keySpecFlagNames[:]))
	}
	bs := ks.BeginSearch.Spec
	switch t := ks.BeginSearch.Type; {
	case t == "index" && bs.Index != nil:
		k.BeginSearch = BeginSearch{Type: BeginSearchIndex, Index: *bs.Index}
	case t == "keyword" && bs.Keyword != nil && bs.StartFrom != nil:
		k.BeginSearch = BeginSearch{Type: BeginSearchKeyword, Keyword: *bs.Keyword, StartFrom: *bs.StartFrom}
	}
	fk := ks.FindKeys.Spec
	switch t := ks.FindKeys.Type; {
	case t == "range" && fk.LastKey != nil && fk.KeyStep != nil:
		k.FindKeys = FindKeys{Type: FindKeysRange, LastKey: *fk.LastKey, Step: *fk.KeyStep}
		if fk.Limit != nil {
			k.FindKeys.Limit = *fk.Limit
		}
	case t == "keynum" && fk.KeyNumIdx != nil && fk.FirstKey != nil && fk.KeyStep != nil:
		k.FindKeys = FindKeys{Type: FindKeysKeynum, KeyNumIdx: *fk.KeyNumIdx, FirstKey: *fk.FirstKey, Step: *fk.KeyStep}
	}
	return k
}

// bitOf returns the bit of name in names (indexed by bit), or 0 for a name
// not there.
func bitOf(name string, names []string) uint64 {
	for i, n := range names {
		if n == name {
			return 1 << i
		}
	}
	return 0
}

// Union returns the command table of engines that serve one keyspace
// together (the shards of a mixed cluster during an upgrade, say), as
// FetchInfo returns each: every command and subcommand of the first table,
// then those that only a later table has, each from the first table (in
// argument order) that has it. So a command that only a newer engine knows
// finds its keys by that engine's own entry, and a command the first
// engine knows keeps the first engine's entry. Nil tables are skipped.
//
// The result is new; entries are shared with the tables (shallowly), except
// that a command whose subcommands are completed from a later table is a
// copy with a new Subcommands map. The tables are not modified.
func Union(tables ...map[string]*Info) map[string]*Info {
	out := make(map[string]*Info)
	for _, t := range tables {
		for name, in := range t {
			if in == nil {
				continue
			}
			have := out[name]
			if have == nil {
				out[name] = in
				continue
			}
			var extra []string
			for sub, s := range in.Subcommands {
				if s != nil && have.Subcommands[sub] == nil {
					extra = append(extra, sub)
				}
			}
			if len(extra) == 0 {
				continue
			}
			merged := *have
			merged.Subcommands = make(map[string]*Info, len(have.Subcommands)+len(extra))
			for sub, s := range have.Subcommands {
				merged.Subcommands[sub] = s
			}
			for _, sub := range extra {
				merged.Subcommands[sub] = in.Subcommands[sub]
			}
			out[name] = &merged
		}
	}
	return out
}
