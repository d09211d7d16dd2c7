package routing

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/respmeter/respmeter/routing/command"
)

// argv splits a redis-cli style line on spaces; the token ” is an empty
// argument.
func argv(line string) [][]byte {
	var out [][]byte
	for _, f := range strings.Fields(line) {
		if f == "''" {
			f = ""
		}
		out = append(out, []byte(f))
	}
	return out
}

func strs(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = string(k)
	}
	return out
}

// keyCases pin the answers of Keys; every one of them is also an oracle
// sample. want lists the keys ("" is an empty key); err, if set, is the
// expected error.
var keyCases = []struct {
	line string
	want []string
	err  error
}{
	// Fixed positions, ranges, steps.
	{line: "GET key:a", want: []string{"key:a"}},
	{line: "get key:a", want: []string{"key:a"}},
	{line: "SET key:a v EX 10 GET", want: []string{"key:a"}},
	{line: "MSET a 1 b 2 c 3", want: []string{"a", "b", "c"}},
	{line: "MSET a 1 b", want: []string{"a", "b"}}, // the walk, as GETKEYS; MSET then fails
	{line: "MGET {a}1 {b}1", want: []string{"{a}1", "{b}1"}},
	{line: "EXISTS key:a key:a key:b", want: []string{"key:a", "key:a", "key:b"}},
	{line: "DEL key:a key:a", want: []string{"key:a", "key:a"}},
	{line: "RPOPLPUSH src dst", want: []string{"src", "dst"}},
	{line: "BLPOP a b 0", want: []string{"a", "b"}},
	{line: "BZPOPMIN a b 0", want: []string{"a", "b"}},
	{line: "COPY src dst DB 1 REPLACE", want: []string{"src", "dst"}},
	{line: "BITOP AND dst a b", want: []string{"dst", "a", "b"}},
	{line: "GET ''", want: []string{""}},
	// Subcommands.
	{line: "OBJECT ENCODING key:a", want: []string{"key:a"}},
	{line: "object encoding key:a", want: []string{"key:a"}},
	{line: "MEMORY USAGE key:a SAMPLES 5", want: []string{"key:a"}},
	{line: "XINFO STREAM stream:a FULL", want: []string{"stream:a"}},
	{line: "XGROUP CREATE stream:a g1 0 MKSTREAM", want: []string{"stream:a"}},
	{line: "OBJECT HELP"},
	{line: "OBJECT NOSUCH key:a"},
	{line: "COMMAND"},
	{line: "PING"},
	{line: "PUBLISH chan:a hi"},
	{line: "NOSUCHCOMMAND a b"},
	// numkeys (docs/cases.md ).
	{line: "EVAL s 0"},
	{line: "EVAL s 1 key:a arg-1", want: []string{"key:a"}},
	{line: "EVAL s 2 {t}k1 {t}k2", want: []string{"{t}k1", "{t}k2"}},
	{line: "EVAL s 2 key:a key:b", want: []string{"key:a", "key:b"}},
	{line: "EVAL s 5 key:a", err: ErrNumKeysTooLarge},
	{line: "EVAL s -1", err: ErrNumKeysNegative},
	{line: "EVAL s x", err: ErrNumKeysNotInteger},
	{line: "EVAL s 1x key:a", err: ErrNumKeysNotInteger},
	{line: "EVAL s 01 key:a", err: ErrNumKeysNotInteger},
	{line: "EVAL s 4294967297 key:a", err: ErrNumKeysTooLarge},
	{line: "EVAL s 99999999999999999999 key:a", err: ErrNumKeysNotInteger},
	{line: "EVALSHA sha 1 key:a", want: []string{"key:a"}},
	{line: "EVAL_RO s 0"},
	{line: "FCALL f 0"},
	{line: "FCALL_RO f 2 {t}k1 {t}k2 x", want: []string{"{t}k1", "{t}k2"}},
	{line: "LMPOP 2 {t}k1 {t}k2 LEFT", want: []string{"{t}k1", "{t}k2"}},
	{line: "LMPOP 3 a b LEFT", want: []string{"a", "b", "LEFT"}}, // as GETKEYS; LMPOP then fails
	{line: "LMPOP 0 a LEFT", err: ErrNumKeysZero},
	{line: "LMPOP -1 a LEFT", err: ErrNumKeysNegative},
	{line: "LMPOP 5 a LEFT", err: ErrNumKeysTooLarge},
	{line: "BLMPOP 0 2 a b LEFT COUNT 2", want: []string{"a", "b"}},
	{line: "ZUNION 2 {t}z1 {t}z2", want: []string{"{t}z1", "{t}z2"}},
	{line: "ZUNION 0 a", err: ErrNumKeysZero},
	{line: "ZUNIONSTORE dst 2 a b WEIGHTS 1 2", want: []string{"dst", "a", "b"}},
	{line: "ZUNIONSTORE dst 3 a b", err: ErrNumKeysTooLarge},
	{line: "SINTERCARD 2 {t}s1 {t}s2", want: []string{"{t}s1", "{t}s2"}},
	{line: "SINTERCARD 2 a b LIMIT 1", want: []string{"a", "b"}},
	// XREAD / XREADGROUP.
	{line: "XREAD COUNT 10 BLOCK 100 STREAMS stream:a 0", want: []string{"stream:a"}},
	{line: "XREADGROUP GROUP g1 c1 COUNT 1 STREAMS stream:a >", want: []string{"stream:a"}},
	{line: "XREAD STREAMS a b 0 0", want: []string{"a", "b"}},
	{line: "XREAD STREAMS a b 0", want: []string{"a"}}, // the walk, as GETKEYS; XREAD then fails
	{line: "XREAD COUNT 1 STREAMS a", err: ErrNoKeys},
	{line: "XREAD COUNT 1 a 0", err: ErrNoKeys},
	{line: "XREAD COUNT STREAMS STREAMS 1 2", want: []string{"STREAMS"}},
	// SORT, MIGRATE, GEORADIUS.
	{line: "SORT k", want: []string{"k"}},
	{line: "SORT k STORE d", want: []string{"k", "d"}},
	{line: "SORT k BY x GET y STORE d LIMIT 0 1 STORE e", want: []string{"k", "e"}},
	{line: "SORT k STORE STORE x", want: []string{"k", "x"}},
	{line: "SORT k LIMIT STORE 1 STORE d", want: []string{"k", "d"}},
	{line: "SORT k STORE", want: []string{"k"}},
	{line: "SORT_RO k BY x GET y", want: []string{"k"}},
	{line: "MIGRATE h 1 k 0 5", want: []string{"k"}},
	{line: "MIGRATE h 1 '' 0 5 KEYS a b", want: []string{"a", "b"}},
	{line: "MIGRATE h 1 '' 0 5 COPY REPLACE KEYS a b", want: []string{"a", "b"}},
	{line: "MIGRATE h 1 '' 0 5 KEYS a KEYS b", want: []string{"a", "KEYS", "b"}},
	{line: "MIGRATE h 1 '' 0 5 AUTH KEYS KEYS a b", want: []string{"a", "b"}},
	{line: "MIGRATE h 1 '' 0 5 AUTH2 u KEYS KEYS a", want: []string{"a"}},
	{line: "MIGRATE h 1 '' 0 5 KEYS", want: []string{""}},
	{line: "MIGRATE h 1 k 0 5 KEYS a b", err: ErrNoKeys},
	{line: "GEORADIUS k 0 0 1 m STORE d", want: []string{"k", "d"}},
	{line: "GEORADIUS k 0 0 1 m STOREDIST d STORE e", want: []string{"k", "e", "d"}},
	{line: "GEORADIUSBYMEMBER k m 1 km STOREDIST d", want: []string{"k", "d"}},
	{line: "GEORADIUS k 0 0 1 m STORE", want: []string{"k"}},
	// Shard channels: not_key specs, routed like keys.
	{line: "SPUBLISH chan:a hi", want: []string{"chan:a"}},
	{line: "SSUBSCRIBE chan:a chan:b", want: []string{"chan:a", "chan:b"}},
	{line: "SUNSUBSCRIBE chan:a", want: []string{"chan:a"}},
	{line: "SUNSUBSCRIBE"},
	// Arity.
	{line: "GET", err: ErrWrongArity},
	{line: "GET a b", err: ErrWrongArity},
	{line: "OBJECT ENCODING", err: ErrWrongArity},
	{line: "OBJECT", err: ErrWrongArity},
	{line: "XREAD STREAMS a", err: ErrWrongArity},
}

func TestKeys(t *testing.T) {
	for _, tc := range keyCases {
		t.Run(tc.line, func(t *testing.T) {
			args := argv(tc.line)
			got, err := Keys(args, nil)
			if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("Keys(%s) error = %v, want %v", tc.line, err, tc.err)
			}
			if tc.want == nil {
				tc.want = []string{}
			}
			if s := strs(got); !slices.Equal(s, tc.want) {
				t.Fatalf("Keys(%s) = %q, want %q", tc.line, s, tc.want)
			}
			assertAliases(t, args, got)
			fk, ok := FirstKey(args)
			if ok != (len(got) > 0) || (ok && !sameSlice(fk, got[0])) {
				t.Errorf("FirstKey(%s) = %q, %v; Keys gave %q", tc.line, fk, ok, strs(got))
			}
		})
	}
}

func TestKeysNilAndEmpty(t *testing.T) {
	for _, args := range [][][]byte{nil, {}, {nil}, {[]byte("")}} {
		if got, err := Keys(args, nil); len(got) != 0 || err != nil {
			t.Errorf("Keys(%q) = %q, %v, want none", args, got, err)
		}
		if _, ok := FirstKey(args); ok {
			t.Errorf("FirstKey(%q) ok", args)
		}
	}
}

func TestKeysReusesDst(t *testing.T) {
	dst := make([][]byte, 3, 16)
	got, err := Keys(argv("MGET a b"), dst)
	if err != nil || len(got) != 2 || &got[0] != &dst[0] {
		t.Fatalf("Keys did not append to dst[:0]: %q, %v", got, err)
	}
	got, err = Keys(argv("GET"), got)
	if err != ErrWrongArity || len(got) != 0 {
		t.Fatalf("on error Keys = %q, %v, want dst[:0]", got, err)
	}
}

func TestBadNumKeysWraps(t *testing.T) {
	for _, err := range []error{ErrNumKeysNotInteger, ErrNumKeysNegative, ErrNumKeysZero, ErrNumKeysTooLarge} {
		if !errors.Is(err, ErrBadNumKeys) {
			t.Errorf("%v does not wrap ErrBadNumKeys", err)
		}
	}
	for _, err := range []error{ErrWrongArity, ErrNoKeys} {
		if errors.Is(err, ErrBadNumKeys) {
			t.Errorf("%v wraps ErrBadNumKeys", err)
		}
	}
}

func TestKeywordEq(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want bool
	}{
		{"STREAMS", true}, {"streams", true}, {"StReAmS", true},
		{"STREAMS\x00junk", true}, // strcasecmp stops at NUL
		{"STREAM", false}, {"STREAMSX", false}, {"", false}, {"\x00", false},
		{"STREAMſ", false},
	} {
		if got := keywordEq([]byte(tc.arg), "STREAMS"); got != tc.want {
			t.Errorf("keywordEq(%q, STREAMS) = %v, want %v", tc.arg, got, tc.want)
		}
	}
}

func TestParseInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"1", 1, true}, {"-1", -1, true}, {"42", 42, true},
		{"9223372036854775807", 1<<63 - 1, true}, {"-9223372036854775808", -1 << 63, true},
		{"9223372036854775808", 0, false}, {"-9223372036854775809", 0, false},
		{"99999999999999999999", 0, false}, {"", 0, false}, {"-", 0, false},
		{"-0", 0, false}, {"01", 0, false}, {"+1", 0, false}, {" 1", 0, false},
		{"1 ", 0, false}, {"1x", 0, false}, {"0x1", 0, false},
	} {
		got, ok := parseInt([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseInt(%q) = %d, %v, want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestKeysAllocs pins zero allocations when dst has room.
func TestKeysAllocs(t *testing.T) {
	dst := make([][]byte, 0, 16)
	for _, line := range []string{
		"GET key:a", "MSET a 1 b 2 c 3", "EVAL s 2 a b x", "EVAL s -1",
		"OBJECT ENCODING k", "XREAD COUNT 1 STREAMS a b 0 0", "SORT k BY x STORE d",
		"MIGRATE h 1 '' 0 5 KEYS a b", "GET", "NOSUCH x", "LMPOP 0 a LEFT",
	} {
		args := argv(line)
		if n := testing.AllocsPerRun(100, func() { Keys(args, dst) }); n != 0 {
			t.Errorf("Keys(%s) allocates %v times, want 0", line, n)
		}
		if n := testing.AllocsPerRun(100, func() { FirstKey(args) }); n != 0 {
			t.Errorf("FirstKey(%s) allocates %v times, want 0", line, n)
		}
	}
}

func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// assertAliases fails unless every key is one of args (same backing array).
func assertAliases(t testing.TB, args, keys [][]byte) {
	t.Helper()
	for _, k := range keys {
		if !slices.ContainsFunc(args[1:], func(a []byte) bool { return sameSlice(a, k) }) {
			t.Fatalf("key %q is not an element of args %q", k, args)
		}
	}
}

func FuzzKeys(f *testing.F) {
	for _, tc := range keyCases {
		f.Add([]byte(strings.ReplaceAll(tc.line, " ", "\n")), uint8(0))
	}
	f.Add([]byte("XREAD\nSTREAMS\x00\na\n0"), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		if len(data) > 1024 {
			return
		}
		// Arguments are the newline-separated fields; split, if set, also
		// cuts the input in two at an arbitrary point to vary boundaries.
		if s := int(split); s > 0 && s < len(data) {
			data = slices.Concat(data[:s], []byte("\n"), data[s:])
		}
		args := bytes.Split(data, []byte("\n"))
		keys, err := Keys(args, nil)
		if err != nil && len(keys) != 0 {
			t.Fatalf("Keys(%q) = %q with error %v", args, keys, err)
		}
		assertAliases(t, args, keys)
		fk, ok := FirstKey(args)
		if ok != (len(keys) > 0) || (ok && !sameSlice(fk, keys[0])) {
			t.Fatalf("FirstKey(%q) = %q, %v; Keys = %q", args, fk, ok, keys)
		}
	})
}

func BenchmarkKeys(b *testing.B) {
	for _, bc := range []struct{ name, line string }{
		{"GET", "GET key:a"},
		{"MSET10", "MSET k0 v k1 v k2 v k3 v k4 v k5 v k6 v k7 v k8 v k9 v"},
		{"EVAL2", "EVAL return 2 {t}k1 {t}k2 arg"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			args := argv(bc.line)
			dst := make([][]byte, 0, 16)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				dst, _ = Keys(args, dst)
			}
		})
	}
}

// keySamples returns the requests of keyCases, oracleSamples and
// binarySamples, in that order: the samples the tests comparing two ways
// of finding keys run through.
func keySamples() [][][]byte {
	var samples [][][]byte
	for _, tc := range keyCases {
		samples = append(samples, argv(tc.line))
	}
	for _, line := range oracleSamples {
		samples = append(samples, argv(line))
	}
	return append(samples, binarySamples...)
}

// TestKeysOracle compares Keys with COMMAND GETKEYS of redis-server for
// keyCases and oracleSamples, and checks that every keyed command and
// subcommand of the table has a sample.
func TestKeysOracle(t *testing.T) {
	rc := startClusterRedis(t)
	samples := keySamples()
	rng := rand.New(rand.NewPCG(3, 4))
	samples = append(samples, randomSamples(rng, 2000)...)

	covered := map[string]bool{}
	var stricter, notKey, agreeKeys, agreeNone int
	cmds := make([][][]byte, len(samples))
	for i, args := range samples {
		cmds[i] = append([][]byte{[]byte("COMMAND"), []byte("GETKEYS")}, args...)
	}
	replies, err := rc.pipeline(cmds)
	if err != nil {
		t.Fatal(err)
	}
	for i, args := range samples {
		r := replies[i]
		got, kerr := Keys(args, nil)
		info := infoOf(args)
		if info != nil && len(got) > 0 {
			covered[info.Name] = true
		}
		switch {
		case r.Type == resp.TypeArray:
			want := make([]string, len(r.Elems))
			for j, e := range r.Elems {
				want[j] = e.Str
			}
			if kerr != nil && (len(want) == 0 || stricterThanGetkeys(args)) {
				// Keys refuses what the engine will refuse: GETKEYS answers
				// [] for EVAL/FCALL with a bad numkeys, and reads numkeys
				// with atoi or an int cast (documented at Keys).
				if len(want) > 0 {
					stricter++
					t.Logf("stricter: %q: Keys error %v; COMMAND GETKEYS = %q", args, kerr, want)
				} else {
					agreeNone++
				}
				continue
			}
			if kerr != nil || !slices.Equal(strs(got), want) {
				t.Errorf("%q: Keys = %q, %v; COMMAND GETKEYS = %q", args, strs(got), kerr, want)
			}
			if len(want) > 0 {
				agreeKeys++
			} else {
				agreeNone++
			}
		case r.Type == resp.TypeError:
			if len(got) == 0 {
				agreeNone++
				continue
			}
			if info != nil && isNotKeyOnly(info) && strings.Contains(r.Str, "no key arguments") {
				notKey++ // shard channels: Keys includes not_key specs, GETKEYS does not
				continue
			}
			t.Errorf("%q: Keys = %q, %v; COMMAND GETKEYS error %q", args, strs(got), kerr, r.Str)
		default:
			t.Fatalf("%q: unexpected reply %v", args, r)
		}
	}
	t.Logf("%d samples: %d agree on keys, %d agree on none (error or no keys), "+
		"%d shard-channel samples (not_key), %d numkeys rejected by Keys only",
		len(samples), agreeKeys, agreeNone, notKey, stricter)
	for _, name := range keyedCommands() {
		if !covered[name] {
			t.Errorf("no oracle sample with keys for %q", name)
		}
	}
}

// infoOf returns the table entry Keys uses for args, or nil.
func infoOf(args [][]byte) *command.Info {
	if len(args) == 0 {
		return nil
	}
	id := command.Lookup(args[0])
	if id == command.Other {
		return nil
	}
	info := id.Info()
	if info.Subcommands != nil {
		if len(args) < 2 {
			return nil
		}
		return info.Subcommand(args[1])
	}
	return info
}

func isNotKeyOnly(info *command.Info) bool {
	for _, s := range info.KeySpecs {
		if !s.Flags.Has(command.KeyNotKey) {
			return false
		}
	}
	return len(info.KeySpecs) > 0
}

// stricterThanGetkeys reports whether args has a numkeys that Keys rejects
// but the getkeys_proc of Redis 7.0 reads leniently with atoi, or the spec
// walk truncates to a C int.
func stricterThanGetkeys(args [][]byte) bool {
	info := infoOf(args)
	if info == nil {
		return false
	}
	for _, s := range info.KeySpecs {
		if s.FindKeys.Type != command.FindKeysKeynum || s.BeginSearch.Type != command.BeginSearchIndex {
			continue
		}
		i := s.BeginSearch.Index + s.FindKeys.KeyNumIdx
		if i >= len(args) {
			continue
		}
		if n, ok := parseInt(args[i]); !ok || n > 1<<31-1 {
			return true
		}
	}
	return false
}

// keyedCommands lists the names of the commands and subcommands that have
// key specs.
func keyedCommands() []string {
	var out []string
	for i := 1; i < command.NumIDs(); i++ {
		info := command.ID(i).Info()
		if len(info.KeySpecs) > 0 {
			out = append(out, info.Name)
		}
		for _, sub := range info.Subcommands {
			if len(sub.KeySpecs) > 0 {
				out = append(out, sub.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// randomSamples builds invocations of random table commands from a small
// vocabulary rich in keywords and numbers, to exercise the spec walk.
func randomSamples(rng *rand.Rand, n int) [][][]byte {
	names := command.Names()[1:]
	vocab := []string{"a", "b", "{t}c", "", "0", "1", "2", "3", "-1", "x", "STREAMS", "KEYS",
		"STORE", "STOREDIST", "LIMIT", "BY", "GET", "COUNT", "BLOCK", "GROUP", "AUTH", "AUTH2",
		"LEFT", "MIN", "streams\x00", "stream:a", ">", "$"}
	out := make([][][]byte, 0, n)
	for range n {
		name := names[rng.IntN(len(names))]
		args := [][]byte{[]byte(name)}
		if info := command.Lookup([]byte(name)).Info(); info.Subcommands != nil {
			subs := make([]string, 0, len(info.Subcommands))
			for s := range info.Subcommands {
				subs = append(subs, s)
			}
			slices.Sort(subs)
			args = append(args, []byte(subs[rng.IntN(len(subs))]))
		}
		for range rng.IntN(9) {
			args = append(args, []byte(vocab[rng.IntN(len(vocab))]))
		}
		out = append(out, args)
	}
	return out
}

// binarySamples have keys and keywords with NUL and 0xff bytes.
var binarySamples = [][][]byte{
	{[]byte("GET"), []byte("k\x00\xff")},
	{[]byte("MSET"), []byte("\x00"), []byte("v"), []byte("\xff{\x00}"), []byte("v")},
	{[]byte("XREAD"), []byte("STREAMS\x00zz"), []byte("a"), []byte("0")},
	{[]byte("XREAD"), []byte("sTrEaMs"), []byte("\x00a"), []byte("\xffb"), []byte("0"), []byte("0")},
	{[]byte("SORT"), []byte("k"), []byte("store\x00x"), []byte("d\x00")},
	{[]byte("MIGRATE"), []byte("h"), []byte("1"), []byte(""), []byte("0"), []byte("5"), []byte("keys\x00"), []byte("a"), []byte("b")},
	{[]byte("EVAL"), []byte("s"), []byte("1\x00"), []byte("a")},
	{[]byte("GEORADIUS"), []byte("k"), []byte("0"), []byte("0"), []byte("1"), []byte("m"), []byte("STORE\x00"), []byte("d")},
}

// oracleSamples are sample invocations, at least one for every command and
// subcommand with key specs in the table (TestKeysOracle checks that).
var oracleSamples = []string{
	"APPEND k v", "BITCOUNT k 0 1", "BITFIELD k GET u8 0", "BITFIELD_RO k GET u8 0",
	"BITOP NOT dst src", "BITPOS k 1 0", "BLMOVE src dst LEFT RIGHT 0",
	"BLMPOP 0 1 a LEFT", "BRPOP a b 0", "BRPOPLPUSH src dst 0", "BZMPOP 0 2 a b MIN",
	"BZPOPMAX a b 0", "BZPOPMIN a 0", "COPY src dst", "DECR k", "DECRBY k 1", "DEL a b c",
	"DUMP k", "EVAL s 1 k", "EVAL_RO s 2 a b", "EVALSHA sha 0", "EVALSHA_RO sha 1 k a",
	"EXISTS a", "EXPIRE k 10 NX", "EXPIREAT k 10", "EXPIRETIME k", "FCALL f 1 k a",
	"FCALL_RO f 1 k", "GEOADD k 0 0 m", "GEODIST k a b", "GEOHASH k a", "GEOPOS k a",
	"GEORADIUS k 0 0 1 m", "GEORADIUS_RO k 0 0 1 m", "GEORADIUSBYMEMBER k m 1 m STORE d",
	"GEORADIUSBYMEMBER_RO k m 1 m", "GEOSEARCH k FROMMEMBER m BYRADIUS 1 m",
	"GEOSEARCHSTORE dst src FROMMEMBER m BYRADIUS 1 m", "GETBIT k 0", "GETDEL k",
	"GETEX k PERSIST", "GETRANGE k 0 1", "GETSET k v", "HDEL k f", "HEXISTS k f", "HGET k f",
	"HGETALL k", "HINCRBY k f 1", "HINCRBYFLOAT k f 1", "HKEYS k", "HLEN k", "HMGET k f g",
	"HMSET k f v", "HRANDFIELD k 1", "HSCAN k 0", "HSET k f v g w", "HSETNX k f v",
	"HSTRLEN k f", "HVALS k", "INCR k", "INCRBY k 1", "INCRBYFLOAT k 1", "LCS a b",
	"LINDEX k 0", "LINSERT k BEFORE p v", "LLEN k", "LMOVE src dst LEFT RIGHT",
	"LMPOP 1 a RIGHT COUNT 2", "LPOP k", "LPOS k e", "LPUSH k a b", "LPUSHX k a",
	"LRANGE k 0 1", "LREM k 0 v", "LSET k 0 v", "LTRIM k 0 1", "MEMORY USAGE k",
	"MGET a b c", "MIGRATE h 1 k 0 5 COPY", "MOVE k 1", "MSET a 1", "MSETNX a 1 b 2",
	"OBJECT ENCODING k", "OBJECT FREQ k", "OBJECT IDLETIME k", "OBJECT REFCOUNT k",
	"PERSIST k", "PEXPIRE k 10", "PEXPIREAT k 10", "PEXPIRETIME k", "PFADD k a b",
	"PFCOUNT a b c", "PFDEBUG GETREG k", "PFMERGE dst a b", "PSETEX k 10 v", "PTTL k",
	"RENAME a b", "RENAMENX a b", "RESTORE k 0 payload REPLACE", "RESTORE-ASKING k 0 payload",
	"RPOP k 2", "RPOPLPUSH a b", "RPUSH k a", "RPUSHX k a", "SADD k a", "SCARD k",
	"SDIFF a b", "SDIFFSTORE dst a b", "SET k v", "SETBIT k 0 1", "SETEX k 10 v",
	"SETNX k v", "SETRANGE k 0 v", "SINTER a b", "SINTERCARD 1 a", "SINTERSTORE dst a b",
	"SISMEMBER k m", "SMEMBERS k", "SMISMEMBER k a b", "SMOVE src dst m", "SORT k STORE dst",
	"SORT_RO k", "SPOP k", "SPUBLISH ch m", "SRANDMEMBER k 2", "SREM k a", "SSCAN k 0",
	"SSUBSCRIBE a", "STRLEN k", "SUBSTR k 0 1", "SUNION a b", "SUNIONSTORE dst a b",
	"SUNSUBSCRIBE a b", "TOUCH a b", "TTL k", "TYPE k", "UNLINK a b", "WATCH a b",
	"XACK k g 0-1", "XADD k * f v", "XADD k NOMKSTREAM MAXLEN ~ 10 * f v",
	"XAUTOCLAIM k g c 0 0-0", "XCLAIM k g c 0 0-1", "XDEL k 0-1",
	"XGROUP CREATE k g $", "XGROUP CREATECONSUMER k g c", "XGROUP DELCONSUMER k g c",
	"XGROUP DESTROY k g", "XGROUP SETID k g 0", "XINFO CONSUMERS k g", "XINFO GROUPS k",
	"XINFO STREAM k", "XLEN k", "XPENDING k g", "XRANGE k - +", "XREAD STREAMS a 0",
	"XREADGROUP GROUP g c STREAMS a b > >", "XREADGROUP GROUP g c NOACK STREAMS a >",
	"XREVRANGE k + -", "XSETID k 0-1", "XTRIM k MAXLEN 10", "ZADD k 1 m", "ZCARD k",
	"ZCOUNT k 0 1", "ZDIFF 2 a b", "ZDIFFSTORE dst 2 a b", "ZINCRBY k 1 m", "ZINTER 2 a b",
	"ZINTERCARD 2 a b", "ZINTERSTORE dst 2 a b", "ZLEXCOUNT k - +", "ZMPOP 2 a b MAX",
	"ZMSCORE k a", "ZPOPMAX k", "ZPOPMIN k 2", "ZRANDMEMBER k", "ZRANGE k 0 1",
	"ZRANGEBYLEX k - +", "ZRANGEBYSCORE k 0 1", "ZRANGESTORE dst src 0 1", "ZRANK k m",
	"ZREM k m", "ZREMRANGEBYLEX k - +", "ZREMRANGEBYRANK k 0 1", "ZREMRANGEBYSCORE k 0 1",
	"ZREVRANGE k 0 1", "ZREVRANGEBYLEX k + -", "ZREVRANGEBYSCORE k 1 0", "ZREVRANK k m",
	"ZSCAN k 0", "ZSCORE k m", "ZUNION 1 a", "ZUNIONSTORE dst 1 a",
	"GEOSEARCHSTORE dst src FROMLONLAT 0 0 BYBOX 1 1 m STOREDIST",
	// Odd and failing forms.
	"ZINTERCARD 3 a b", "ZDIFF 0 a", "ZINTERSTORE dst -1 a", "BZMPOP 0 0 a MIN",
	"BLMPOP 0 -1 a LEFT", "SINTERCARD 0 a", "SINTERCARD 3 a", "EVAL s 2 a", "EVAL s 0 a",
	"FCALL f -1", "FCALL f 3 a", "EVAL s 1abc a", "ZUNION 2x a b", "LMPOP 1x a LEFT",
	"MIGRATE h 1 '' 0 5 KEYS a AUTH KEYS", "MIGRATE h 1 k 0 5 AUTH KEYS",
	"MIGRATE h 1 '' 0 5 AUTH KEYS x KEYS a", "XREADGROUP GROUP g c STREAMS a",
	"XREADGROUP GROUP STREAMS c STREAMS a 0", "XREAD BLOCK 0 STREAMS a b c",
	"SORT k LIMIT 0 1 STORE", "SORT k GET STORE STORE d", "SORT_RO k STORE d",
	"OBJECT ENCODING a b", "MEMORY USAGE", "MEMORY DOCTOR", "XINFO HELP", "DEBUG OBJECT k",
	"SUBSCRIBE a", "PUBLISH a b", "KEYS *", "SCAN 0",
}

// TestKeysErrorTextOracle runs requests Keys refuses on a cluster node that
// owns every slot, and checks the engine refuses them too, with the reply
// text the error docs name.
func TestKeysErrorTextOracle(t *testing.T) {
	t.Parallel() // a fresh node takes about 2 s to report cluster_state:ok
	rc := startClusterRedis(t)
	if r, err := rc.pipeline([][][]byte{argv("CLUSTER ADDSLOTSRANGE 0 16383")}); err != nil || r[0].Str != "OK" {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v %v", r, err)
	}
	redistest.EventuallyEvery(t, 10*time.Second, 20*time.Millisecond, func() error {
		r, err := rc.pipeline([][][]byte{argv("CLUSTER INFO")})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r[0].Str, "cluster_state:ok") {
			return fmt.Errorf("cluster state not ok: %s", r[0].Str)
		}
		return nil
	})
	cases := []struct {
		line string
		err  error
		text string
	}{
		{"GET", ErrWrongArity, "ERR wrong number of arguments for 'get' command"},
		{"OBJECT ENCODING a b", ErrWrongArity, "ERR wrong number of arguments for 'object|encoding' command"},
		{"XINFO STREAM", ErrWrongArity, "ERR wrong number of arguments for 'xinfo|stream' command"},
		{"EVAL s x", ErrNumKeysNotInteger, "ERR value is not an integer or out of range"},
		{"EVAL s 1x a", ErrNumKeysNotInteger, "ERR value is not an integer or out of range"},
		{"EVAL_RO s 99999999999999999999", ErrNumKeysNotInteger, "ERR value is not an integer or out of range"},
		{"ZUNION x a", ErrNumKeysNotInteger, "ERR value is not an integer or out of range"},
		{"ZINTERCARD x a", ErrNumKeysNotInteger, "ERR value is not an integer or out of range"},
		{"ZDIFFSTORE d x a", ErrNumKeysNotInteger, "ERR value is not an integer or out of range"},
		{"LMPOP x a LEFT", ErrNumKeysNotInteger, "ERR numkeys should be greater than 0"},
		{"BZMPOP 0 x a MIN", ErrNumKeysNotInteger, "ERR numkeys should be greater than 0"},
		{"SINTERCARD x a", ErrNumKeysNotInteger, "ERR numkeys should be greater than 0"},
		{"EVAL s -1", ErrNumKeysNegative, "ERR Number of keys can't be negative"},
		{"EVAL_RO s -1", ErrNumKeysNegative, "ERR Number of keys can't be negative"},
		{"ZUNION -1 a", ErrNumKeysNegative, "ERR at least 1 input key is needed for 'zunion' command"},
		{"ZINTERSTORE d -1 a", ErrNumKeysNegative, "ERR at least 1 input key is needed for 'zinterstore' command"},
		{"LMPOP -1 a LEFT", ErrNumKeysNegative, "ERR numkeys should be greater than 0"},
		{"SINTERCARD -1 a", ErrNumKeysNegative, "ERR numkeys should be greater than 0"},
		{"ZDIFF 0 a", ErrNumKeysZero, "ERR at least 1 input key is needed for 'zdiff' command"},
		{"ZINTERCARD 0 a", ErrNumKeysZero, "ERR at least 1 input key is needed for 'zintercard' command"},
		{"BLMPOP 0 0 a LEFT", ErrNumKeysZero, "ERR numkeys should be greater than 0"},
		{"ZMPOP 0 a MIN", ErrNumKeysZero, "ERR numkeys should be greater than 0"},
		{"SINTERCARD 0 a", ErrNumKeysZero, "ERR numkeys should be greater than 0"},
		{"EVAL s 2 a", ErrNumKeysTooLarge, "ERR Number of keys can't be greater than number of args"},
		{"EVAL s 4294967297 a", ErrNumKeysTooLarge, "ERR Number of keys can't be greater than number of args"},
		{"SINTERCARD 3 a", ErrNumKeysTooLarge, "ERR Number of keys can't be greater than number of args"},
		{"ZUNIONSTORE d 3 a", ErrNumKeysTooLarge, "ERR syntax error"},
		{"LMPOP 5 a LEFT", ErrNumKeysTooLarge, "ERR syntax error"},
		{"XREAD COUNT 1 a 0", ErrNoKeys, "ERR syntax error"},
		{"MIGRATE h 1 k 0 5 KEYS a b", ErrNoKeys, "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string"},
	}
	cmds := make([][][]byte, len(cases))
	for i, tc := range cases {
		cmds[i] = argv(tc.line)
	}
	replies, err := rc.pipeline(cmds)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		if _, err := Keys(cmds[i], nil); err != tc.err {
			t.Errorf("Keys(%s) error = %v, want %v", tc.line, err, tc.err)
		}
		if r := replies[i]; r.Type != resp.TypeError || r.Str != tc.text {
			t.Errorf("%s: engine replied %v, documented %q", tc.line, r, tc.text)
		}
	}
}
