package routing

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/routing/command"
)

// docArg is one argument of a command as COMMAND DOCS describes it (the
// Redis docs, "COMMAND DOCS": name, type, token, flags, nested arguments).
type docArg struct {
	name, typ, token string
	optional, multi  bool
	args             []docArg
}

// docMap turns a RESP2 map reply (a flat array of key, value) into a map.
func docMap(r respconn.Value) map[string]respconn.Value {
	m := map[string]respconn.Value{}
	for i := 0; i+1 < len(r.Elems); i += 2 {
		m[r.Elems[i].Str] = r.Elems[i+1]
	}
	return m
}

func docArgs(r respconn.Value) []docArg {
	var out []docArg
	for _, e := range r.Elems {
		m := docMap(e)
		a := docArg{name: m["name"].Str, typ: m["type"].Str, token: m["token"].Str, args: docArgs(m["arguments"])}
		for _, f := range m["flags"].Elems {
			a.optional = a.optional || f.Str == "optional"
			a.multi = a.multi || f.Str == "multiple"
		}
		out = append(out, a)
	}
	return out
}

// sampleArgs appends to argv an invocation of args: mandatory arguments
// only (full false), or every optional one too, multiple ones twice, the
// first choice of each oneof. Keys are named after their argument and a
// counter, so that each is distinct.
func sampleArgs(argv []string, args []docArg, full bool, n *int) []string {
	for _, a := range args {
		if a.optional && !full {
			continue
		}
		times := 1
		if a.multi && full {
			times = 2
		}
		for range times {
			if a.token != "" {
				argv = append(argv, a.token)
			}
			switch a.typ {
			case "pure-token":
			case "key":
				*n++
				argv = append(argv, "k:"+a.name+":"+string(rune('a'+*n%26)))
			case "integer", "unix-time":
				argv = append(argv, "1")
			case "double":
				argv = append(argv, "1.5")
			case "pattern":
				argv = append(argv, "*")
			case "oneof":
				if len(a.args) > 0 {
					argv = sampleArgs(argv, a.args[:1], true, n)
				}
			case "block":
				argv = sampleArgs(argv, a.args, full, n)
			default: // string, and any type added later
				argv = append(argv, "v")
			}
		}
	}
	return argv
}

// TestEngineGetkeys is the per-engine oracle of the effective table: for
// every command and subcommand the engine reports in COMMAND DOCS, two
// invocations generated from its documented arguments (mandatory arguments
// only; every optional one too, multiple ones twice), the keys the
// engine's Resolver finds equal the engine's COMMAND GETKEYS. Run it
// against another engine with RESPMETER_TEST_ENGINE (internal/redistest);
// on redis-server 7.0.15 it checks the built-in table's twin.
//
// Differences documented at Keys are accepted: shard channels (not_key
// specs) are keys here and not for GETKEYS, and a numkeys that Keys
// refuses is refused by the engine too. GETKEYS errors ("Invalid
// arguments", "no key arguments") must meet no keys here.
func TestEngineGetkeys(t *testing.T) {
	srv := redistest.Start(t, "--cluster-enabled", "yes")
	_, engine := srv.Version()
	infos, err := command.FetchInfo(context.Background(), srv.Addr(), 10*time.Second, respconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := NewResolver(infos)
	rc, err := dialRESP(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	docs, err := rc.pipeline([][][]byte{{[]byte("COMMAND"), []byte("DOCS")}})
	if err != nil || docs[0].Type != resp.TypeArray {
		t.Fatalf("COMMAND DOCS: %v %v", docs, err)
	}
	var samples [][]string
	n := 0
	var walk func(name string, d map[string]respconn.Value)
	walk = func(name string, d map[string]respconn.Value) {
		if subs := d["subcommands"]; len(subs.Elems) > 0 {
			for i := 0; i+1 < len(subs.Elems); i += 2 {
				walk(subs.Elems[i].Str, docMap(subs.Elems[i+1]))
			}
			return
		}
		head := strings.Split(name, "|")
		args := docArgs(d["arguments"])
		for _, full := range []bool{false, true} {
			samples = append(samples, sampleArgs(slices.Clone(head), args, full, &n))
		}
	}
	for i := 0; i+1 < len(docs[0].Elems); i += 2 {
		walk(docs[0].Elems[i].Str, docMap(docs[0].Elems[i+1]))
	}
	cmds := make([][][]byte, len(samples))
	for i, s := range samples {
		cmds[i] = [][]byte{[]byte("COMMAND"), []byte("GETKEYS")}
		for _, a := range s {
			cmds[i] = append(cmds[i], []byte(a))
		}
	}
	replies, err := rc.pipeline(cmds)
	if err != nil {
		t.Fatal(err)
	}
	var withKeys, none, notKey int
	var builtinWrong []string // commands whose keys the built-in table alone misses
	for i, s := range samples {
		args := cmds[i][2:]
		got, kerr := r.Keys(args, nil)
		rep := replies[i]
		switch rep.Type {
		case resp.TypeArray:
			want := make([]string, len(rep.Elems))
			for j, e := range rep.Elems {
				want[j] = e.Str
			}
			if len(want) == 0 && kerr != nil {
				none++ // numkeys refused here, [] from GETKEYS (see Keys)
				continue
			}
			if kerr != nil || !slices.Equal(strs(got), want) {
				t.Errorf("%s: %q: Resolver.Keys = %q, %v; COMMAND GETKEYS = %q", engine, s, strs(got), kerr, want)
				continue
			}
			withKeys++
			if b, berr := Keys(args, nil); berr != nil || !slices.Equal(strs(b), want) {
				builtinWrong = append(builtinWrong, strings.Join(s, " "))
			}
		case resp.TypeError:
			if len(got) == 0 {
				none++
				continue
			}
			if strings.Contains(rep.Str, "no key arguments") && onlyNotKeys(r, args) {
				notKey++
				continue
			}
			t.Errorf("%s: %q: Resolver.Keys = %q, %v; COMMAND GETKEYS error %q", engine, s, strs(got), kerr, rep.Str)
		default:
			t.Fatalf("%s: %q: unexpected reply %v", engine, s, rep)
		}
	}
	t.Logf("%s: %d samples of %d commands: %d agree on keys, %d agree on none, %d shard-channel samples",
		engine, len(samples), len(docs[0].Elems)/2, withKeys, none, notKey)
	t.Logf("%s: %d samples whose keys the built-in table alone misses: %q", engine, len(builtinWrong), builtinWrong)
	if withKeys < 100 {
		t.Errorf("%s: only %d samples with keys", engine, withKeys)
	}
}

// onlyNotKeys reports whether the keys args has under r all come from
// not_key specs (shard channels).
func onlyNotKeys(r *Resolver, args [][]byte) bool {
	id := command.Lookup(args[0])
	info := r.CallInfo(id, args)
	if id == command.Other {
		info = r.command(args[0])
	}
	return info != nil && isNotKeyOnly(info)
}
