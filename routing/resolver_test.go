package routing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/routing/command"
)

// renamed returns a copy of the built-in entry of name (a command, or
// "parent|sub") called newName, its subcommands renamed along.
func renamed(t testing.TB, name, newName string) *command.Info {
	t.Helper()
	parent, sub, _ := strings.Cut(name, "|")
	info := command.Lookup([]byte(parent)).Info()
	if sub != "" {
		info = info.Subcommands[sub]
	}
	if info == nil || info.Name != name {
		t.Fatalf("no built-in entry %q", name)
	}
	c := *info
	c.Name = newName
	if c.Subcommands != nil {
		c.Subcommands = map[string]*command.Info{}
		for s, si := range info.Subcommands {
			c.Subcommands[s] = renamed(t, si.Name, newName+"|"+s)
		}
	}
	return &c
}

// testEngine is an engine table with commands the built-in one lacks:
// copies of built-in entries under new names, a subcommand added to OBJECT,
// a legacy (Redis 6 style) entry and a different entry for GET (arity -2,
// the key second), which replaces the built-in one: the engine decides.
func testEngine(t testing.TB) map[string]*command.Info {
	t.Helper()
	object := renamed(t, "object", "object")
	object.Subcommands["mysub"] = renamed(t, "object|encoding", "object|mysub")
	get := renamed(t, "get", "get")
	get.Arity = -2
	get.KeySpecs = []command.KeySpec{{
		BeginSearch: command.BeginSearch{Type: command.BeginSearchIndex, Index: 2},
		FindKeys:    command.FindKeys{Type: command.FindKeysRange, Step: 1},
	}}
	return map[string]*command.Info{
		"mycmd":   renamed(t, "getdel", "mycmd"),
		"MyRead":  renamed(t, "xread", "myread"), // keyword STREAMS, range with limit
		"myeval":  renamed(t, "eval", "myeval"),  // keynum
		"myxinfo": renamed(t, "xinfo", "myxinfo"),
		"object":  object,
		"get":     get,
		"mymset6": {Name: "mymset6", Arity: -3, Flags: command.FlagWrite, FirstKey: 1, LastKey: -1, Step: 2},
		"myget6":  {Name: "myget6", Arity: 2, Flags: command.FlagReadonly, FirstKey: 1, LastKey: 1, Step: 1},
		"mymove6": {Name: "mymove6", Arity: -2, Flags: command.FlagMovablekeys, FirstKey: 1, LastKey: 1, Step: 1},
		"nil":     nil,
	}
}

func TestResolverEngineOnly(t *testing.T) {
	r := NewResolver(testEngine(t))
	for _, tc := range []struct {
		line string
		want []string
		err  error
	}{
		{line: "MYCMD key:a", want: []string{"key:a"}},
		{line: "mycmd key:a", want: []string{"key:a"}},
		{line: "MyCmd ''", want: []string{""}},
		{line: "MYCMD", err: ErrWrongArity},
		{line: "MYCMD a b", err: ErrWrongArity},
		{line: "MYREAD COUNT 1 STREAMS a b 0 0", want: []string{"a", "b"}},
		{line: "myread streams a 0", want: []string{"a"}},
		{line: "MYREAD COUNT 1 a 0", err: ErrNoKeys}, // no STREAMS; no XREAD fallback rule
		{line: "MYEVAL s 2 a b x", want: []string{"a", "b"}},
		{line: "MYEVAL s 0"},
		{line: "MYEVAL s -1", err: ErrNumKeysNegative},
		{line: "MYXINFO STREAM s", want: []string{"s"}},
		{line: "MYXINFO stream s FULL", want: []string{"s"}},
		{line: "MYXINFO HELP"},
		{line: "MYXINFO NOSUCH s"},
		{line: "MYXINFO", err: ErrWrongArity},
		{line: "MYXINFO STREAM", err: ErrWrongArity},
		{line: "OBJECT MYSUB k", want: []string{"k"}},
		{line: "object mysub k", want: []string{"k"}},
		{line: "OBJECT MYSUB", err: ErrWrongArity},
		{line: "OBJECT ENCODING k", want: []string{"k"}},
		{line: "GET a b", want: []string{"b"}}, // the engine's entry, not the built-in one
		{line: "GET a", err: ErrNoKeys},
		{line: "MYMSET6 a 1 b 2", want: []string{"a", "b"}},
		{line: "MYGET6 a", want: []string{"a"}},
		{line: "MYMOVE6 a b"}, // movablekeys: legacy positions not trusted
		{line: "NIL a"},
		{line: "NOSUCH a"},
	} {
		t.Run(tc.line, func(t *testing.T) {
			args := argv(tc.line)
			got, err := r.Keys(args, nil)
			if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("Resolver.Keys(%s) error = %v, want %v", tc.line, err, tc.err)
			}
			if tc.want == nil {
				tc.want = []string{}
			}
			if s := strs(got); !slices.Equal(s, tc.want) {
				t.Fatalf("Resolver.Keys(%s) = %q, want %q", tc.line, s, tc.want)
			}
			assertAliases(t, args, got)
			fk, ok := r.FirstKey(args)
			if ok != (len(got) > 0) || (ok && !sameSlice(fk, got[0])) {
				t.Errorf("Resolver.FirstKey(%s) = %q, %v; Keys gave %q", tc.line, fk, ok, strs(got))
			}
			// The built-in table alone knows none of the engine's additions.
			if command.Lookup(args[0]) == command.Other || strings.EqualFold(tc.line, "object mysub k") || tc.line == "GET a b" {
				if keys, _ := Keys(args, nil); len(keys) != 0 {
					t.Errorf("routing.Keys(%s) = %q, want none", tc.line, strs(keys))
				}
			}
		})
	}
	want := []string{"myeval", "myget6", "mymove6", "mymset6", "mycmd", "myread", "myxinfo", "object|mysub"}
	slices.Sort(want)
	if got := r.Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}
}

// TestResolverRenamedTable renames every keyed built-in command without a
// fallback rule of its own and wants the Resolver to find, for every key
// case and oracle sample, what Keys finds for the original name.
func TestResolverRenamedTable(t *testing.T) {
	fallback := map[command.ID]bool{command.Sort: true, command.SortRo: true, command.Migrate: true,
		command.Xread: true, command.Xreadgroup: true}
	engine := map[string]*command.Info{}
	for i := 1; i < command.NumIDs(); i++ {
		id := command.ID(i)
		if !fallback[id] {
			engine["x-"+id.Name()] = renamed(t, id.Name(), "x-"+id.Name())
		}
	}
	r := NewResolver(engine)
	lines := slices.Concat(oracleSamples, func() []string {
		var out []string
		for _, tc := range keyCases {
			out = append(out, tc.line)
		}
		return out
	}())
	checked := 0
	for _, line := range lines {
		args := argv(line)
		if fallback[command.Lookup(args[0])] || command.Lookup(args[0]) == command.Other {
			continue
		}
		want, wantErr := Keys(args, nil)
		args[0] = append([]byte("x-"), args[0]...)
		got, err := r.Keys(args, nil)
		if err != wantErr || !slices.Equal(strs(got), strs(want)) {
			t.Errorf("Resolver.Keys(x-%s) = %q, %v; Keys(%s) = %q, %v", line, strs(got), err, line, strs(want), wantErr)
		}
		if k, _ := Keys(args, nil); len(k) != 0 {
			t.Errorf("routing.Keys(x-%s) = %q, want none", line, strs(k))
		}
		checked++
	}
	if checked < 200 {
		t.Errorf("only %d samples checked", checked)
	}
}

// TestResolverNilIsKeys: a nil Resolver, and one of a nil or empty engine
// table, answer exactly as Keys and FirstKey.
func TestResolverNilIsKeys(t *testing.T) {
	samples := keySamples()
	samples = append(samples, nil, [][]byte{}, [][]byte{nil}, argv("MYCMD k"))
	for name, r := range map[string]*Resolver{
		"nil": nil, "nil map": NewResolver(nil), "empty map": NewResolver(map[string]*command.Info{}),
	} {
		for _, args := range samples {
			want, wantErr := Keys(args, nil)
			got, err := r.Keys(args, nil)
			if err != wantErr || !slices.Equal(strs(got), strs(want)) {
				t.Errorf("%s: Resolver.Keys(%q) = %q, %v; Keys = %q, %v", name, args, strs(got), err, strs(want), wantErr)
			}
			wk, wok := FirstKey(args)
			if k, ok := r.FirstKey(args); ok != wok || !sameSlice(k, wk) {
				t.Errorf("%s: Resolver.FirstKey(%q) = %q, %v; FirstKey = %q, %v", name, args, k, ok, wk, wok)
			}
		}
		if n := r.Names(); len(n) != 0 {
			t.Errorf("%s: Names() = %q", name, n)
		}
	}
}

// TestResolverKeysOfIsKeys: KeysOf and FirstKeyOf, given the id Lookup
// returns for the request, answer as Keys and FirstKey (keys, errors, the
// same aliased slices) for the built-in table's commands, the engine's
// own and renamed ones, unknown names, and with a nil Resolver.
func TestResolverKeysOfIsKeys(t *testing.T) {
	samples := keySamples()
	for _, line := range []string{"MYCMD k", "mycmd k", "MyRead STREAMS a b 0 0", "MYEVAL s 2 a b", "OBJECT MYSUB k",
		"OBJECT ENCODING k", "MYXINFO STREAM s", "GET a b", "GET a", "MYMSET6 a 1 b 2", "MYMOVE6 k", "NOSUCH x"} {
		samples = append(samples, argv(line))
	}
	for name, r := range map[string]*Resolver{"nil": nil, "engine": NewResolver(testEngine(t))} {
		for _, args := range samples {
			if len(args) == 0 {
				continue // the proxy looks up and routes only requests with a name
			}
			id := r.Lookup(args[0])
			want, wantErr := r.Keys(args, nil)
			got, err := r.KeysOf(id, args, nil)
			if err != wantErr || len(got) != len(want) {
				t.Errorf("%s: KeysOf(%v, %q) = %q, %v; Keys = %q, %v", name, id, args, strs(got), err, strs(want), wantErr)
				continue
			}
			for i := range got {
				if !sameSlice(got[i], want[i]) {
					t.Errorf("%s: KeysOf(%v, %q) key %d = %q, Keys %q", name, id, args, i, got[i], want[i])
				}
			}
			wk, wok := r.FirstKey(args)
			if k, ok := r.FirstKeyOf(id, args); ok != wok || !sameSlice(k, wk) {
				t.Errorf("%s: FirstKeyOf(%v, %q) = %q, %v; FirstKey = %q, %v", name, id, args, k, ok, wk, wok)
			}
		}
	}
}

// TestResolverAllocs pins zero allocations for known commands (as Keys) and
// for the engine's commands, unknown names and overlong names.
func TestResolverAllocs(t *testing.T) {
	r := NewResolver(testEngine(t))
	dst := make([][]byte, 0, 16)
	for _, line := range []string{
		"GET key:a", "MSET a 1 b 2 c 3", "EVAL s 2 a b x", "OBJECT ENCODING k", "XREAD COUNT 1 STREAMS a b 0 0",
		"GET", "NOSUCH x", "MYCMD k", "MyRead STREAMS a b 0 0", "OBJECT MYSUB k", "MYXINFO STREAM s",
		"MYMSET6 a 1 b 2", strings.Repeat("X", 100) + " k", "OBJECT " + strings.Repeat("y", 100) + " k",
	} {
		args := argv(line)
		if n := testing.AllocsPerRun(100, func() { r.Keys(args, dst) }); n != 0 {
			t.Errorf("Resolver.Keys(%.40s) allocates %v times, want 0", line, n)
		}
		if n := testing.AllocsPerRun(100, func() { r.FirstKey(args) }); n != 0 {
			t.Errorf("Resolver.FirstKey(%.40s) allocates %v times, want 0", line, n)
		}
		id := r.Lookup(args[0])
		if n := testing.AllocsPerRun(100, func() { r.KeysOf(id, args, dst) }); n != 0 {
			t.Errorf("Resolver.KeysOf(%.40s) allocates %v times, want 0", line, n)
		}
	}
	// A name longer than the fold buffer that the engine has: one allocation
	// at most, and found.
	long := strings.Repeat("z", foldLen+10)
	rl := NewResolver(map[string]*command.Info{long: renamed(t, "getdel", long)})
	args := argv(strings.ToUpper(long) + " k")
	if k, ok := rl.FirstKey(args); !ok || string(k) != "k" {
		t.Errorf("long engine name: FirstKey = %q, %v", k, ok)
	}
	if n := testing.AllocsPerRun(100, func() { rl.FirstKey(args) }); n > 1 {
		t.Errorf("long engine name allocates %v times, want at most 1", n)
	}
}

// TestResolverRedis builds a Resolver from a real redis-server 7.0: its table
// is the built-in one, so the Resolver adds nothing and answers as Keys.
func TestResolverRedis(t *testing.T) {
	srv := redistest.Start(t)
	engine, err := command.FetchInfo(context.Background(), srv.Addr(), 10*time.Second, respconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := NewResolver(engine)
	if v, _ := srv.Do("INFO", "server").(string); strings.Contains(v, "redis_version:"+command.ServerVersion+"\r\n") {
		if n := r.Names(); len(n) != 0 {
			t.Errorf("Names() = %q, want none from a %s engine", n, command.ServerVersion)
		}
	}
	for _, tc := range keyCases {
		args := argv(tc.line)
		want, wantErr := Keys(args, nil)
		if got, err := r.Keys(args, nil); err != wantErr || !slices.Equal(strs(got), strs(want)) {
			t.Errorf("Resolver.Keys(%s) = %q, %v; Keys = %q, %v", tc.line, strs(got), err, strs(want), wantErr)
		}
	}
	// The engine's own GETDEL entry, renamed, routes like GETDEL.
	mine := *engine["getdel"]
	mine.Name = "mycmd"
	r = NewResolver(map[string]*command.Info{"mycmd": &mine})
	if k, ok := r.FirstKey(argv("MYCMD key:a")); !ok || string(k) != "key:a" {
		t.Errorf("engine GETDEL as mycmd: FirstKey = %q, %v", k, ok)
	}
	if _, ok := FirstKey(argv("MYCMD key:a")); ok {
		t.Error("routing.FirstKey found a key of mycmd")
	}
}

func FuzzResolverKeys(f *testing.F) {
	for _, tc := range keyCases {
		f.Add([]byte(strings.ReplaceAll(tc.line, " ", "\n")))
	}
	f.Add([]byte("MYREAD\nSTREAMS\na\n0"))
	f.Add([]byte("OBJECT\nMYSUB\nk"))
	r := NewResolver(testEngine(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1024 {
			return
		}
		args := bytes.Split(data, []byte("\n"))
		keys, err := r.Keys(args, nil)
		if err != nil && len(keys) != 0 {
			t.Fatalf("Resolver.Keys(%q) = %q with error %v", args, keys, err)
		}
		assertAliases(t, args, keys)
		fk, ok := r.FirstKey(args)
		if ok != (len(keys) > 0) || (ok && !sameSlice(fk, keys[0])) {
			t.Fatalf("Resolver.FirstKey(%q) = %q, %v; Keys = %q", args, fk, ok, keys)
		}
		if ko, errOf := r.KeysOf(r.Lookup(args[0]), args, nil); errOf != err || !slices.Equal(strs(ko), strs(keys)) {
			t.Fatalf("Resolver.KeysOf(%q) = %q, %v; Keys = %q, %v", args, strs(ko), errOf, strs(keys), err)
		}
		if id := command.Lookup(args[0]); id != command.Other && id != command.Get && !(len(args) > 1 && strings.EqualFold(string(args[1]), "mysub")) {
			want, wantErr := Keys(args, nil)
			if err != wantErr || !slices.Equal(strs(keys), strs(want)) {
				t.Fatalf("built-in command %q: Resolver %q, %v; Keys %q, %v", args, strs(keys), err, strs(want), wantErr)
			}
		}
	})
}

func BenchmarkResolverKeys(b *testing.B) {
	r := NewResolver(testEngine(b))
	for _, bc := range []struct{ name, line string }{
		{"GET", "GET key:a"},
		{"engine", "MYCMD key:a"},
		{"unknown", "NOSUCHCMD key:a"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			args := argv(bc.line)
			dst := make([][]byte, 0, 16)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				dst, _ = r.Keys(args, dst)
			}
		})
	}
}

// engine72 is what a Redis 7.2+ (and Valkey 8) engine says of three
// commands, from their COMMAND INFO: ZRANK's arity became -3 (WITHSCORE),
// WAITAOF is new and flagged blocking, CLIENT gained NO-TOUCH.
func engine72(t testing.TB) map[string]*command.Info {
	t.Helper()
	zrank := renamed(t, "zrank", "zrank")
	zrank.Arity = -3
	client := renamed(t, "client", "client")
	client.Subcommands["no-touch"] = &command.Info{Name: "client|no-touch", Arity: 3,
		Flags: command.FlagNoscript | command.FlagLoading | command.FlagStale, ACLCategories: []string{"@slow", "@connection"}}
	return map[string]*command.Info{
		"zrank":   zrank,
		"client":  client,
		"waitaof": {Name: "waitaof", Arity: 4, Flags: command.FlagNoscript | command.FlagBlocking},
	}
}

// TestResolverEngineDecides: the engine's entry replaces the built-in one
// (arity, flags, subcommands), and an engine-only command gets an ID and
// label of its own.
func TestResolverEngineDecides(t *testing.T) {
	r := NewResolver(engine72(t))
	args := argv("ZRANK z m WITHSCORE")
	if _, err := Keys(args, nil); !errors.Is(err, ErrWrongArity) {
		t.Fatalf("built-in table: Keys(ZRANK z m WITHSCORE) error = %v, want ErrWrongArity (7.0 arity 3)", err)
	}
	if k, err := r.Keys(args, nil); err != nil || !slices.Equal(strs(k), []string{"z"}) {
		t.Errorf("Resolver.Keys(ZRANK z m WITHSCORE) = %q, %v; want [z]", strs(k), err)
	}
	id := r.Lookup([]byte("WaitAOF"))
	if int(id) < command.NumIDs() || int(id) >= r.NumIDs() {
		t.Fatalf("Lookup(WaitAOF) = %d, want an engine ID in [%d, %d)", id, command.NumIDs(), r.NumIDs())
	}
	if got := r.Labels()[id]; got != "waitaof" || r.Name(id) != got {
		t.Errorf("Labels()[%d] = %q, Name = %q; want waitaof", id, got, r.Name(id))
	}
	if r.Name(command.Get) != "get" || r.Name(command.ID(r.NumIDs())) != "other" {
		t.Errorf("Name(get) = %q, Name(past the labels) = %q", r.Name(command.Get), r.Name(command.ID(r.NumIDs())))
	}
	if !r.Blocks(id) || command.Other.Blocks() {
		t.Errorf("Blocks(waitaof) = %v, want true", r.Blocks(id))
	}
	if r.Blocks(command.Get) || !r.Blocks(command.Blpop) || !r.Blocks(command.Wait) {
		t.Error("Blocks of built-in commands changed")
	}
	if in := r.CallInfo(command.Client, argv("CLIENT NO-TOUCH on")); in.Name != "client|no-touch" {
		t.Errorf("CallInfo(CLIENT NO-TOUCH on) = %q, want client|no-touch", in.Name)
	}
	if in := r.CallInfo(command.Client, argv("client setname x")); in.Name != "client|setname" {
		t.Errorf("CallInfo(client setname x) = %q, want client|setname", in.Name)
	}
	if in := r.CallInfo(command.Client, argv("CLIENT")); in.Name != "client" {
		t.Errorf("CallInfo(CLIENT) = %q, want client", in.Name)
	}
	if got, want := r.Names(), []string{"client|no-touch", "waitaof"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	if n := len(r.Labels()); n != command.NumIDs()+1 || n != r.NumIDs() {
		t.Errorf("len(Labels()) = %d, NumIDs() = %d, want %d", n, r.NumIDs(), command.NumIDs()+1)
	}
	var nr *Resolver
	if nr.Lookup([]byte("waitaof")) != command.Other || nr.Blocks(id) || nr.NumIDs() != command.NumIDs() ||
		len(nr.Labels()) != command.NumIDs() || nr.Info(command.Get) != command.Get.Info() {
		t.Error("nil Resolver is not the built-in table")
	}
}

// TestResolverLegacyEngine: an engine without key specs (Redis 6,
// Dragonfly) does not replace built-in entries; its own commands are added.
func TestResolverLegacyEngine(t *testing.T) {
	r := NewResolver(map[string]*command.Info{
		"get":    {Name: "get", Arity: -2, Flags: command.FlagReadonly, FirstKey: 2, LastKey: 2, Step: 1},
		"zrank":  {Name: "zrank", Arity: -3, Flags: command.FlagReadonly, FirstKey: 1, LastKey: 1, Step: 1},
		"myget6": {Name: "myget6", Arity: 2, Flags: command.FlagReadonly | command.FlagBlocking, FirstKey: 1, LastKey: 1, Step: 1},
	})
	if k, err := r.Keys(argv("GET a"), nil); err != nil || !slices.Equal(strs(k), []string{"a"}) {
		t.Errorf("Keys(GET a) = %q, %v; want the built-in entry's [a]", strs(k), err)
	}
	if _, err := r.Keys(argv("ZRANK z m WITHSCORE"), nil); !errors.Is(err, ErrWrongArity) {
		t.Errorf("Keys(ZRANK z m WITHSCORE) error = %v, want the built-in ErrWrongArity", err)
	}
	if r.Info(command.Get) != command.Get.Info() {
		t.Error("Info(get) is not the built-in entry")
	}
	id := r.Lookup([]byte("MYGET6"))
	if id == command.Other || !r.Blocks(id) {
		t.Errorf("myget6: ID %d, Blocks %v; want an ID of its own, blocking", id, r.Blocks(id))
	}
	if k, ok := r.FirstKey(argv("myget6 k")); !ok || string(k) != "k" {
		t.Errorf("FirstKey(myget6 k) = %q, %v", k, ok)
	}
}

// TestResolverLabelCap: at most MaxEngineLabels engine-only commands get an
// ID; the rest count as other, and their keys are still found.
func TestResolverLabelCap(t *testing.T) {
	engine := map[string]*command.Info{}
	for i := range MaxEngineLabels + 10 {
		name := fmt.Sprintf("x%03d", i)
		engine[name] = renamed(t, "getdel", name)
	}
	r := NewResolver(engine)
	if n := r.NumIDs() - command.NumIDs(); n != MaxEngineLabels {
		t.Fatalf("%d engine IDs, want %d", n, MaxEngineLabels)
	}
	last := fmt.Sprintf("x%03d", MaxEngineLabels-1)
	if id := r.Lookup([]byte(last)); r.Labels()[id] != last {
		t.Errorf("Lookup(%s) = %d labelled %q", last, id, r.Labels()[id])
	}
	over := fmt.Sprintf("x%03d", MaxEngineLabels)
	if id := r.Lookup([]byte(over)); id != command.Other {
		t.Errorf("Lookup(%s) = %d, want Other (past the cap)", over, id)
	}
	if k, ok := r.FirstKey(argv(over + " k")); !ok || string(k) != "k" {
		t.Errorf("FirstKey(%s k) = %q, %v", over, k, ok)
	}
}

// TestResolverLookupAllocs: Lookup, Info, CallInfo and Blocks allocate
// nothing (they run per command on the proxy's hot path).
func TestResolverLookupAllocs(t *testing.T) {
	r := NewResolver(engine72(t))
	for _, line := range []string{"GET k", "waitaof 1 1 0", "nosuch x", "CLIENT no-touch on", strings.Repeat("Y", 100)} {
		args := argv(line)
		n := testing.AllocsPerRun(100, func() {
			id := r.Lookup(args[0])
			_ = r.CallInfo(id, args)
			_ = r.Blocks(id)
		})
		if n != 0 {
			t.Errorf("%.20s: %v allocations, want 0", line, n)
		}
	}
}

// BenchmarkResolverLookup compares the per-command lookup of the proxy's
// hot path: the built-in table's (command.Lookup and ID.Blocks) with the
// effective table's (Resolver.Lookup and Blocks), for a built-in command,
// an engine-only one and an unknown name.
func BenchmarkResolverLookup(b *testing.B) {
	r := NewResolver(engine72(b))
	for _, name := range []string{"GET", "WAITAOF", "NOSUCHCMD"} {
		arg := []byte(name)
		b.Run("builtin/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				id := command.Lookup(arg)
				_ = id.Blocks()
			}
		})
		b.Run("engine/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				id := r.Lookup(arg)
				_ = r.Blocks(id)
			}
		})
	}
}

// TestClassifyIsTheLookups: the one value Classify gives a request answers
// as the separate lookups it replaces (CallInfo, Blocks, KeysOf,
// FirstKeyOf), for the samples of TestResolverKeysOfIsKeys, with a nil and
// an engine Resolver, and classifying it allocates nothing once the Call's
// key buffer has grown.
func TestClassifyIsTheLookups(t *testing.T) {
	samples := keySamples()
	for _, line := range []string{"MYCMD k", "MyRead STREAMS a b 0 0", "MYEVAL s 2 a b", "OBJECT MYSUB k",
		"OBJECT ENCODING k", "MYXINFO STREAM s", "GET a b", "GET a", "MYMSET6 a 1 b 2", "NOSUCH x",
		"BLPOP a b 0", "WAIT 1 0", "CLIENT SETNAME x", "CLIENT NO-TOUCH on", "CONFIG RESETSTAT", "COMMAND"} {
		samples = append(samples, argv(line))
	}
	var c Call
	for name, r := range map[string]*Resolver{"nil": nil, "engine": NewResolver(testEngine(t))} {
		for _, args := range samples {
			if len(args) == 0 {
				continue
			}
			id := r.Lookup(args[0])
			r.Classify(&c, id, args)
			if c.ID != id || c.Info != r.CallInfo(id, args) || c.Blocks != r.Blocks(id) || c.Name() != r.Name(id) {
				t.Errorf("%s: Classify(%q) = id %v info %p blocks %v; lookups: %v %p %v", name, args, c.ID, c.Info, c.Blocks,
					id, r.CallInfo(id, args), r.Blocks(id))
			}
			want, wantErr := r.KeysOf(id, args, nil)
			got, err := c.Keys()
			if err != wantErr || len(got) != len(want) {
				t.Errorf("%s: Call.Keys(%q) = %q, %v; KeysOf = %q, %v", name, args, strs(got), err, strs(want), wantErr)
				continue
			}
			for i := range got {
				if !sameSlice(got[i], want[i]) {
					t.Errorf("%s: Call.Keys(%q) key %d = %q, KeysOf %q", name, args, i, got[i], want[i])
				}
			}
			wk, wok := r.FirstKeyOf(id, args)
			if k, ok := c.FirstKey(); ok != wok || !sameSlice(k, wk) {
				t.Errorf("%s: Call.FirstKey(%q) = %q, %v; FirstKeyOf = %q, %v", name, args, k, ok, wk, wok)
			}
			if n := testing.AllocsPerRun(20, func() { r.Classify(&c, id, args); c.Keys() }); n != 0 {
				t.Errorf("%s: Classify+Keys(%q) allocates %v times, want 0", name, args, n)
			}
		}
	}
}
