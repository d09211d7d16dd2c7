package command

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/routing/command/internal/cmdgen"
)

// diffInfo compares got with want field by field, subcommands included, and
// returns one line per difference, prefixed with the entry's name.
func diffInfo(got, want *Info) []string {
	if got == nil || want == nil {
		if got == want {
			return nil
		}
		return []string{fmt.Sprintf("entry: got %v, want %v", got, want)}
	}
	var out []string
	field := func(name string, g, w any) {
		if !reflect.DeepEqual(g, w) {
			out = append(out, fmt.Sprintf("%s %s: got %#v, want %#v", want.Name, name, g, w))
		}
	}
	field("Name", got.Name, want.Name)
	field("Arity", got.Arity, want.Arity)
	field("Flags", got.Flags.String(), want.Flags.String())
	field("Flags bits", got.Flags, want.Flags)
	field("FirstKey", got.FirstKey, want.FirstKey)
	field("LastKey", got.LastKey, want.LastKey)
	field("Step", got.Step, want.Step)
	field("ACLCategories", got.ACLCategories, want.ACLCategories)
	field("Tips", got.Tips, want.Tips)
	field("len(KeySpecs)", len(got.KeySpecs), len(want.KeySpecs))
	field("KeySpecs == nil", got.KeySpecs == nil, want.KeySpecs == nil)
	for i := range min(len(got.KeySpecs), len(want.KeySpecs)) {
		g, w := got.KeySpecs[i], want.KeySpecs[i]
		field(fmt.Sprintf("KeySpecs[%d].Notes", i), g.Notes, w.Notes)
		field(fmt.Sprintf("KeySpecs[%d].Flags", i), g.Flags.String(), w.Flags.String())
		field(fmt.Sprintf("KeySpecs[%d].BeginSearch", i), g.BeginSearch, w.BeginSearch)
		field(fmt.Sprintf("KeySpecs[%d].FindKeys", i), g.FindKeys, w.FindKeys)
	}
	field("Subcommands == nil", got.Subcommands == nil, want.Subcommands == nil)
	field("Subcommands names", sortedNames(got.Subcommands), sortedNames(want.Subcommands))
	for name, w := range want.Subcommands {
		if g := got.Subcommands[name]; g != nil {
			out = append(out, diffInfo(g, w)...)
		}
	}
	if len(out) == 0 && !reflect.DeepEqual(got, want) {
		out = append(out, want.Name+": differs (reflect.DeepEqual) where no field does")
	}
	return out
}

func sortedNames(m map[string]*Info) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// wantTable fails t unless got holds exactly the built-in table's entries.
func wantTable(t *testing.T, got map[string]*Info) {
	t.Helper()
	if len(got) != NumIDs()-1 {
		t.Errorf("%d entries, built-in table has %d commands", len(got), NumIDs()-1)
	}
	for i := 1; i < NumIDs(); i++ {
		id := ID(i)
		g, ok := got[id.Name()]
		if !ok {
			t.Errorf("%s: missing", id.Name())
			continue
		}
		for _, d := range diffInfo(g, id.Info()) {
			t.Error(d)
		}
	}
	for name := range got {
		if Lookup([]byte(name)) == Other {
			t.Errorf("%s: not in the built-in table", name)
		}
	}
}

// TestInfoOfMatchesTable converts testdata/commands.json with FetchInfo's
// converter and wants the generated table, entry by entry: FetchInfo and
// the generator turn one entry into the same Info.
func TestInfoOfMatchesTable(t *testing.T) {
	got := map[string]*Info{}
	for _, c := range loadJSON(t).Commands {
		got[c.Name] = infoOf(c)
	}
	wantTable(t, got)
}

// TestFetchInfoRedis fetches the command table of a real redis-server 7.0
// over RESP2 and wants the built-in table (generated from that version's
// RESP3 COMMAND INFO) field by field, for every command and subcommand.
func TestFetchInfoRedis(t *testing.T) {
	srv := redistest.Start(t)
	v, _ := srv.Do("INFO", "server").(string)
	if !strings.Contains(v, "redis_version:"+ServerVersion+"\r\n") {
		t.Skipf("local redis-server is not %s: no exact comparison", ServerVersion)
	}
	got, err := FetchInfo(context.Background(), srv.Addr(), 10*time.Second, respconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantTable(t, got)

	// Through a relay that refuses COMMAND INFO, FetchInfo falls back to
	// the real COMMAND reply: the same table.
	f := startFake(t, func(req []string) string {
		if strings.EqualFold(strings.Join(req, " "), "COMMAND INFO") {
			return "-ERR unknown subcommand 'INFO'\r\n"
		}
		return relayTo(t, srv.Addr(), req)
	})
	got, err = FetchInfo(context.Background(), f.addr, 10*time.Second, respconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantTable(t, got)
	if want := []string{"COMMAND INFO", "COMMAND"}; !slices.Equal(f.requests(), want) {
		t.Errorf("requests %q, want %q", f.requests(), want)
	}
}

// relayTo sends req to the server at addr and returns its raw reply.
func relayTo(t *testing.T, addr string, req []string) string {
	c, err := redistest.DialConn(addr, 2*time.Second)
	if err != nil {
		return "-ERR relay: " + err.Error() + "\r\n"
	}
	defer c.Close()
	if err := c.Write(redistest.Cmd(req...)); err != nil {
		return "-ERR relay: " + err.Error() + "\r\n"
	}
	b, err := c.ReadFrame(10 * time.Second)
	if err != nil {
		return "-ERR relay: " + err.Error() + "\r\n"
	}
	return string(b)
}

// enc encodes v as RESP2: a string as a bulk string, a status as a simple
// string, an int as an integer, nil as a null bulk string, a []any as an
// array.
func enc(v any) string {
	switch v := v.(type) {
	case nil:
		return "$-1\r\n"
	case status:
		return "+" + string(v) + "\r\n"
	case int:
		return ":" + strconv.Itoa(v) + "\r\n"
	case string:
		return "$" + strconv.Itoa(len(v)) + "\r\n" + v + "\r\n"
	case []any:
		var b strings.Builder
		b.WriteString("*" + strconv.Itoa(len(v)) + "\r\n")
		for _, e := range v {
			b.WriteString(enc(e))
		}
		return b.String()
	}
	panic(fmt.Sprintf("enc: %T", v))
}

type status string

// hangUp at the end of a fakeNode answer closes the connection after it.
const hangUp = "<close>"

// getdel6 is GETDEL as Redis 6.2 lists it: 7 elements, no key specs.
var getdel6 = []any{"getdel", 2, []any{status("write"), status("fast")}, 1, 1, 1,
	[]any{status("@write"), status("@string"), status("@fast")}}

// fakeNode is a scripted RESP2 server on a loopback port: it reads each
// request as an array of bulk strings and writes answer(request) back ("" is
// no answer; an answer ending in hangUp is written without it, then the
// connection is closed). Its cleanup closes everything and waits for its
// goroutines.
type fakeNode struct {
	addr string
	mu   sync.Mutex
	reqs []string
}

func startFake(t *testing.T, answer func(req []string) string) *fakeNode {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{addr: l.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { f.serve(c, answer) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return f
}

func (f *fakeNode) serve(c net.Conn, answer func([]string) string) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		req, err := readRequest(r)
		if err != nil {
			return
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, strings.Join(req, " "))
		f.mu.Unlock()
		a := answer(req)
		a, closing := strings.CutSuffix(a, hangUp)
		if a != "" {
			if _, err := io.WriteString(c, a); err != nil {
				return
			}
		}
		if closing {
			return
		}
	}
}

func readRequest(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil {
		return nil, err
	}
	req := make([]string, 0, n)
	for range n {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return nil, err
		}
		a, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		req = append(req, strings.TrimSuffix(a, "\r\n"))
	}
	return req, nil
}

func (f *fakeNode) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reqs...)
}

// scripted answers COMMAND INFO and COMMAND with the given bytes.
func scripted(info, all string) func([]string) string {
	return func(req []string) string {
		switch strings.Join(req, " ") {
		case "COMMAND INFO":
			return info
		case "COMMAND":
			return all
		}
		return "-ERR unexpected request\r\n"
	}
}

// TestFetchInfoFallback: Redis before 7.0 answers COMMAND INFO without names
// with an empty array, Dragonfly with an error; both answer COMMAND with
// entries of fewer than 10 elements.
func TestFetchInfoFallback(t *testing.T) {
	all := enc([]any{getdel6, nil})
	want := &Info{Name: "getdel", Arity: 2, Flags: FlagWrite | FlagFast, FirstKey: 1, LastKey: 1, Step: 1,
		ACLCategories: []string{"@write", "@string", "@fast"}}
	for name, info := range map[string]string{
		"empty array":        "*0\r\n",
		"error":              "-ERR syntax error\r\n",
		"unknown subcommand": "-ERR Unknown subcommand or wrong number of arguments for 'INFO'\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := startFake(t, scripted(info, all))
			got, err := FetchInfo(context.Background(), f.addr, 5*time.Second, respconn.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Fatalf("got %d entries, want 1", len(got))
			}
			for _, d := range diffInfo(got["getdel"], want) {
				t.Error(d)
			}
			if want := []string{"COMMAND INFO", "COMMAND"}; !slices.Equal(f.requests(), want) {
				t.Errorf("requests %q, want %q", f.requests(), want)
			}
		})
	}
	// Dragonfly's COMMAND: 6 elements, simple-string upper-case names.
	f := startFake(t, scripted("-ERR syntax error\r\n",
		enc([]any{[]any{status("GETDEL"), 2, []any{status("write"), status("fast")}, 1, 1, 1}})))
	got, err := FetchInfo(context.Background(), f.addr, 5*time.Second, respconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want.ACLCategories = nil
	for _, d := range diffInfo(got["getdel"], want) {
		t.Error(d)
	}
}

// TestFetchInfoLenient: what the table cannot represent is dropped, not
// fatal (a newer engine must not lose its whole table over one flag).
func TestFetchInfoLenient(t *testing.T) {
	spec := func(bs, fk []any, extra ...any) []any {
		return append([]any{"flags", []any{status("RW"), status("frobnicated")}, "begin_search", bs, "find_keys", fk}, extra...)
	}
	entry := []any{"mycmd", -2, []any{status("write"), status("frobnicate")}, 1, 1, 1,
		[]any{status("@write")}, []any{"nondeterministic_output"},
		[]any{
			spec([]any{"type", "index", "spec", []any{"index", 1}}, []any{"type", "range", "spec", []any{"lastkey", 0, "keystep", 1, "limit", 0}}),
			spec([]any{"type", "regex", "spec", []any{"pattern", "k*"}}, []any{"type", "range", "spec", []any{"lastkey", 0, "keystep", 1, "limit", 0}}),
			spec([]any{"type", "keyword", "spec", []any{"keyword", "STREAMS", "startfrom", 1, "future", 7}},
				[]any{"type", "keynum", "spec", []any{"keynumidx", 0, "firstkey", 1, "keystep", 1}}, "future_field", "x"),
			spec([]any{"type", "index", "spec", []any{}}, []any{"type", "range", "spec", []any{"keystep", 1}}),
		},
		[]any{[]any{"mycmd|sub", 3, []any{}, 2, 2, 1, []any{}, []any{}, []any{}, []any{}}},
		"an eleventh element",
	}
	f := startFake(t, scripted(enc([]any{entry, nil}), "-ERR unexpected\r\n"))
	got, err := FetchInfo(context.Background(), f.addr, 5*time.Second, respconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := &Info{Name: "mycmd", Arity: -2, Flags: FlagWrite, FirstKey: 1, LastKey: 1, Step: 1,
		ACLCategories: []string{"@write"}, Tips: []string{"nondeterministic_output"},
		KeySpecs: []KeySpec{
			{Flags: KeyRW, BeginSearch: BeginSearch{Type: BeginSearchIndex, Index: 1}, FindKeys: FindKeys{Type: FindKeysRange, Step: 1}},
			{Flags: KeyRW, FindKeys: FindKeys{Type: FindKeysRange, Step: 1}},
			{Flags: KeyRW, BeginSearch: BeginSearch{Type: BeginSearchKeyword, Keyword: "STREAMS", StartFrom: 1},
				FindKeys: FindKeys{Type: FindKeysKeynum, FirstKey: 1, Step: 1}},
			{Flags: KeyRW},
		},
		Subcommands: map[string]*Info{"sub": {Name: "mycmd|sub", Arity: 3, FirstKey: 2, LastKey: 2, Step: 1}},
	}
	for _, d := range diffInfo(got["mycmd"], want) {
		t.Error(d)
	}
}

func TestFetchInfoErrors(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		info, all string
		want      error
		text      string
	}{
		"refused": {"-NOAUTH Authentication required.\r\n", "-NOAUTH Authentication required.\r\n", ErrRefused,
			`command: engine refused COMMAND INFO and COMMAND: COMMAND INFO answered "NOAUTH Authentication required.", COMMAND "NOAUTH Authentication required."`},
		"empty then refused": {"*0\r\n", "-ERR no\r\n", ErrRefused,
			`command: engine refused COMMAND INFO and COMMAND: COMMAND INFO answered an empty array, COMMAND "ERR no"`},
		"not an array": {"+OK\r\n", "", ErrBadReply, "command: malformed COMMAND INFO reply: got string, want array"},
		"no commands":  {"*1\r\n$-1\r\n", "", ErrBadReply, "command: malformed COMMAND INFO reply: no commands"},
		"not RESP":     {"hello\r\n", "", ErrBadReply, ""},
		"short entry":  {enc([]any{[]any{"get", 2, []any{}, 1, 1}}), "", ErrBadReply, ""},
		"arity string": {enc([]any{[]any{"get", "2", []any{}, 1, 1, 1}}), "", ErrBadReply, ""},
		"odd key spec": {enc([]any{[]any{"get", 2, []any{}, 1, 1, 1, []any{}, []any{}, []any{[]any{"flags"}}, []any{}}}), "", ErrBadReply, ""},
		"index string": {enc([]any{[]any{"get", 2, []any{}, 1, 1, 1, []any{}, []any{}, []any{[]any{"begin_search", []any{"type", "index", "spec", []any{"index", "1"}}}}, []any{}}}), "", ErrBadReply, ""},
		"too deep":     {strings.Repeat("*1\r\n", 100) + ":1\r\n", "", ErrBadReply, ""},
		"length over":  {"*1\r\n$999999999999\r\n", "", ErrBadReply, ""},
	} {
		t.Run(name, func(t *testing.T) {
			f := startFake(t, scripted(tc.info, tc.all))
			got, err := FetchInfo(ctx, f.addr, 2*time.Second, respconn.Options{})
			if got != nil || !errors.Is(err, tc.want) {
				t.Fatalf("FetchInfo = %v, %v; want %v", got, err, tc.want)
			}
			prefix := "command: fetch command table from " + f.addr + ": "
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("error %q does not start with %q", err, prefix)
			}
			if tc.text != "" && err.Error() != prefix+tc.text {
				t.Errorf("error = %q\nwant    %q", err, prefix+tc.text)
			}
		})
	}
}

func TestFetchInfoNetErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := FetchInfo(ctx, redistest.ClosedAddr(t), time.Second, respconn.Options{}); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("closed port: %v", err)
	}

	// A reply cut off by the engine closing: the I/O error, not ErrBadReply.
	cut := startFake(t, func([]string) string { return "*2\r\n" + hangUp })
	if _, err := FetchInfo(ctx, cut.addr, time.Second, respconn.Options{}); !errors.Is(err, io.EOF) || errors.Is(err, ErrBadReply) {
		t.Errorf("reply cut off: %v", err)
	}

	f := startFake(t, func([]string) string { return "" })
	start := time.Now()
	if _, err := FetchInfo(ctx, f.addr, 200*time.Millisecond, respconn.Options{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silent node with timeout: %v", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
		t.Errorf("timeout 200ms returned after %v", d)
	}

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	if _, err := FetchInfo(cctx, f.addr, 0, respconn.Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("silent node, cancelled: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancel after 100ms returned after %v", d)
	}
	if _, err := FetchInfo(cctx, f.addr, time.Second, respconn.Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v", err)
	}
}

// FuzzFetchReply feeds arbitrary bytes to FetchInfo's reader, decoder and
// converter: no panic, and every failure is ErrProtocol or a decode error.
func FuzzFetchReply(f *testing.F) {
	f.Add([]byte(enc([]any{getdel6})))
	f.Add([]byte(enc([]any{[]any{"get", 2, []any{status("readonly")}, 1, 1, 1, []any{}, []any{},
		[]any{[]any{"flags", []any{status("RO")}, "begin_search", []any{"type", "index", "spec", []any{"index", 1}},
			"find_keys", []any{"type", "range", "spec", []any{"lastkey", 0, "keystep", 1, "limit", 0}}}}, []any{}}})))
	f.Add([]byte("*1\r\n%1\r\n+a\r\n:1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 {
			return
		}
		v, err := respconn.Read(bufio.NewReaderSize(bytes.NewReader(b), respconn.MaxLineLen))
		if err != nil {
			return
		}
		for _, e := range v.Elems {
			for _, lax := range []bool{false, true} {
				if c, err := cmdgen.DecodeCommand(e.Any(), lax); err == nil {
					_ = infoOf(c)
				}
			}
		}
	})
}
