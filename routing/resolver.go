package routing

import (
	"slices"
	"strings"

	"github.com/respmeter/respmeter/routing/command"
)

// Resolver is the effective command table of one engine: the engine's own
// COMMAND INFO entries (as command.FetchInfo returns them) where it has
// them, the built-in table (routing/command, generated from redis-server
// 7.0.15) where it does not. It finds the keys of commands like Keys and
// FirstKey, walking the effective entry's key specs with the rules of Keys
// (the Redis docs, "Command key specifications": begin_search index or
// keyword, find_keys range or keynum), and gives each command its metric ID,
// flags (Blocks) and tips (Info, CallInfo).
//
// The engine decides. When the engine's table has key specs (Redis and
// Valkey 7.0 and later), every command it reports is described by its
// entry: arity, flags, key specs, tips and subcommands. So ZRANK, whose
// arity Redis 7.2 made "at least 3" for WITHSCORE, finds its key in
// "ZRANK z m WITHSCORE"; WAITAOF, which the engine flags "blocking", Blocks;
// CLIENT NO-TOUCH is a subcommand of CLIENT. Built-in commands the engine
// does not report keep the built-in entry, and Redis' own fallback rules
// for SORT, SORT_RO, MIGRATE, XREAD and XREADGROUP apply to the engine's
// entries as to the table's. An engine of the table's version gives entries
// equal to the table's, so nothing changes there.
//
// When the engine's table has no key specs at all (Redis before 7.0,
// Dragonfly), the built-in table keeps every command it knows, and the
// engine's entries are used only where the table has none: a command that
// command.Lookup answers with command.Other, or a subcommand of a built-in
// command that Info.Subcommand does not find. Such an entry whose legacy
// FirstKey is positive and that is not flagged movablekeys gets the one
// spec that those legacy positions describe: begin_search index FirstKey,
// find_keys range to LastKey (counted from FirstKey, or from the end when
// negative), every Step-th argument.
//
// An engine-only command has no fallback rule: when its key spec cannot be
// applied or is unknown or incomplete it has no keys (as in Redis for a
// command without a getkeys function), and Keys says ErrNoKeys unless the
// command is flagged no_mandatory_keys.
//
// Metric IDs stay a fixed, bounded set: the built-in IDs (0 to
// command.NumIDs()-1, names from command.Names), then one ID for each of
// the first MaxEngineLabels engine-only commands in name order; any further
// engine-only command, like every name the engine does not know either, is
// command.Other. Labels lists them.
//
// A nil *Resolver, and one made from a nil or empty map, answers exactly as
// Keys, FirstKey, command.Lookup and ID.Info do. A Resolver is immutable and
// safe for concurrent use.
type Resolver struct {
	// override is set when the engine's entries replace the built-in ones
	// (the engine's table has key specs).
	override bool
	// infos holds the effective entry of every ID: indexes below
	// command.NumIDs() are the built-in IDs (nil: the built-in entry),
	// the rest the labelled engine-only commands.
	infos []*command.Info
	// labels are the names of infos' engine-only IDs, in ID order.
	labels []string
	// ids maps the lower-case name of a labelled engine-only command to
	// its ID.
	ids map[string]command.ID
	// top holds the engine's commands that command.Lookup does not know,
	// by lower-case name; their Subcommands maps are keyed lower-case too.
	top map[string]*command.Info
	// subs holds, indexed by command.ID, the engine's subcommands that the
	// built-in parent lacks, by lower-case name (after the '|'); nil for
	// a parent with none. Without override only.
	subs []map[string]*command.Info
	// maxLen is the length of the longest name in top, subs and the
	// Subcommands of the engine's entries: a longer argument is no engine
	// name, answered without folding it or looking it up.
	maxLen int
}

// MaxEngineLabels is the most engine-only commands that get a metric ID
// and label of their own (see Resolver); Redis 8.0.2 reports 25 (WAITAOF,
// the hash-field expiry and the vector set commands), Valkey 8.1.1 2
// (WAITAOF, COMMANDLOG). It bounds the label set whatever the engine
// reports (a module may add hundreds).
const MaxEngineLabels = 128

// foldLen is the size of the stack buffer an argument is lower-cased into
// for an engine-table lookup; only engine names longer than it (none in any
// known engine) make a lookup allocate.
const foldLen = 64

// NewResolver returns the Resolver of engine (lower-case command name to
// entry, as command.FetchInfo returns it; see Resolver for what it takes
// from it). Names are lower-cased here, so other keys work too (of two that
// differ only in case, the first in sorted order wins); nil entries are
// ignored. The Resolver copies each entry it keeps (shallowly: it shares
// their slices) and never modifies engine, which the caller may drop or
// reuse afterwards; the entries' slices must not be modified.
func NewResolver(engine map[string]*command.Info) *Resolver {
	r := &Resolver{infos: make([]*command.Info, command.NumIDs())}
	names := make([]string, 0, len(engine))
	for name, in := range engine {
		names = append(names, name)
		if in != nil && hasKeySpecs(in) {
			r.override = true
		}
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
				if len(r.labels) < MaxEngineLabels {
					if r.ids == nil {
						r.ids = make(map[string]command.ID)
					}
					r.ids[name] = command.ID(len(r.infos))
					r.infos = append(r.infos, r.top[name])
					r.labels = append(r.labels, name)
				}
			}
			continue
		}
		if r.override {
			if r.infos[id] == nil {
				r.infos[id] = r.prepare(in)
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

// hasKeySpecs reports whether in or one of its subcommands has a key spec.
func hasKeySpecs(in *command.Info) bool {
	if len(in.KeySpecs) > 0 {
		return true
	}
	for _, s := range in.Subcommands {
		if s != nil && len(s.KeySpecs) > 0 {
			return true
		}
	}
	return false
}

// Lookup returns the metric ID of the command called name (ASCII
// case-insensitively): command.Lookup's ID for a built-in command, the
// engine-only command's own ID (command.NumIDs() and up, see Resolver), or
// command.Other. Like command.Lookup it does not allocate or retain name
// (unless the engine has a name longer than 64 bytes).
func (r *Resolver) Lookup(name []byte) command.ID {
	id := command.Lookup(name)
	if id != command.Other || r == nil || len(r.ids) == 0 || len(name) > r.maxLen || len(name) == 0 {
		return id
	}
	var buf [foldLen]byte // see lookup
	b := buf[:0]
	if len(name) > len(buf) {
		b = make([]byte, 0, len(name))
	}
	for _, c := range name {
		b = append(b, lower(c))
	}
	return r.ids[string(b)] // Other (0) when absent
}

// Info returns the effective entry of id (see Resolver): the engine's, or
// the built-in one (id.Info(), conservative for command.Other and IDs
// outside the table). It is never nil and must not be modified.
func (r *Resolver) Info(id command.ID) *command.Info {
	if r == nil || int(id) >= len(r.infos) || r.infos[id] == nil {
		return id.Info()
	}
	return r.infos[id]
}

// CallInfo returns the effective entry that applies to the request args
// of the command id (as Lookup gave it): its subcommand's entry when the
// command has subcommands and args[1] names one (ASCII case-insensitively),
// else the command's own (Info). It does not allocate.
func (r *Resolver) CallInfo(id command.ID, args [][]byte) *command.Info {
	info := r.Info(id)
	if len(args) < 2 || info.Subcommands == nil {
		return info
	}
	if sub := r.subcommand(id, info, args[1]); sub != nil {
		return sub
	}
	return info
}

// Blocks reports whether the command may hold its connection until a
// timeout or another client's write, by its effective entry: the COMMAND
// INFO flag "blocking" (BLPOP, XREAD, WAITAOF, ...), and WAIT, which
// redis-server 7.0 does not flag. command.ID.Blocks is the built-in
// table's answer.
func (r *Resolver) Blocks(id command.ID) bool {
	return id == command.Wait || r.Info(id).Flags.Has(command.FlagBlocking)
}

// Name returns the metric label of id: Labels()[id], or "other" for an ID
// outside them. It does not allocate.
func (r *Resolver) Name(id command.ID) string {
	if n := int(id) - command.NumIDs(); r != nil && n >= 0 && n < len(r.labels) {
		return r.labels[n]
	}
	return id.Name()
}

// NumIDs returns the number of metric IDs (see Resolver): command.NumIDs()
// plus the labelled engine-only commands.
func (r *Resolver) NumIDs() int {
	if r == nil {
		return command.NumIDs()
	}
	return len(r.infos)
}

// Labels returns the metric label of every ID, indexed by ID: the built-in
// names (command.Names) followed by the labelled engine-only commands'
// names in ID order. It is the complete, fixed label set of this engine; a
// fresh slice on every call.
func (r *Resolver) Labels() []string {
	out := command.Names()
	if r != nil {
		out = append(out, r.labels...)
	}
	return out
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

// KeysOf is Keys for a request whose command id the caller has from
// r.Lookup(args[0]) already: the same keys and errors, without looking the
// name up again (the proxy looks every command up once, for its metrics,
// and routes by its keys).
func (r *Resolver) KeysOf(id command.ID, args [][]byte, dst [][]byte) ([][]byte, error) {
	kl := keyList{dst: dst[:0], all: true}
	err := collectOf(r, id, args, &kl)
	return kl.dst, err
}

// FirstKeyOf is FirstKey for a request whose command id is r.Lookup(args[0])
// (see KeysOf).
func (r *Resolver) FirstKeyOf(id command.ID, args [][]byte) ([]byte, bool) {
	var kl keyList
	if err := collectOf(r, id, args, &kl); err != nil || kl.n == 0 {
		return nil, false
	}
	return kl.first, true
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
// subcommands that the built-in table lacks: "mycmd" for a command,
// "client|no-touch" for a subcommand of a built-in command that the
// built-in entry lacks. A nil r has none. The slice is new on every call.
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
	for id, in := range r.infos[:min(len(r.infos), command.NumIDs())] {
		if in == nil {
			continue
		}
		known := command.ID(id).Info().Subcommands
		for name := range in.Subcommands {
			if known[name] == nil {
				out = append(out, command.ID(id).Name()+"|"+name)
			}
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

// subcommand returns the entry of the subcommand called name of the
// command id whose effective entry is info, or nil: from the engine's
// entry, or from the built-in one and then the engine's additions to it.
func (r *Resolver) subcommand(id command.ID, info *command.Info, name []byte) *command.Info {
	if r != nil && int(id) < len(r.infos) && r.infos[id] == info {
		return r.lookup(info.Subcommands, name) // the engine's entry
	}
	if sub := info.Subcommand(name); sub != nil || r == nil || int(id) >= len(r.subs) {
		return sub
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
