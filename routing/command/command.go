// Package command is a fixed table of the commands of redis-server 7.0: it
// maps a command name to a small integer ID and gives each command its arity,
// flags, ACL categories, command tips and key specifications.
//
// The table is generated (commands_gen.go, made by `go generate` running
// gen.go) from testdata/commands.json, which is the COMMAND INFO reply of
// redis-server 7.0.15 captured by `go run gen.go -capture host:port`. The
// meaning of every field is that of the Redis docs for COMMAND INFO and
// "Command key specifications". Do not edit the table by hand.
//
// FetchInfo reads the same kind of entries from a running engine; the
// engine's entries decide (routing.Resolver builds the effective table from
// them, with this table as the fallback); it never changes this table.
//
// IDs are dense (0 to NumIDs()-1) and sorted by name, with Other = 0 shared by
// every unknown command, so they suit array-indexed counters and a bounded set
// of metric labels (Names). They are stable only within one generated table:
// regenerating from another server version may renumber them, so never
// persist an ID or send it over the wire; persist Name() instead.
//
// Concurrency: everything here is immutable after package initialization and
// safe for concurrent use. Callers must not modify an *Info of the table, its
// slices or its Subcommands map (the entries FetchInfo returns are the
// caller's).
package command

import "strings"

//go:generate go run gen.go

// ID identifies a top-level command within this generated table. The zero
// value is Other.
type ID uint16

// Other is the ID of every command not in the table (and of the empty name).
// Its Name is "other" and its Info is conservative; see Info.
const Other ID = 0

// Lookup returns the ID of the command called name, compared ASCII
// case-insensitively ("GET", "get" and "gEt" are Get), or Other if the name is
// unknown, empty or longer than the longest known name. It does not allocate
// and does not retain name, so name may point into a connection's read buffer.
func Lookup(name []byte) ID {
	if len(name) == 0 || len(name) > maxNameLen {
		return Other
	}
	// Fold into a stack array: the map index with string(b) below does not
	// allocate (the compiler special-cases m[string(b)]), so neither does Lookup.
	var buf [maxNameLen]byte
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return byName[string(buf[:len(name)])]
}

// Name returns the lower-case name of the command, e.g. "get" or "client";
// "other" for Other and for any id outside the table.
func (id ID) Name() string {
	if int(id) >= len(names) {
		return names[Other]
	}
	return names[id]
}

// String returns id.Name().
func (id ID) String() string { return id.Name() }

// Info returns the table entry of the command. It is never nil: Other and any
// id outside the table get the conservative entry described at Info.
func (id ID) Info() *Info {
	if int(id) >= len(infos) {
		return &infos[Other]
	}
	return &infos[id]
}

// Blocks reports whether the command may hold its connection until a
// timeout or another client's write: the COMMAND INFO flag "blocking"
// (BLPOP, XREAD, ...), and WAIT, which redis-server 7.0 does not flag
// (it waits up to its timeout for replicas' acknowledgements).
func (id ID) Blocks() bool {
	return id == Wait || id.Info().Flags.Has(FlagBlocking)
}

// Names returns the names of all IDs, indexed by ID: Names()[0] is "other",
// Names()[Get] is "get". It is the complete, fixed set of command labels. The
// slice is a fresh copy on every call.
func Names() []string {
	out := make([]string, len(names))
	copy(out, names[:])
	return out
}

// NumIDs returns the number of IDs, Other included; IDs are 0 to NumIDs()-1.
func NumIDs() int { return len(names) }

// Info describes one command as COMMAND INFO reports it in Redis 7.0.
//
// For Other the entry is conservative: Name "other", Arity -1, Flags
// FlagWrite|FlagMovablekeys (assume it may write and that its keys cannot be
// found from a key spec), no ACL categories, tips or key specs.
type Info struct {
	// Name is the lower-case name; subcommands are "parent|sub", e.g. "client|reply".
	Name string
	// Arity counts the command name too; negative -N means at least N arguments.
	Arity int
	// Flags are the command flags.
	Flags Flags
	// FirstKey, LastKey and Step are the legacy key positions (argv indexes,
	// 0 is the command name; LastKey negative counts from the end). They are
	// 0 when the command has no keys or they cannot be described this way;
	// prefer KeySpecs.
	FirstKey, LastKey, Step int
	// ACLCategories are the ACL categories as the server reports them, e.g. "@read".
	ACLCategories []string
	// Tips are the command tips, e.g. "nondeterministic_output" or
	// "request_policy:all_shards".
	Tips []string
	// KeySpecs locate the command's keys in its arguments.
	KeySpecs []KeySpec
	// Subcommands maps a lower-case subcommand name ("reply" for
	// "client|reply") to its entry; nil for commands without subcommands.
	Subcommands map[string]*Info
}

// Subcommand returns the entry of the subcommand called name (compared ASCII
// case-insensitively, e.g. "REPLY" for "client|reply"), or nil if there is
// none. Like Lookup it does not allocate or retain name.
func (i *Info) Subcommand(name []byte) *Info {
	if len(i.Subcommands) == 0 || len(name) == 0 || len(name) > maxNameLen {
		return nil
	}
	var buf [maxNameLen]byte // see Lookup
	for j, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[j] = c
	}
	return i.Subcommands[string(buf[:len(name)])]
}

// Flags is a set of command flags, one bit per flag that COMMAND INFO can
// report (Redis 7.0 server.c), plus the flags that server hides from the reply
// (may_replicate, sentinel, only_sentinel, protected) so that the bit
// positions do not move if a later capture shows them.
type Flags uint64

// The command flags, named after the COMMAND INFO flag: FlagSkipMonitor is
// "skip_monitor".
const (
	FlagWrite           Flags = 1 << iota // write
	FlagReadonly                          // readonly
	FlagDenyoom                           // denyoom
	FlagModule                            // module
	FlagAdmin                             // admin
	FlagPubsub                            // pubsub
	FlagNoscript                          // noscript
	FlagBlocking                          // blocking
	FlagLoading                           // loading
	FlagStale                             // stale
	FlagSkipMonitor                       // skip_monitor
	FlagSkipSlowlog                       // skip_slowlog
	FlagAsking                            // asking
	FlagFast                              // fast
	FlagNoAuth                            // no_auth
	FlagMayReplicate                      // may_replicate
	FlagSentinel                          // sentinel
	FlagOnlySentinel                      // only_sentinel
	FlagNoMandatoryKeys                   // no_mandatory_keys
	FlagProtected                         // protected
	FlagNoAsyncLoading                    // no_async_loading
	FlagNoMulti                           // no_multi
	FlagMovablekeys                       // movablekeys
	FlagAllowBusy                         // allow_busy
)

// flagNames are the COMMAND INFO names of the flags, indexed by bit.
var flagNames = [...]string{
	"write", "readonly", "denyoom", "module", "admin", "pubsub", "noscript",
	"blocking", "loading", "stale", "skip_monitor", "skip_slowlog", "asking",
	"fast", "no_auth", "may_replicate", "sentinel", "only_sentinel",
	"no_mandatory_keys", "protected", "no_async_loading", "no_multi",
	"movablekeys", "allow_busy",
}

// Has reports whether f contains every flag in x.
func (f Flags) Has(x Flags) bool { return f&x == x }

// String returns the flag names joined by "|", e.g. "readonly|fast", or ""
// for no flags. Unnamed bits are left out.
func (f Flags) String() string { return bitNames(uint64(f), flagNames[:]) }

// KeySpec is one key specification of a command: where to start looking in
// the arguments (BeginSearch), how to find the keys from there (FindKeys), and
// what the command does with them (Flags). See the Redis docs "Command key
// specifications".
type KeySpec struct {
	// Notes is the server's remark on the spec, often empty.
	Notes string
	// Flags says how the keys are accessed.
	Flags KeySpecFlags
	// BeginSearch finds the argument where the key search starts.
	BeginSearch BeginSearch
	// FindKeys finds the keys from the argument BeginSearch found.
	FindKeys FindKeys
}

// BeginSearchType is the type of a key spec's begin_search.
type BeginSearchType uint8

// The begin_search types.
const (
	BeginSearchUnknown BeginSearchType = iota // "unknown": keys cannot be found from the spec
	BeginSearchIndex                          // "index": start at a fixed argument
	BeginSearchKeyword                        // "keyword": start after a keyword
)

// BeginSearch is a key spec's begin_search.
type BeginSearch struct {
	Type BeginSearchType
	// Index is the argv index (0 is the command name) where the search
	// starts. Type BeginSearchIndex only.
	Index int
	// Keyword is the argument (as the server spells it, e.g. "STREAMS") after
	// which the keys start. Type BeginSearchKeyword only.
	Keyword string
	// StartFrom is the argv index where the scan for Keyword starts; negative
	// counts from the end and scans backwards. Type BeginSearchKeyword only.
	StartFrom int
}

// FindKeysType is the type of a key spec's find_keys.
type FindKeysType uint8

// The find_keys types.
const (
	FindKeysUnknown FindKeysType = iota // "unknown": keys cannot be found from the spec
	FindKeysRange                       // "range": a range of arguments
	FindKeysKeynum                      // "keynum": an argument gives the number of keys
)

// FindKeys is a key spec's find_keys. Indexes are relative to the argument
// BeginSearch found.
type FindKeys struct {
	Type FindKeysType
	// LastKey is the index of the last key; negative counts from the end of
	// the arguments (-1 is the last argument). Type FindKeysRange only.
	LastKey int
	// Step is the number of arguments from one key to the next ("keystep").
	// Types FindKeysRange and FindKeysKeynum.
	Step int
	// Limit, when LastKey is -1, stops the range at 1/Limit of the remaining
	// arguments (0 or 1: no limit). Type FindKeysRange only.
	Limit int
	// KeyNumIdx is the index of the argument holding the number of keys.
	// Type FindKeysKeynum only.
	KeyNumIdx int
	// FirstKey is the index of the first key. Type FindKeysKeynum only.
	FirstKey int
}

// KeySpecFlags is a set of key spec flags.
type KeySpecFlags uint16

// The key spec flags, named after the COMMAND INFO flag: KeyRO is "RO",
// KeyNotKey is "not_key".
const (
	KeyRO            KeySpecFlags = 1 << iota // RO: read-only access
	KeyRW                                     // RW: read-write access
	KeyOW                                     // OW: overwrite
	KeyRM                                     // RM: deletes the key
	KeyAccess                                 // access: returns or copies user data
	KeyUpdate                                 // update: updates the value
	KeyInsert                                 // insert: adds data, no update or delete
	KeyDelete                                 // delete: removes data
	KeyNotKey                                 // not_key: not a key, but hash-slotted like one
	KeyIncomplete                             // incomplete: the spec may miss keys
	KeyVariableFlags                          // variable_flags: flags depend on arguments
)

var keySpecFlagNames = [...]string{
	"RO", "RW", "OW", "RM", "access", "update", "insert", "delete", "not_key",
	"incomplete", "variable_flags",
}

// Has reports whether f contains every flag in x.
func (f KeySpecFlags) Has(x KeySpecFlags) bool { return f&x == x }

// String returns the flag names joined by "|", e.g. "RO|access", or "" for
// no flags.
func (f KeySpecFlags) String() string { return bitNames(uint64(f), keySpecFlagNames[:]) }

func bitNames(f uint64, names []string) string {
	var b strings.Builder
	for i, n := range names {
		if f&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(n)
		}
	}
	return b.String()
}

// otherInfo is the conservative entry of Other (infos[Other]).
var otherInfo = Info{
	Name:  "other",
	Arity: -1,
	Flags: FlagWrite | FlagMovablekeys,
}
