package routing

import (
	"slices"
	"strings"

	"github.com/respmeter/respmeter/routing/command"
)

// Resolver finds the keys of commands like Keys and FirstKey, and also of
// the commands and subcommands that the built-in table (routing/command,
// generated from redis-server 7.0) does not know, from the engine's own
// command table: its COMMAND INFO key specs as command.FetchInfo returns
// them, walked with the rules of Keys (the Redis docs, "Command key
// specifications": begin_search index or keyword, find_keys range or
// keynum).
//
// The engine's entries are used only where the built-in table has none: a
// command that command.Lookup answers with command.Other, or a subcommand
// of a built-in command with subcommands that Info.Subcommand does not
// find (a subcommand added after 7.0, as CLIENT NO-TOUCH in 7.2). Every
// command the table knows keeps the table's entry, whatever the engine
// says, so metric IDs and labels (command.Lookup, still command.Other for
// an engine-only command) and the behaviour Keys is tested for (against
// COMMAND GETKEYS of redis-server 7.0, with Redis' own fallback rules for
// SORT, MIGRATE, XREAD and XREADGROUP) stay fixed. An engine-only command
// has no such fallback rule: when its key spec cannot be applied or is
// unknown or incomplete it has no keys (as in Redis for a command without
// a getkeys function), and Keys says ErrNoKeys unless the command is
// flagged no_mandatory_keys.
//
// An entry without key specs (Redis before 7.0 and Dragonfly send none)
// whose legacy FirstKey is positive and that is not flagged movablekeys
// gets the one spec that those legacy positions describe: begin_search
// index FirstKey, find_keys range to LastKey (counted from FirstKey, or from
// the end when negative), every Step-th argument.
//
// A nil *Resolver, and one made from a nil or empty map, answers exactly as
// Keys and FirstKey do. A Resolver is immutable and safe for concurrent
// use.
type Resolver struct {
	// top holds the engine's commands that command.Lookup does not know,
	// by lower-case name; their Subcommands maps are keyed lower-case too.
	top map[string]*command.Info
	// subs holds, indexed by command.ID, the engine's subcommands that the
	// built-in parent lacks, by lower-case name (after the '|'); nil for
	// a parent with none.
	subs []map[string]*command.Info
	// maxLen is the length of the longest name in top, subs and the
	// Subcommands of top's entries: a longer argument is no engine name,
	// answered without folding it or looking it up.
	maxLen int
}

// foldLen is the size of the stack buffer an argument is lower-cased into
// for an engine-table lookup; only engine names longer than it (none in any
// known engine) make a lookup allocate.
const foldLen = 64

// NewResolver returns a Resolver that takes from engine (lower-case command
// name to entry, as command.FetchInfo returns it) what the built-in table
// lacks. Names are lower-cased here, so other keys work too (of two that
// differ only in case, the first in sorted order wins); nil entries are
// ignored. The Resolver copies each entry it keeps (shallowly: it shares
// their slices) and never modifies engine, which the caller may drop or
// reuse afterwards; the entries' slices must not be modified.
func NewResolver(engine map[string]*command.Info) *Resolver {
	r := &Resolver{}
	names := make([]string, 0, len(engine))
	for name := range engine {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		in := engine[name]
		if in == nil || name == "" {
			continue
		}
		name = strings.ToLower(name)
		id := command.Lookup([]byte(name))
		if id == command.Other {
			if _, dup := r.top[name]; !dup {
				if r.top == nil {
					r.top = make(map[string]*command.Info)
				}
				r.top[name] = r.prepare(in)
				r.maxLen = max(r.maxLen, len(name))
			}
			continue
		}
		known := id.Info().Subcommands
		if known == nil {
			continue // the table's entry applies to all of it
		}
		for _, sname := range sortedKeys(in.Subcommands) {
			sub := in.Subcommands[sname]
			sname = strings.ToLower(sname)
			if sub == nil || sname == "" || known[sname] != nil {
				continue
			}
			if r.subs == nil {
				r.subs = make([]map[string]*command.Info, command.NumIDs())
			}
			if r.subs[id] == nil {
				r.subs[id] = make(map[string]*command.Info)
			}
			if _, dup := r.subs[id][sname]; !dup {
				r.subs[id][sname] = r.prepare(sub)
				r.maxLen = max(r.maxLen, len(sname))
			}
		}
	}
	return r
}

// prepare returns a copy of in for the Resolver: Subcommands keyed
// lower-case (nil when empty), and the legacy key positions made a key spec
// when in has none (see Resolver).
func (r *Resolver) prepare(in *command.Info) *command.Info {
	out := *in
	if len(out.KeySpecs) == 0 {
		out.KeySpecs = nil
		if ks, ok := legacySpec(in); ok {
			out.KeySpecs = []command.KeySpec{ks}
		}
	}
	out.Subcommands = nil
	for _, name := range sortedKeys(in.Subcommands) {
		sub := in.Subcommands[name]
		name = strings.ToLower(name)
		if sub == nil || name == "" {
			continue
		}
		if out.Subcommands == nil {
			out.Subcommands = make(map[string]*command.Info, len(in.Subcommands))
		}
		if _, dup := out.Subcommands[name]; !dup {
			out.Subcommands[name] = r.prepare(sub)
			r.maxLen = max(r.maxLen, len(name))
		}
	}
	return &out
}

// legacySpec returns the key spec that the legacy FirstKey, LastKey and
// Step of in describe, and true; or false when in has no such keys (FirstKey
// 0), they are not a range, or in is flagged movablekeys (its keys are
// found by code, not by these positions).
func legacySpec(in *command.Info) (command.KeySpec, bool) {
	first, last, step := in.FirstKey, in.LastKey, in.Step
	if first <= 0 || (last >= 0 && last < first) || in.Flags.Has(command.FlagMovablekeys) {
		return command.KeySpec{}, false
	}
	if last >= 0 {
		last -= first // relative to the start; negative counts from the end
	}
	return command.KeySpec{
		BeginSearch: command.BeginSearch{Type: command.BeginSearchIndex, Index: first},
		FindKeys:    command.FindKeys{Type: command.FindKeysRange, LastKey: last, Step: max(step, 1)},
	}, true
}

func sortedKeys(m map[string]*command.Info) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Keys is Keys with the engine's entries for what the built-in table lacks
// (see Resolver). For a command the table knows it is Keys, with the same
// cost: no allocation when dst has room for the keys. An engine-only
// command or subcommand costs one more map lookup, its name lower-cased
// into a stack buffer: no allocation either (unless the engine has a name
// longer than 64 bytes). An unknown name longer than every engine name is
// answered without a lookup.
func (r *Resolver) Keys(args [][]byte, dst [][]byte) ([][]byte, error) {
	kl := keyList{dst: dst[:0], all: true}
	err := collect(r, args, &kl)
	return kl.dst, err
}

// FirstKey returns the first key r.Keys would return for args, and true;
// or nil and false if r.Keys would return no keys or an error. It does not
// allocate (see Keys for the one exception).
func (r *Resolver) FirstKey(args [][]byte) ([]byte, bool) {
	var kl keyList
	if err := collect(r, args, &kl); err != nil || kl.n == 0 {
		return nil, false
	}
	return kl.first, true
}

// Names returns, sorted, the names of the engine's commands and
// subcommands that r uses because the built-in table lacks them:
// "mycmd" for a command, "client|no-touch" for a subcommand of a built-in
// command. A nil r has none. The slice is new on every call.
func (r *Resolver) Names() []string {
	if r == nil {
		return nil
	}
	var out []string
	for name := range r.top {
		out = append(out, name)
	}
	for id, subs := range r.subs {
		for name := range subs {
			out = append(out, command.ID(id).Name()+"|"+name)
		}
	}
	slices.Sort(out)
	return out
}

// command returns the engine's entry of the command called name (ASCII
// case-insensitively), or nil.
func (r *Resolver) command(name []byte) *command.Info {
	if r == nil {
		return nil
	}
	return r.lookup(r.top, name)
}

// subcommand returns the engine's entry of the subcommand called name of
// the built-in command id, or nil.
func (r *Resolver) subcommand(id command.ID, name []byte) *command.Info {
	if r == nil || int(id) >= len(r.subs) {
		return nil
	}
	return r.lookup(r.subs[id], name)
}

// lookup returns m's entry for name lower-cased, or nil. It does not
// allocate for names up to foldLen bytes, and answers names longer than
// r.maxLen without folding.
func (r *Resolver) lookup(m map[string]*command.Info, name []byte) *command.Info {
	if r == nil || len(m) == 0 || len(name) == 0 || len(name) > r.maxLen {
		return nil
	}
	// Fold into a stack array; the map index with string(b) does not
	// allocate (the compiler special-cases m[string(b)]), as in
	// command.Lookup.
	var buf [foldLen]byte
	b := buf[:0]
	if len(name) > len(buf) {
		b = make([]byte, 0, len(name))
	}
	for _, c := range name {
		b = append(b, lower(c))
	}
	return m[string(b)]
}
