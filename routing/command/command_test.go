package command

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/respmeter/respmeter/routing/command/internal/cmdgen"
)

func loadJSON(t testing.TB) *cmdgen.File {
	t.Helper()
	data, err := os.ReadFile("testdata/commands.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := cmdgen.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestNamesRoundTrip(t *testing.T) {
	names := Names()
	if len(names) != NumIDs() {
		t.Fatalf("len(Names()) = %d, NumIDs() = %d", len(names), NumIDs())
	}
	if names[0] != "other" || Other.Name() != "other" {
		t.Fatalf("Names()[0] = %q, Other.Name() = %q, want other", names[0], Other.Name())
	}
	if !slices.IsSorted(names[1:]) {
		t.Error("Names()[1:] not sorted")
	}
	for i, name := range names {
		id := ID(i)
		if id.Name() != name {
			t.Errorf("ID(%d).Name() = %q, Names()[%d] = %q", i, id.Name(), i, name)
		}
		if got := id.Info().Name; got != name {
			t.Errorf("ID(%d).Info().Name = %q, want %q", i, got, name)
		}
		mixed := []byte(name)
		for j := 0; j < len(mixed); j += 2 {
			mixed[j] = bytes.ToUpper(mixed[j : j+1])[0]
		}
		for _, in := range []string{name, strings.ToUpper(name), string(mixed)} {
			if got := Lookup([]byte(in)); got != id {
				t.Errorf("Lookup(%q) = %d (%s), want %d", in, got, got, id)
			}
		}
	}
	names[1] = "mutated"
	if Names()[1] == "mutated" {
		t.Error("Names() returned the table itself, want a copy")
	}
}

func TestLookupOther(t *testing.T) {
	long := strings.Repeat("a", maxNameLen+1)
	for _, in := range []string{
		"", "nosuchcommand", "get ", " get", "ge", "gett", "client|reply", "CLIENT REPLY",
		"g\x00t", "gét", "\xff\xfe", "other", "OTHER", long, "get" + long, strings.Repeat("x", 1<<16),
	} {
		if got := Lookup([]byte(in)); got != Other {
			t.Errorf("Lookup(%q) = %s, want other", in, got)
		}
	}
	if got := Lookup(nil); got != Other {
		t.Errorf("Lookup(nil) = %s, want other", got)
	}
	// Exactly the longest length still works.
	longest := ""
	for _, n := range Names() {
		if len(n) > len(longest) {
			longest = n
		}
	}
	if len(longest) > maxNameLen || Lookup([]byte(strings.ToUpper(longest))).Name() != longest {
		t.Errorf("longest name %q (maxNameLen %d) not found", longest, maxNameLen)
	}
}

func TestOutOfRange(t *testing.T) {
	for _, id := range []ID{ID(NumIDs()), ID(NumIDs() + 1), ^ID(0)} {
		if id.Name() != "other" || id.Info() != Other.Info() {
			t.Errorf("ID(%d): Name %q, Info %p, want other's", id, id.Name(), id.Info())
		}
	}
	oi := Other.Info()
	if oi == nil || oi.Name != "other" || oi.Arity != -1 || !oi.Flags.Has(FlagWrite|FlagMovablekeys) ||
		oi.Flags.Has(FlagReadonly) || oi.Flags.Has(FlagFast) || len(oi.KeySpecs) != 0 {
		t.Errorf("Other.Info() = %+v, want conservative entry", oi)
	}
}

func TestLookupAllocs(t *testing.T) {
	inputs := [][]byte{[]byte("GET"), []byte("get"), []byte("ZrangeByScore"), []byte("nosuch"),
		[]byte(strings.Repeat("A", maxNameLen)), []byte(strings.Repeat("A", 100))}
	var sink ID
	allocs := testing.AllocsPerRun(1000, func() {
		for _, in := range inputs {
			sink += Lookup(in)
		}
	})
	if allocs != 0 {
		t.Errorf("Lookup allocates %v times per run, want 0", allocs)
	}
	ci := Client.Info()
	var sub *Info
	allocs = testing.AllocsPerRun(1000, func() {
		sub = ci.Subcommand([]byte("REPLY"))
	})
	if allocs != 0 || sub == nil {
		t.Errorf("Subcommand allocates %v times per run (result %v), want 0", allocs, sub)
	}
}

func TestSpotChecks(t *testing.T) {
	tests := []struct {
		name       string
		id         ID
		arity      int
		want, not  Flags
		first      int
		last, step int
	}{
		{"get", Get, 2, FlagReadonly | FlagFast, FlagWrite, 1, 1, 1},
		{"set", Set, -3, FlagWrite | FlagDenyoom, FlagReadonly, 1, 1, 1},
		{"blpop", Blpop, -3, FlagWrite | FlagBlocking, 0, 1, -2, 1},
		{"subscribe", Subscribe, -2, FlagPubsub | FlagNoscript | FlagLoading | FlagStale, 0, 0, 0, 0},
		{"psubscribe", Psubscribe, -2, FlagPubsub, 0, 0, 0, 0},
		{"ssubscribe", Ssubscribe, -2, FlagPubsub, 0, 1, -1, 1},
		{"unsubscribe", Unsubscribe, -1, FlagPubsub, 0, 0, 0, 0},
		{"punsubscribe", Punsubscribe, -1, FlagPubsub, 0, 0, 0, 0},
		{"sunsubscribe", Sunsubscribe, -1, FlagPubsub, 0, 1, -1, 1},
		{"xread", Xread, -4, FlagReadonly | FlagBlocking | FlagMovablekeys, 0, 0, 0, 0},
		{"eval", Eval, -3, FlagNoscript | FlagMovablekeys, 0, 0, 0, 0},
		{"multi", Multi, 1, FlagNoscript | FlagFast, 0, 0, 0, 0},
		{"exec", Exec, 1, FlagNoscript, 0, 0, 0, 0},
		{"discard", Discard, 1, FlagNoscript | FlagFast, 0, 0, 0, 0},
		{"hello", Hello, -1, FlagNoAuth | FlagNoscript, 0, 0, 0, 0},
		{"auth", Auth, -2, FlagNoAuth | FlagNoscript, 0, 0, 0, 0},
		{"reset", Reset, 1, FlagNoAuth | FlagNoscript, 0, 0, 0, 0},
		{"select", Select, 2, FlagLoading | FlagFast, 0, 0, 0, 0},
		{"monitor", Monitor, 1, FlagAdmin | FlagNoscript, 0, 0, 0, 0},
		{"quit", Quit, -1, FlagNoAuth | FlagAllowBusy, 0, 0, 0, 0},
		{"sync", Sync, 1, FlagAdmin | FlagNoMulti, 0, 0, 0, 0},
		{"psync", Psync, -3, FlagAdmin | FlagNoMulti, 0, 0, 0, 0},
		{"georadius_ro", GeoradiusRo, -6, FlagReadonly, FlagWrite, 1, 1, 1},
		{"restore-asking", RestoreAsking, -4, FlagWrite | FlagDenyoom | FlagAsking, 0, 1, 1, 1},
		{"info", InfoCmd, -1, FlagLoading | FlagStale, 0, 0, 0, 0},
		{"client", Client, -2, 0, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Lookup([]byte(tt.name)); got != tt.id {
				t.Fatalf("Lookup(%q) = %s, want constant %d", tt.name, got, tt.id)
			}
			i := tt.id.Info()
			if i.Name != tt.name || i.Arity != tt.arity {
				t.Errorf("Name %q Arity %d, want %q %d", i.Name, i.Arity, tt.name, tt.arity)
			}
			if !i.Flags.Has(tt.want) || (tt.not != 0 && i.Flags&tt.not != 0) {
				t.Errorf("Flags %s: want %s, not %s", i.Flags, tt.want, tt.not)
			}
			if i.FirstKey != tt.first || i.LastKey != tt.last || i.Step != tt.step {
				t.Errorf("keys %d,%d,%d want %d,%d,%d", i.FirstKey, i.LastKey, i.Step, tt.first, tt.last, tt.step)
			}
		})
	}

	if got := Get.Info().Flags.String(); got != "readonly|fast" {
		t.Errorf("get flags = %q, want readonly|fast", got)
	}
	if ks := Get.Info().KeySpecs; len(ks) != 1 || ks[0] != (KeySpec{
		Flags:       KeyRO | KeyAccess,
		BeginSearch: BeginSearch{Type: BeginSearchIndex, Index: 1},
		FindKeys:    FindKeys{Type: FindKeysRange, LastKey: 0, Step: 1, Limit: 0},
	}) {
		t.Errorf("get key specs = %+v", ks)
	}
	if ks := Eval.Info().KeySpecs; len(ks) != 1 || ks[0].BeginSearch != (BeginSearch{Type: BeginSearchIndex, Index: 2}) ||
		ks[0].FindKeys != (FindKeys{Type: FindKeysKeynum, KeyNumIdx: 0, FirstKey: 1, Step: 1}) {
		t.Errorf("eval key specs = %+v, want index 2 / keynum 0,1,1", ks)
	}
	if ks := Xread.Info().KeySpecs; len(ks) != 1 || ks[0].BeginSearch.Type != BeginSearchKeyword ||
		ks[0].BeginSearch.Keyword != "STREAMS" || ks[0].FindKeys.Type != FindKeysRange {
		t.Errorf("xread key specs = %+v, want keyword STREAMS / range", ks)
	}

	reply := Client.Info().Subcommands["reply"]
	if reply == nil || reply.Name != "client|reply" || reply.Arity != 3 {
		t.Fatalf(`client subcommand "reply" = %+v`, reply)
	}
	if got := Client.Info().Subcommand([]byte("RePlY")); got != reply {
		t.Errorf("Subcommand(RePlY) = %p, want %p", got, reply)
	}
	for _, in := range []string{"", "nosuch", "client|reply", strings.Repeat("r", 100)} {
		if got := Client.Info().Subcommand([]byte(in)); got != nil {
			t.Errorf("Subcommand(%q) = %+v, want nil", in, got)
		}
	}
	if Get.Info().Subcommand([]byte("reply")) != nil || Other.Info().Subcommand([]byte("x")) != nil {
		t.Error("Subcommand on a command without subcommands != nil")
	}
}

func TestFlagNames(t *testing.T) {
	named := map[Flags]string{
		FlagWrite: "write", FlagReadonly: "readonly", FlagDenyoom: "denyoom", FlagModule: "module",
		FlagAdmin: "admin", FlagPubsub: "pubsub", FlagNoscript: "noscript", FlagBlocking: "blocking",
		FlagLoading: "loading", FlagStale: "stale", FlagSkipMonitor: "skip_monitor",
		FlagSkipSlowlog: "skip_slowlog", FlagAsking: "asking", FlagFast: "fast", FlagNoAuth: "no_auth",
		FlagMayReplicate: "may_replicate", FlagSentinel: "sentinel", FlagOnlySentinel: "only_sentinel",
		FlagNoMandatoryKeys: "no_mandatory_keys", FlagProtected: "protected",
		FlagNoAsyncLoading: "no_async_loading", FlagNoMulti: "no_multi", FlagMovablekeys: "movablekeys",
		FlagAllowBusy: "allow_busy",
	}
	if len(named) != len(flagNames) {
		t.Errorf("%d flag constants, %d flag names", len(named), len(flagNames))
	}
	for f, n := range named {
		if f.String() != n {
			t.Errorf("%#x.String() = %q, want %q", uint64(f), f.String(), n)
		}
	}
	if got := (FlagWrite | FlagFast | 1<<63).String(); got != "write|fast" {
		t.Errorf("String = %q", got)
	}
	if got := (KeyRO | KeyNotKey | KeyVariableFlags).String(); got != "RO|not_key|variable_flags" {
		t.Errorf("KeySpecFlags.String = %q", got)
	}
}

// TestTableMatchesJSON checks every generated entry against
// testdata/commands.json, independently of the generator's own mapping.
func TestTableMatchesJSON(t *testing.T) {
	f := loadJSON(t)
	if f.Version != ServerVersion {
		t.Errorf("json version %q, ServerVersion %q", f.Version, ServerVersion)
	}
	if len(f.Commands)+1 != NumIDs() {
		t.Fatalf("json has %d commands, table %d IDs", len(f.Commands), NumIDs())
	}
	for _, c := range f.Commands {
		id := Lookup([]byte(c.Name))
		if id == Other {
			t.Errorf("%s: not in table", c.Name)
			continue
		}
		if got, want := id.Info(), wantInfo(t, c); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.Name, got, want)
		}
	}
}

func wantInfo(t *testing.T, c *cmdgen.Command) *Info {
	t.Helper()
	in := &Info{Name: c.Name, Arity: c.Arity, FirstKey: c.FirstKey, LastKey: c.LastKey, Step: c.Step}
	for _, n := range c.Flags {
		i := slices.Index(flagNames[:], n)
		if i < 0 {
			t.Fatalf("%s: flag %q unknown", c.Name, n)
		}
		in.Flags |= 1 << i
	}
	if len(c.ACLCategories) > 0 {
		in.ACLCategories = c.ACLCategories
	}
	if len(c.Tips) > 0 {
		in.Tips = c.Tips
	}
	for _, ks := range c.KeySpecs {
		k := KeySpec{Notes: ks.Notes}
		for _, n := range ks.Flags {
			i := slices.Index(keySpecFlagNames[:], n)
			if i < 0 {
				t.Fatalf("%s: key spec flag %q unknown", c.Name, n)
			}
			k.Flags |= 1 << i
		}
		deref := func(p *int) int {
			if p == nil {
				return 0
			}
			return *p
		}
		bs, fk := ks.BeginSearch.Spec, ks.FindKeys.Spec
		k.BeginSearch.Type = map[string]BeginSearchType{"unknown": BeginSearchUnknown, "index": BeginSearchIndex, "keyword": BeginSearchKeyword}[ks.BeginSearch.Type]
		k.BeginSearch.Index, k.BeginSearch.StartFrom = deref(bs.Index), deref(bs.StartFrom)
		if bs.Keyword != nil {
			k.BeginSearch.Keyword = *bs.Keyword
		}
		k.FindKeys.Type = map[string]FindKeysType{"unknown": FindKeysUnknown, "range": FindKeysRange, "keynum": FindKeysKeynum}[ks.FindKeys.Type]
		k.FindKeys.LastKey, k.FindKeys.Step, k.FindKeys.Limit = deref(fk.LastKey), deref(fk.KeyStep), deref(fk.Limit)
		k.FindKeys.KeyNumIdx, k.FindKeys.FirstKey = deref(fk.KeyNumIdx), deref(fk.FirstKey)
		in.KeySpecs = append(in.KeySpecs, k)
	}
	for _, s := range c.Subcommands {
		if in.Subcommands == nil {
			in.Subcommands = map[string]*Info{}
		}
		in.Subcommands[strings.TrimPrefix(s.Name, c.Name+"|")] = wantInfo(t, s)
	}
	return in
}

func BenchmarkLookup(b *testing.B) {
	for _, bc := range []struct{ name, in string }{
		{"get", "GET"},
		{"long", "ZRANGEBYSCORE"},
		{"unknown", "NOSUCHCMD"},
		{"overlong", strings.Repeat("X", 64)},
	} {
		in := []byte(bc.in)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			var sink ID
			for range b.N {
				sink += Lookup(in)
			}
			_ = sink
		})
	}
}

// TestBlocks: the COMMAND INFO "blocking" flag, and WAIT, which redis-server
// 7.0 does not flag though it waits up to its timeout.
func TestBlocks(t *testing.T) {
	for id, want := range map[ID]bool{Blpop: true, Xread: true, Wait: true, Get: false, Set: false, Other: false} {
		if got := id.Blocks(); got != want {
			t.Errorf("%s.Blocks() = %v, want %v", id, got, want)
		}
	}
}

// TestUnion: the first table's entries stay; commands and subcommands only
// a later table has are added from the first later table that has them;
// the inputs are left as they were.
func TestUnion(t *testing.T) {
	get := &Info{Name: "get", Arity: 2}
	get2 := &Info{Name: "get", Arity: -2}
	client := &Info{Name: "client", Arity: -2, Subcommands: map[string]*Info{"list": {Name: "client|list"}}}
	client2 := &Info{Name: "client", Arity: -2, Subcommands: map[string]*Info{
		"list": {Name: "client|list", Arity: 9}, "no-touch": {Name: "client|no-touch"}}}
	hgetdel := &Info{Name: "hgetdel", Arity: -5}
	hgetdel3 := &Info{Name: "hgetdel", Arity: -6}
	old := map[string]*Info{"get": get, "client": client, "nil": nil}
	newer := map[string]*Info{"get": get2, "client": client2, "hgetdel": hgetdel}
	newest := map[string]*Info{"hgetdel": hgetdel3}
	u := Union(old, nil, newer, newest)
	if len(u) != 3 || u["get"] != get || u["hgetdel"] != hgetdel {
		t.Fatalf("Union = %v", u)
	}
	c := u["client"]
	if c == client || c.Arity != -2 || len(c.Subcommands) != 2 ||
		c.Subcommands["list"] != client.Subcommands["list"] || c.Subcommands["no-touch"] != client2.Subcommands["no-touch"] {
		t.Errorf("client = %+v", c)
	}
	if len(client.Subcommands) != 1 || len(old) != 3 || len(newer) != 3 {
		t.Errorf("inputs modified: %v %v %v", client.Subcommands, old, newer)
	}
	if u := Union(); len(u) != 0 {
		t.Errorf("Union() = %v", u)
	}
}
