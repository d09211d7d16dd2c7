package command

import "slices"

// ConnEffect says what a command does to the connection that sends it,
// beyond its reply; see ConnState.
type ConnEffect uint8

// The connection effects.
const (
	// ConnNone: the command's effect does not depend on which connection
	// sends it (GET, CLIENT LIST, CLIENT KILL, ...).
	ConnNone ConnEffect = iota
	// ConnReads: it answers with this connection's own identity or state
	// (CLIENT ID, GETNAME, INFO, TRACKINGINFO, GETREDIR): a client must
	// ask on a connection of its own, not a shared one.
	ConnReads
	// ConnSets: it sets state of this connection that later commands
	// depend on (AUTH, HELLO, SELECT, READONLY, READWRITE, CLIENT SETNAME,
	// TRACKING, CACHING, REPLY, NO-EVICT, and newer ones such as Redis
	// 7.2's CLIENT NO-TOUCH and SETINFO or Valkey 8's CLIENT CAPA and
	// IMPORT-SOURCE): a client spread over several engine connections
	// must have it replayed on each of them.
	ConnSets
)

// String returns "none", "reads" or "sets".
func (e ConnEffect) String() string {
	switch e {
	case ConnReads:
		return "reads"
	case ConnSets:
		return "sets"
	}
	return "none"
}

// ConnState returns the connection effect of the command or subcommand
// described by in (an effective entry: the built-in table's, or the
// engine's as routing.Resolver gives it; for a command with subcommands,
// the subcommand's entry). It decides by rule, so that a subcommand the
// built-in table does not know is classified from the engine's COMMAND
// INFO:
//
//   - A subcommand in the ACL category @connection (all of them belong to
//     CLIENT in Redis 7.0 to 8.0 and Valkey 8) that cannot run in a script
//     (flag noscript: it would act on the script's fake client) is about
//     the sending connection. Flagged admin, it acts on other clients or
//     the server (KILL, PAUSE, UNPAUSE, UNBLOCK, LIST) and is ConnNone,
//     except CLIENT NO-EVICT, which Redis flags admin because it exempts
//     the sender from eviction. Otherwise a subcommand that needs an
//     argument (|arity| >= 3: the value it sets) is ConnSets, and one
//     without (arity 2: ID, GETNAME, INFO) is ConnReads. CLIENT HELP is
//     not flagged noscript and is ConnNone.
//   - Top-level commands have no such marker (SELECT and ECHO have the
//     same flags and categories), so the protocol's fixed set is named:
//     AUTH, HELLO, SELECT, READONLY and READWRITE are ConnSets. Their set
//     has not grown since Redis 6 (HELLO); new state setters come as
//     CLIENT subcommands.
//
// RESET (which clears all of it), MULTI/EXEC/WATCH and SUBSCRIBE and its
// kind change how a connection answers rather than set state to replay,
// and are ConnNone here: callers handle them by their IDs. A nil in is
// ConnNone.
func ConnState(in *Info) ConnEffect {
	if in == nil {
		return ConnNone
	}
	switch in.Name {
	case "auth", "hello", "select", "readonly", "readwrite":
		return ConnSets
	}
	if !isSubcommand(in.Name) || !slices.Contains(in.ACLCategories, "@connection") || !in.Flags.Has(FlagNoscript) {
		return ConnNone
	}
	if in.Flags.Has(FlagAdmin) && in.Name != "client|no-evict" {
		return ConnNone
	}
	if in.Arity >= 3 || in.Arity <= -3 {
		return ConnSets
	}
	return ConnReads
}

func isSubcommand(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] == '|' {
			return true
		}
	}
	return false
}
