package routing

import (
	"errors"
	"fmt"

	"github.com/respmeter/respmeter/routing/command"
)

// Errors of Keys and FirstKey. Each means the engine will refuse the request
// without touching a key, so a router need not pick a shard for it. The
// engine's reply text (redis-server 7.0.15) is given with each; some texts
// depend on the command family, and EVALSHA, EVALSHA_RO, FCALL and FCALL_RO
// look up the script or function first (NOSCRIPT, "ERR Function not found"),
// so a router that must reproduce the engine's bytes exactly can also send
// the request to any one node and relay its answer.
var (
	// ErrWrongArity means len(args) does not fit the command's (or
	// subcommand's) arity. Engine: "ERR wrong number of arguments for
	// '<name>' command", name lower-case as in command.Info.Name, e.g.
	// 'get' or 'object|encoding'.
	ErrWrongArity = errors.New("routing: wrong number of arguments")

	// ErrBadNumKeys is wrapped by every numkeys error below; test with
	// errors.Is(err, ErrBadNumKeys).
	ErrBadNumKeys = errors.New("routing: bad numkeys")

	// ErrNumKeysNotInteger means the numkeys argument is not a decimal
	// int64 in canonical form (string2ll: no sign '+', no leading zeros or
	// spaces). Engine: "ERR value is not an integer or out of range" for
	// EVAL*, FCALL*, ZUNION/ZINTER/ZDIFF[STORE] and ZINTERCARD; "ERR numkeys
	// should be greater than 0" for LMPOP, BLMPOP, ZMPOP, BZMPOP and
	// SINTERCARD.
	ErrNumKeysNotInteger = fmt.Errorf("%w: numkeys is not an integer", ErrBadNumKeys)

	// ErrNumKeysNegative means numkeys < 0. Engine: "ERR Number of keys
	// can't be negative" for EVAL*/FCALL*; "ERR at least 1 input key is
	// needed for '<name>' command" for ZUNION/ZINTER/ZDIFF[STORE] and
	// ZINTERCARD; "ERR numkeys should be greater than 0" for the *MPOP
	// commands and SINTERCARD.
	ErrNumKeysNegative = fmt.Errorf("%w: numkeys is negative", ErrBadNumKeys)

	// ErrNumKeysZero means numkeys is 0 for a command that needs at least
	// one key (EVAL*/FCALL* accept 0 and get no keys instead). Engine: as
	// for ErrNumKeysNegative.
	ErrNumKeysZero = fmt.Errorf("%w: numkeys is zero", ErrBadNumKeys)

	// ErrNumKeysTooLarge means numkeys is more than the arguments after it.
	// Engine: "ERR Number of keys can't be greater than number of args" for
	// EVAL*/FCALL* and SINTERCARD; "ERR syntax error" for the others.
	ErrNumKeysTooLarge = fmt.Errorf("%w: more keys than arguments", ErrBadNumKeys)

	// ErrNoKeys means a command that requires keys names none in args:
	// COMMAND GETKEYS answers "ERR Invalid arguments specified for
	// command". Engine: the command's own error, e.g. "ERR syntax error"
	// (XREAD without STREAMS) or "ERR When using MIGRATE KEYS option, the
	// key argument must be set to the empty string".
	ErrNoKeys = errors.New("routing: arguments name no keys")
)

// errBadSpec is the internal "invalid_spec" of Redis' getKeysUsingKeySpecs:
// a key spec cannot be applied to these arguments (or, for an incomplete or
// unknown spec, cannot be trusted), so the command-specific rule decides.
var errBadSpec = errors.New("routing: key spec does not apply")

// Keys appends to dst[:0] the keys of the command in args and returns the
// extended slice. args[0] is the command name (any case); for a command with
// subcommands (OBJECT, MEMORY, XINFO, XGROUP, ...) args[1] selects the
// subcommand whose key specs are used. The keys are elements of args, not
// copies, and come in the order COMMAND GETKEYS of redis-server 7.0 lists
// them (duplicates kept). Keys does not allocate when dst has room for the
// keys, and it never retains args or dst.
//
// Keys walks the key specs of routing/command (the Redis docs, "Command key
// specifications") with the semantics of getKeysUsingKeySpecs in Redis 7.0
// src/db.c:
//
//   - begin_search "index" starts at argument Index; "keyword" scans for
//     Keyword (ASCII case-insensitive, as strcasecmp, so up to a NUL byte)
//     from argument StartFrom forwards, or, for a negative StartFrom, from
//     len(args)+StartFrom backwards, never testing the last argument
//     (forwards) or the command name (backwards); a keyword not found gives
//     no keys for that spec.
//   - find_keys "range" takes every Step-th argument from there to LastKey
//     (relative to the start, or to the end when negative; with Limit > 1,
//     only the first 1/Limit of the remaining arguments, as XREAD's
//     STREAMS k1 k2 id1 id2); "keynum" reads numkeys at KeyNumIdx and takes
//     numkeys arguments from FirstKey.
//   - not_key specs (the shard channels of SPUBLISH, SSUBSCRIBE,
//     SUNSUBSCRIBE) are included, since they hash to a slot like keys;
//     COMMAND GETKEYS leaves them out.
//
// When a spec cannot be applied, or is "unknown" or "incomplete", Keys uses
// the command's own rule, as Redis falls back to its getkeys_proc: SORT
// (the sort key and the last STORE destination), SORT_RO, MIGRATE (the key,
// or everything after KEYS, skipping AUTH/AUTH2 arguments), XREAD and
// XREADGROUP (first half after STREAMS).
//
// Unknown commands and subcommands, commands without key specs (PING,
// PUBLISH, ...), SUNSUBSCRIBE without channels, and EVAL, EVALSHA, FCALL and
// their _RO forms with numkeys 0 have no keys and no error. An error comes
// with dst[:0] and is ErrWrongArity (checked first, for the command and then
// the subcommand), one of the ErrNumKeys* errors (all wrapping
// ErrBadNumKeys) or ErrNoKeys; see their docs for the engine's reply.
//
// Keys names the keys COMMAND GETKEYS names (TestKeysOracle checks this
// against redis-server), also where the engine then refuses the request
// ("MSET a 1 b" gives a and b; "LMPOP 3 a b LEFT" gives a, b and LEFT;
// "XREAD STREAMS a b 0" gives a), with these deliberate differences:
//
//   - shard channels (not_key specs) are keys here, and GETKEYS answers
//     "The command has no key arguments";
//   - a numkeys error is an error here, where GETKEYS answers an empty list
//     for EVAL* and FCALL*;
//   - numkeys must be a canonical integer here, where Redis' fallback reads
//     it with atoi and its spec walk truncates it to a C int, so GETKEYS
//     names keys for "EVAL s 1x k", "EVAL s 01 k" or numkeys 4294967297,
//     all of which the engine refuses.
//
// Keys knows only the built-in table of redis-server 7.0; Resolver.Keys
// walks the engine's own entries (ZRANK WITHSCORE on Redis 7.2+, commands
// only the engine knows).
func Keys(args [][]byte, dst [][]byte) ([][]byte, error) {
	kl := keyList{dst: dst[:0], all: true}
	err := collect(nil, args, &kl)
	return kl.dst, err
}

// FirstKey returns the first key Keys would return for args, and true; or
// nil and false if Keys would return no keys or an error. It does not
// allocate.
func FirstKey(args [][]byte) ([]byte, bool) {
	var kl keyList
	if err := collect(nil, args, &kl); err != nil || kl.n == 0 {
		return nil, false
	}
	return kl.first, true
}

// keyList collects keys: it counts them in n, keeps the first, and appends
// them all to dst if all is set.
type keyList struct {
	dst   [][]byte
	first []byte
	n     int
	all   bool
}

func (kl *keyList) add(key []byte) {
	if kl.n == 0 {
		kl.first = key
	}
	kl.n++
	if kl.all {
		kl.dst = append(kl.dst, key)
	}
}

func (kl *keyList) reset() {
	kl.dst = kl.dst[:0]
	kl.first = nil
	kl.n = 0
}

// collect puts the keys of args into kl (see Keys), taking what the
// built-in table lacks from r (see Resolver; nil r: the table only).
func collect(r *Resolver, args [][]byte, kl *keyList) error {
	if len(args) == 0 {
		return nil
	}
	return collectOf(r, command.Lookup(args[0]), args, kl)
}

// collectOf is collect for a request whose command id is known already
// (command.Lookup(args[0]), or Resolver.Lookup's: an engine-only id is
// looked up by name again, as command.Other is), so the name is not
// case-folded and looked up a second time per command.
func collectOf(r *Resolver, id command.ID, args [][]byte, kl *keyList) error {
	if len(args) == 0 {
		return nil
	}
	if int(id) >= command.NumIDs() {
		id = command.Other // an engine-only command: its entry is found by name below
	}
	var info, sub *command.Info
	if id != command.Other {
		info = r.Info(id)
		if info.Subcommands != nil && len(args) >= 2 {
			sub = r.subcommand(id, info, args[1])
		}
	} else if info = r.command(args[0]); info == nil {
		return nil
	} else if info.Subcommands != nil && len(args) >= 2 {
		sub = r.lookup(info.Subcommands, args[1])
	}
	return collectInfo(id, info, sub, args, kl)
}

// collectInfo is collectOf once the command's entry (info) and, if args[1]
// names one, its subcommand's (sub) are found.
func collectInfo(id command.ID, info, sub *command.Info, args [][]byte, kl *keyList) error {
	if !arityOK(info.Arity, len(args)) {
		return ErrWrongArity
	}
	if info.Subcommands != nil {
		if len(args) < 2 {
			return nil // e.g. bare COMMAND (arity -1)
		}
		if info = sub; info == nil {
			return nil // the engine answers "unknown subcommand"
		}
		if !arityOK(info.Arity, len(args)) {
			return ErrWrongArity
		}
	}
	if len(info.KeySpecs) == 0 {
		return nil
	}
	err := walkSpecs(info, args, kl)
	if err != nil {
		// The spec walk failed: like getKeysFromCommandWithSpecs, drop
		// what it found and try the command's getkeys_proc equivalent.
		kl.reset()
		switch id {
		case command.Sort:
			err = sortKeys(args, kl)
		case command.SortRo:
			kl.add(args[1])
			err = nil
		case command.Migrate:
			err = migrateKeys(args, kl)
		case command.Xread, command.Xreadgroup:
			err = xreadKeys(args, kl)
		}
	}
	if err == errBadSpec {
		err = nil // no rule: no keys, judged below
	}
	if err != nil {
		kl.reset()
		return err
	}
	if kl.n == 0 && !info.Flags.Has(command.FlagNoMandatoryKeys) && hasRealKeySpec(info) {
		return ErrNoKeys
	}
	return nil
}

// hasRealKeySpec reports whether info has a key spec for actual keys, not
// only not_key ones (shard channels: SUNSUBSCRIBE alone is fine).
func hasRealKeySpec(info *command.Info) bool {
	for i := range info.KeySpecs {
		if !info.KeySpecs[i].Flags.Has(command.KeyNotKey) {
			return true
		}
	}
	return false
}

// arityOK reports whether argc arguments (the name included) fit arity:
// exactly arity if positive, at least -arity if negative.
func arityOK(arity, argc int) bool {
	if arity >= 0 {
		return argc == arity
	}
	return argc >= -arity
}

// walkSpecs applies every key spec of info to args, adding keys to kl. It
// returns errBadSpec when a spec does not apply (Redis' invalid_spec) or is
// incomplete, and a numkeys error when a keynum argument is bad.
func walkSpecs(info *command.Info, args [][]byte, kl *keyList) error {
	argc := len(args)
	noMandatory := info.Flags.Has(command.FlagNoMandatoryKeys)
	for i := range info.KeySpecs {
		spec := &info.KeySpecs[i]
		var first int
		switch bs := &spec.BeginSearch; bs.Type {
		case command.BeginSearchIndex:
			first = bs.Index
		case command.BeginSearchKeyword:
			first = findKeyword(args, bs.Keyword, bs.StartFrom)
			if first == 0 {
				continue // keyword absent: this spec names no keys
			}
		default:
			return errBadSpec
		}

		var last, step int
		switch fk := &spec.FindKeys; fk.Type {
		case command.FindKeysRange:
			step = fk.Step
			switch {
			case fk.LastKey >= 0:
				last = first + fk.LastKey
			case fk.Limit <= 1:
				last = argc + fk.LastKey
			default: // LastKey is -1 whenever Limit is set
				last = first + (argc-first)/fk.Limit + fk.LastKey
			}
		case command.FindKeysKeynum:
			step = fk.Step
			idx := first + fk.KeyNumIdx
			if idx >= argc {
				return errBadSpec
			}
			n, ok := parseInt(args[idx])
			switch {
			case !ok:
				return ErrNumKeysNotInteger
			case n < 0:
				return ErrNumKeysNegative
			}
			first += fk.FirstKey
			if n == 0 {
				if noMandatory {
					continue // EVAL "..." 0: no keys
				}
				return ErrNumKeysZero
			}
			if n > int64(argc-first) {
				return ErrNumKeysTooLarge
			}
			last = first + int(n) - 1
		default:
			return errBadSpec
		}

		if first >= argc || last >= argc || last < first || step < 1 {
			return errBadSpec
		}
		for j := first; j <= last; j += step {
			kl.add(args[j])
		}
		if spec.Flags.Has(command.KeyIncomplete) {
			return errBadSpec
		}
	}
	return nil
}

// findKeyword returns the index after the argument equal to keyword, or 0 if
// there is none, scanning as Redis 7.0 does: from startFrom up to but not
// including the last argument, or, for startFrom < 0, from
// len(args)+startFrom down to but not including the command name.
func findKeyword(args [][]byte, keyword string, startFrom int) int {
	argc := len(args)
	if startFrom > 0 {
		for i := startFrom; i < argc-1; i++ {
			if keywordEq(args[i], keyword) {
				return i + 1
			}
		}
		return 0
	}
	// A start past the end finds nothing (Redis breaks out at once).
	for i := argc + startFrom; i > 0 && i < argc; i-- {
		if keywordEq(args[i], keyword) {
			return i + 1
		}
	}
	return 0
}

// keywordEq reports whether arg equals keyword as C strcasecmp sees them:
// ASCII case-insensitively, with arg ending at its first NUL byte.
func keywordEq(arg []byte, keyword string) bool {
	for i, c := range arg {
		if c == 0 {
			return i == len(keyword)
		}
		if i >= len(keyword) || lower(c) != lower(keyword[i]) {
			return false
		}
	}
	return len(arg) == len(keyword)
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// parseInt parses b as Redis' string2ll does: an optional '-', then "0" or
// digits without a leading zero, within int64; nothing else.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || (b[0] == '0' && (len(b) > 1 || neg)) {
		return 0, false // "-", "01", "-0"
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if u > (1<<64-1-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// sortKeys is Redis 7.0 sortGetKeys: the sort key, then the destination of
// the last STORE. Options are scanned from argument 2; LIMIT skips two
// arguments, GET and BY one, anything else none, so "STORE" right after
// another STORE is itself taken as a keyword.
func sortKeys(args [][]byte, kl *keyList) error {
	kl.add(args[1])
	store := 0
	for i := 2; i < len(args); i++ {
		switch a := args[i]; {
		case keywordEq(a, "limit"):
			i += 2
		case keywordEq(a, "get"), keywordEq(a, "by"):
			i++
		case keywordEq(a, "store") && i+1 < len(args):
			store = i + 1
		}
	}
	if store > 0 {
		kl.add(args[store])
	}
	return nil
}

// migrateKeys is Redis 7.0 migrateGetKeys: argument 3, or, if a KEYS option
// follows argument 5 (AUTH's one and AUTH2's two arguments skipped), every
// argument after KEYS. KEYS with a non-empty argument 3 is an error.
func migrateKeys(args [][]byte, kl *keyList) error {
	first, num := 3, 1
	for i := 6; i < len(args); i++ {
		a := args[i]
		if keywordEq(a, "keys") {
			if len(args[3]) > 0 {
				return ErrNoKeys
			}
			first, num = i+1, len(args)-i-1
			break
		}
		switch {
		case keywordEq(a, "auth"):
			i++
		case keywordEq(a, "auth2"):
			i += 2
		}
	}
	for j := first; j < first+num; j++ {
		kl.add(args[j])
	}
	return nil
}

// xreadKeys is Redis 7.0 xreadGetKeys: the options BLOCK, COUNT (one
// argument), GROUP (two) and NOACK are skipped up to STREAMS; the first half
// of the even number of arguments after it are the keys.
func xreadKeys(args [][]byte, kl *keyList) error {
	streams := -1
scan:
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case keywordEq(a, "block"), keywordEq(a, "count"):
			i++
		case keywordEq(a, "group"):
			i += 2
		case keywordEq(a, "noack"):
		case keywordEq(a, "streams"):
			streams = i
			break scan
		default:
			break scan
		}
	}
	num := len(args) - streams - 1
	if streams < 0 || num == 0 || num%2 != 0 {
		return ErrNoKeys
	}
	for j := streams + 1; j < streams+1+num/2; j++ {
		kl.add(args[j])
	}
	return nil
}
