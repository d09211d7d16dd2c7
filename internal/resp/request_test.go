package resp

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

// scanRec is one non-waiting Scan result.
type scanRec struct {
	N    int
	Kind Kind
	Err  error
}

func (r scanRec) String() string { return fmt.Sprintf("(%d, %d, %v)", r.N, r.Kind, r.Err) }

// scanCuts drives a fresh scanner over data that arrives in pieces ending at
// cuts (len(data) is implied last), following the caller contract: each call
// passes the current frame from its first byte up to what has arrived. It
// returns every complete frame or error, and the offset of the unfinished
// frame.
func scanCuts(tb testing.TB, s *RequestScanner, data []byte, cuts []int) (recs []scanRec, rest int) {
	tb.Helper()
	off := 0
	for ci := 0; ci <= len(cuts); ci++ {
		end := len(data)
		if ci < len(cuts) {
			end = cuts[ci]
		}
		for off < end {
			n, kind, err := s.Scan(data[off:end])
			if err != nil {
				if n != 0 {
					tb.Fatalf("Scan returned n=%d with error %v", n, err)
				}
				return append(recs, scanRec{0, 0, err}), off
			}
			if n == 0 {
				if kind != 0 {
					tb.Fatalf("Scan returned kind %d without a frame", kind)
				}
				if s.Pending() > end-off {
					tb.Fatalf("Pending() = %d > %d bytes passed", s.Pending(), end-off)
				}
				break
			}
			if n > end-off {
				tb.Fatalf("Scan returned n=%d for %d bytes", n, end-off)
			}
			if s.Pending() != 0 {
				tb.Fatalf("Pending() = %d after a complete frame", s.Pending())
			}
			if kind == KindMultibulk {
				// ArgsOf splits the frame where Redis does, from the
				// spans the (possibly resumed) scan recorded.
				frame := data[off : off+n]
				got, want := s.ArgsOf(frame, kind, nil), redisArgsOnly(frame)
				if len(got) != len(want) {
					tb.Fatalf("ArgsOf(%q) = %q, redis sees %q", frame, got, want)
				}
				for i := range got {
					if !bytes.Equal(got[i], want[i]) {
						tb.Fatalf("ArgsOf(%q) = %q, redis sees %q", frame, got, want)
					}
				}
			}
			recs = append(recs, scanRec{n, kind, nil})
			off += n
		}
	}
	return recs, off
}

func equalRecs(a, b []scanRec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkScanChunkings scans data whole, byte by byte and split in two at
// every point, and requires the same results as want.
func checkScanChunkings(t *testing.T, maxBulk int64, data []byte, want []scanRec, wantRest int) {
	t.Helper()
	checkScanChunkingsOf(t, RequestScanner{MaxBulkLen: maxBulk}, data, want, wantRest)
}

// checkScanChunkingsOf is checkScanChunkings with a copy of proto as each
// fresh scanner (its MaxBulkLen and Dialect).
func checkScanChunkingsOf(t *testing.T, proto RequestScanner, data []byte, want []scanRec, wantRest int) {
	t.Helper()
	check := func(how string, cuts []int) {
		t.Helper()
		s := proto
		got, rest := scanCuts(t, &s, data, cuts)
		if !equalRecs(got, want) || rest != wantRest {
			t.Fatalf("%s: got %v rest %d, want %v rest %d", how, got, rest, want, wantRest)
		}
	}
	check("whole", nil)
	bytewise := make([]int, len(data))
	for i := range bytewise {
		bytewise[i] = i + 1
	}
	check("byte by byte", bytewise)
	for k := 0; k <= len(data); k++ {
		check(fmt.Sprintf("split at %d", k), []int{k})
	}
}

type reqCase struct {
	name string
	in   string
	kind Kind
	args []string // nil for KindEmpty
}

func mb(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

var (
	value256 = strings.Repeat("v", 256)
	reqCases = []reqCase{
		{"ping", "*1\r\n$4\r\nPING\r\n", KindMultibulk, []string{"PING"}},
		{"C-01-set-empty", "*3\r\n$3\r\nSET\r\n$5\r\nkey:a\r\n$0\r\n\r\n", KindMultibulk, []string{"SET", "key:a", ""}},
		{"C-01-hset-empty", mb("HSET", "session:1", "field1", ""), KindMultibulk, []string{"HSET", "session:1", "field1", ""}},
		{"C-01-get-empty-key", "*2\r\n$3\r\nGET\r\n$0\r\n\r\n", KindMultibulk, []string{"GET", ""}},
		{"C-03-set", "*3\r\n$3\r\nSET\r\n$5\r\nkey:a\r\n$5\r\nval-a\r\n", KindMultibulk, []string{"SET", "key:a", "val-a"}},
		{"C-03-bare-crlf", "\r\n", KindEmpty, nil},
		{"C-03-echo", "*2\r\n$4\r\nECHO\r\n$20\r\n" + c03Payload + "\r\n", KindMultibulk, []string{"ECHO", c03Payload}},
		{"C-04a-hset", "*4\r\n$4\r\nHSET\r\n$6\r\nhash:a\r\n$2\r\nf1\r\n$10\r\nabcdefghij\r\n", KindMultibulk,
			[]string{"HSET", "hash:a", "f1", "abcdefghij"}},
		{"C-09-star0", "*0\r\n", KindEmpty, nil},
		{"C-09-star-neg1", "*-1\r\n", KindEmpty, nil},
		{"star-neg5", "*-5\r\n", KindEmpty, nil},
		{"blank-line", "   \r\n", KindEmpty, nil},
		{"bare-lf", "\n", KindEmpty, nil},
		{"tabs-line", "\t \v\f\r\n", KindEmpty, nil},
		{"set-256", mb("SET", "key:a", value256), KindMultibulk, []string{"SET", "key:a", value256}},
		{"set-70000", mb("SET", "big:a", strings.Repeat("x", 70000)), KindMultibulk, []string{"SET", "big:a", strings.Repeat("x", 70000)}},
		{"max-multibulk", "*2147483647\r\n", 0, nil}, // valid, waits for its arguments
		{"inline-ping", "PING\r\n", KindInline, []string{"PING"}},
		{"inline-lf", "QUIT\n", KindInline, []string{"QUIT"}},
		{"inline-spaces", "  SET   key:a\tval \r\n", KindInline, []string{"SET", "key:a", "val"}},
		{"inline-dquotes", "SET key:a \"a b\"\r\n", KindInline, []string{"SET", "key:a", "a b"}},
		{"inline-squotes", "ECHO 'it\\'s'\r\n", KindInline, []string{"ECHO", "it\\'s"}},
		{"inline-hex", "ECHO \"\\x41\\x4g\\\\\"\r\n", KindInline, []string{"ECHO", "\\x41\\x4g\\\\"}},
		{"inline-quote-midword", "SET k a\"b c\"\r\n", KindInline, []string{"SET", "k", "a\"b c\""}},
		{"inline-empty-quotes", "\"\"\r\n", KindInline, []string{""}},
		{"inline-quoted-quit", "\"QUIT\"\r\n", KindInline, []string{"QUIT"}},
		{"inline-cr-inside", "PING\rx\r\n", KindInline, []string{"PING", "x"}},
		{"inline-dollar", "$4 PING\r\n", KindInline, []string{"$4", "PING"}},
		// Redis skips the byte after each header CR and the two bytes after
		// each payload without checking them.
		{"unchecked-crlf", "*1\rX$4\rXPINGxx", KindMultibulk, []string{"PING"}},
		{"bad-trailer-first-arg", "*2\r\n$3\r\nGET\r\n$1\r\nkXY", KindMultibulk, []string{"GET"}},
	}
)

func TestRequestScannerFrames(t *testing.T) {
	for _, tc := range reqCases {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.in)
			var want []scanRec
			rest := 0
			if tc.kind != 0 {
				want, rest = []scanRec{{len(data), tc.kind, nil}}, len(data)
			}
			if len(data) < 1000 {
				checkScanChunkings(t, 0, data, want, rest)
			} else if got, r := scanCuts(t, &RequestScanner{}, data, []int{1, 100, 30000, 66000}); !equalRecs(got, want) || r != rest {
				t.Fatalf("got %v rest %d, want %v rest %d", got, r, want, rest)
			}
			if tc.kind == 0 {
				return
			}
			args := Args(data, tc.kind, nil)
			if tc.kind == KindEmpty {
				if len(args) != 0 {
					t.Fatalf("Args of an empty request = %q", args)
				}
				return
			}
			var got []string
			for _, a := range args {
				got = append(got, string(a))
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.args) {
				t.Fatalf("Args = %q, want %q", got, tc.args)
			}
		})
	}
}

// TestRequestScannerPipeline scans every valid case back to back, then a
// 20-command pipeline (C-04a), in every two-way split and byte by byte.
func TestRequestScannerPipeline(t *testing.T) {
	var data []byte
	var want []scanRec
	for _, tc := range reqCases {
		if tc.kind == 0 || len(tc.in) > 1000 {
			continue
		}
		data = append(data, tc.in...)
		want = append(want, scanRec{len(tc.in), tc.kind, nil})
	}
	for i := 0; i < 20; i++ {
		f := mb("HSET", "hash:a", "f"+strconv.Itoa(i), strings.Repeat("z", i))
		data = append(data, f...)
		want = append(want, scanRec{len(f), KindMultibulk, nil})
	}
	partial := "*3\r\n$3\r\nSET\r\n$1"
	data = append(data, partial...)
	checkScanChunkings(t, 0, data, want, len(data)-len(partial))
}

type badReq struct {
	name string
	in   []byte
	err  error // nil: Redis waits for more bytes and so does the scanner
}

func badRequests() []badReq {
	digits := func(n int) string { return strings.Repeat("1", n) }
	return []badReq{
		{"mbulk-abc", []byte("*abc\r\n"), ErrInvalidMultibulkLen},
		{"mbulk-empty", []byte("*\r\n"), ErrInvalidMultibulkLen},
		{"mbulk-plus", []byte("*+1\r\n"), ErrInvalidMultibulkLen},
		{"mbulk-leading-zero", []byte("*01\r\n"), ErrInvalidMultibulkLen},
		{"mbulk-minus-zero", []byte("*-0\r\n"), ErrInvalidMultibulkLen},
		{"mbulk-space", []byte("*1 \r\n"), ErrInvalidMultibulkLen},
		{"mbulk-lf-only", []byte("*1\n$4\r\nPING\r\n"), ErrInvalidMultibulkLen},
		{"mbulk-over-int-max", []byte("*2147483648\r\n"), ErrInvalidMultibulkLen},
		{"mbulk-21-chars", []byte("*" + digits(21) + "\r\n"), ErrInvalidMultibulkLen},
		{"bulk-neg5", []byte("*1\r\n$-5\r\n"), ErrInvalidBulkLen},
		{"bulk-neg1", []byte("*1\r\n$-1\r\n"), ErrInvalidBulkLen},
		{"bulk-abc", []byte("*1\r\n$abc\r\n"), ErrInvalidBulkLen},
		{"bulk-empty", []byte("*1\r\n$\r\n"), ErrInvalidBulkLen},
		{"bulk-over-max", []byte("*1\r\n$536870913\r\n"), ErrInvalidBulkLen},
		{"bulk-overflow", []byte("*1\r\n$9223372036854775808\r\n"), ErrInvalidBulkLen},
		{"expected-colon", []byte("*1\r\n:1\r\n"), ProtocolError("expected '$', got ':'")},
		{"expected-plus-second", []byte("*2\r\n$1\r\na\r\n+b\r\n"), ProtocolError("expected '$', got '+'")},
		{"expected-cr", []byte("*1\r\n\r\n\r\n"), ProtocolError("expected '$', got ' '")},
		{"expected-lf", []byte("*1\r\n\n\r\n"), ProtocolError("expected '$', got ' '")},
		{"expected-ff", []byte("*1\r\n\xff\r\n"), ProtocolError("expected '$', got '\xff'")},
		{"too-big-inline", bytes.Repeat([]byte("A"), 70000), ErrTooBigInline},
		{"too-big-mbulk-count", []byte("*" + digits(70000)), ErrTooBigMbulkCount},
		{"too-big-bulk-count", []byte("*1\r\n$" + digits(70000)), ErrTooBigBulkCount},
		{"unbalanced-dquote", []byte("\"foo\r\n"), errUnbalancedQuotes},
		{"unbalanced-squote", []byte("SET a 'b\r\n"), errUnbalancedQuotes},
		{"unbalanced-escaped-dquote", []byte("ECHO \"a\\\"\r\n"), errUnbalancedQuotes},
		{"unbalanced-escaped-squote", []byte("ECHO 'a\\'\r\n"), errUnbalancedQuotes},
		{"quote-then-char", []byte("SET a \"b\"c\r\n"), errUnbalancedQuotes},
		{"squote-then-char", []byte("SET a 'b'c\r\n"), errUnbalancedQuotes},
		// Redis finds line ends with strchr: a NUL hides them.
		{"nul-inline", []byte("PING\x00\r\nPING\r\n"), nil},
		{"nul-mbulk-count", []byte("*1\x00\r\n$4\r\nPING\r\n"), nil},
		{"nul-bulk-header-start", []byte("*1\r\n\x00\r\n"), nil},
		{"nul-bulk-count", []byte("*1\r\n$4\x00\r\nPING\r\n"), nil},
		{"nul-inline-too-big", append([]byte("PING\x00\r\n"), bytes.Repeat([]byte("A"), 70000)...), ErrTooBigInline},
		{"nul-mbulk-too-big", append([]byte("*1\x00\r\n"), bytes.Repeat([]byte("A"), 70000)...), ErrTooBigMbulkCount},
		{"nul-bulk-too-big", append([]byte("*1\r\n$\x00\r\n"), bytes.Repeat([]byte("A"), 70000)...), ErrTooBigBulkCount},
		// Valid and incomplete: Redis waits.
		{"wait-bulk-at-max", []byte("*1\r\n$536870912\r\n"), nil},
		{"wait-cr-at-end", []byte("*1\r"), nil},
	}
}

// TestRequestScannerErrors checks the scanner's verdict on malformed input
// (the texts are checked against redis-server in TestRequestScannerOracle),
// fed whole and, for the short ones, in every split.
func TestRequestScannerErrors(t *testing.T) {
	for _, tc := range badRequests() {
		t.Run(tc.name, func(t *testing.T) {
			var want []scanRec
			if tc.err != nil {
				want = []scanRec{{0, 0, tc.err}}
			}
			if len(tc.in) < 1000 {
				checkScanChunkings(t, 0, tc.in, want, 0)
				return
			}
			// Long inputs: the "too big" errors depend on how much is
			// buffered, as in Redis; any growth pattern ends in the error.
			for _, cuts := range [][]int{nil, {1, 7, 65536}, {65537}} {
				got, rest := scanCuts(t, &RequestScanner{}, tc.in, cuts)
				if !equalRecs(got, want) || rest != 0 {
					t.Fatalf("cuts %v: got %v rest %d, want %v", cuts, got, rest, want)
				}
			}
		})
	}
}

// TestRequestScannerDialect: the inputs on which Valkey 9.1.2 and
// redis-server differ, with each engine's answer (sent to redis-server
// 7.0.15, Valkey 8.1.1 and Valkey 9.1.2 directly; the proxy's
// TestBadInput checks them against the engine it runs on). Valkey 9.1.2 is
// both QuoteJoins and StrictCRLF; Valkey 8.1.1 neither. Each input is
// scanned whole, byte by byte and split at every point.
func TestRequestScannerDialect(t *testing.T) {
	valkey9 := Dialect{QuoteJoins: true, StrictCRLF: true}
	frame := func(in string, k Kind) []scanRec { return []scanRec{{len(in), k, nil}} }
	fail := func(err error) []scanRec { return []scanRec{{0, 0, err}} }
	for _, tc := range []struct {
		name, in       string
		redis, valkey9 []scanRec // nil: both wait for more bytes
	}{
		{"closing quote then more of the argument", "SET \"a\"b c\r\n", fail(errUnbalancedQuotes), frame("SET \"a\"b c\r\n", KindInline)},
		{"closing single quote then more", "SET 'a'b c\r\n", fail(errUnbalancedQuotes), frame("SET 'a'b c\r\n", KindInline)},
		{"double then single quoted section", "ECHO \"x\"'y'\r\n", fail(errUnbalancedQuotes), frame("ECHO \"x\"'y'\r\n", KindInline)},
		{"quoted section inside a word", "ECHO x\"a\"b\r\n", fail(errUnbalancedQuotes), frame("ECHO x\"a\"b\r\n", KindInline)},
		{"escaped quote then more", "ECHO \"a\\\"b\"c\r\n", fail(errUnbalancedQuotes), frame("ECHO \"a\\\"b\"c\r\n", KindInline)},
		{"closing quote then vertical tab", "ECHO \"a\"\vb\r\n", frame("ECHO \"a\"\vb\r\n", KindInline), frame("ECHO \"a\"\vb\r\n", KindInline)},
		{"joined quote left open", "ECHO \"a\"b\"c\r\n", fail(errUnbalancedQuotes), fail(errUnbalancedQuotes)},
		{"quote opened after a closing one", "ECHO \"a\"'\r\n", fail(errUnbalancedQuotes), fail(errUnbalancedQuotes)},
		{"closing quote then space", "ECHO \"a b\" c\r\n", frame("ECHO \"a b\" c\r\n", KindInline), frame("ECHO \"a b\" c\r\n", KindInline)},
		{"payload followed by xx", "*1\r\n$4\r\nPINGxx", frame("*1\r\n$4\r\nPINGxx", KindMultibulk), fail(ErrInvalidCRLF)},
		{"payload followed by LF CR", "*1\r\n$4\r\nPING\n\r", frame("*1\r\n$4\r\nPING\n\r", KindMultibulk), fail(ErrInvalidCRLF)},
		{"payload followed by one byte waits", "*1\r\n$4\r\nPINGx", nil, nil},
		{"multibulk header CR then x", "*1\rx$4\r\nPING\r\n", frame("*1\rx$4\r\nPING\r\n", KindMultibulk), fail(ErrInvalidCRLF)},
		{"bulk header CR then x", "*1\r\n$4\rxPING\r\n", frame("*1\r\n$4\rxPING\r\n", KindMultibulk), fail(ErrInvalidCRLF)},
		{"bad count, CR then z", "*x\rz", fail(ErrInvalidMultibulkLen), fail(ErrInvalidCRLF)},
		{"bad count, CR LF", "*x\r\n", fail(ErrInvalidMultibulkLen), fail(ErrInvalidMultibulkLen)},
		{"bad bulk length, CR then z", "*1\r\n$x\rz", fail(ErrInvalidBulkLen), fail(ErrInvalidCRLF)},
		{"no dollar, CR then z", "*1\r\nx\rz", fail(ProtocolError("expected '$', got 'x'")), fail(ProtocolError("expected '$', got 'x'"))},
		{"empty request, CR then x", "*0\rx", frame("*0\rx", KindEmpty), fail(ErrInvalidCRLF)},
	} {
		rest := func(recs []scanRec) int { // a frame takes the whole input
			if len(recs) > 0 && recs[0].Err == nil {
				return len(tc.in)
			}
			return 0
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Run("redis", func(t *testing.T) {
				checkScanChunkingsOf(t, RequestScanner{}, []byte(tc.in), tc.redis, rest(tc.redis))
			})
			t.Run("valkey9", func(t *testing.T) {
				checkScanChunkingsOf(t, RequestScanner{Dialect: valkey9}, []byte(tc.in), tc.valkey9, rest(tc.valkey9))
			})
		})
	}
}

func TestProtocolErrorText(t *testing.T) {
	for err, want := range map[ProtocolError]string{
		ErrInvalidMultibulkLen: "-ERR Protocol error: invalid multibulk length\r\n",
		ErrInvalidBulkLen:      "-ERR Protocol error: invalid bulk length\r\n",
		ErrTooBigInline:        "-ERR Protocol error: too big inline request\r\n",
		ErrTooBigMbulkCount:    "-ERR Protocol error: too big mbulk count string\r\n",
		ErrTooBigBulkCount:     "-ERR Protocol error: too big bulk count string\r\n",
		errUnbalancedQuotes:    "-ERR Protocol error: unbalanced quotes in request\r\n",
		ErrInvalidCRLF:         "-ERR Protocol error: invalid CRLF in request\r\n",
	} {
		if got := string(err.Reply()); got != want {
			t.Errorf("Reply() = %q, want %q", got, want)
		}
		if got := err.Error(); "-ERR "+got+"\r\n" != want {
			t.Errorf("Error() = %q", got)
		}
	}
}

func TestRequestScannerMaxBulkLen(t *testing.T) {
	s := &RequestScanner{MaxBulkLen: 10}
	if _, _, err := s.Scan([]byte("*1\r\n$11\r\n")); err != ErrInvalidBulkLen {
		t.Fatalf("bulk of 11 with MaxBulkLen 10: err = %v", err)
	}
	s = &RequestScanner{MaxBulkLen: 10}
	if n, _, err := s.Scan([]byte("*1\r\n$10\r\n0123456789\r\n")); n != 21 || err != nil {
		t.Fatalf("bulk of 10 with MaxBulkLen 10: n=%d err=%v", n, err)
	}
	// proto-max-bulk-len may be set up to LLONG_MAX; the length check must
	// not overflow (it returned a negative n).
	for _, l := range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 2} {
		s = &RequestScanner{MaxBulkLen: math.MaxInt64}
		in := []byte("*1\r\n$" + strconv.FormatInt(l, 10) + "\r\nabc\r\n")
		if n, kind, err := s.Scan(in); n != 0 || kind != 0 || err != nil {
			t.Fatalf("bulk of %d: Scan = (%d, %d, %v), want to wait", l, n, kind, err)
		}
	}
}

func TestRequestScannerReset(t *testing.T) {
	var s RequestScanner
	s.MaxBulkLen = 5
	if n, _, err := s.Scan([]byte("*2\r\n$3\r\nGET\r\n$1")); n != 0 || err != nil || s.Pending() == 0 {
		t.Fatalf("partial: n=%d err=%v pending=%d", n, err, s.Pending())
	}
	s.Reset()
	if s.Pending() != 0 || s.MaxBulkLen != 5 {
		t.Fatalf("after Reset: pending=%d MaxBulkLen=%d", s.Pending(), s.MaxBulkLen)
	}
	in := []byte("PING\r\n")
	if n, kind, err := s.Scan(in); n != len(in) || kind != KindInline || err != nil {
		t.Fatalf("after Reset: (%d, %d, %v)", n, kind, err)
	}
	if n, kind, err := s.Scan(nil); n != 0 || kind != 0 || err != nil {
		t.Fatalf("Scan(nil) = (%d, %d, %v)", n, kind, err)
	}
}

func TestArgsReusesBuffer(t *testing.T) {
	buf := make([][]byte, 0, 8)
	frame := []byte(mb("SET", "key:a", "v"))
	args := Args(frame, KindMultibulk, buf)
	if len(args) != 3 || &args[0] != &buf[:1][0] {
		t.Fatalf("Args did not reuse argsbuf: %q", args)
	}
	if &args[2][0] != &frame[len(frame)-3] {
		t.Fatal("Args copied the argument instead of aliasing the frame")
	}
	if got := Args(frame, 0, buf); len(got) != 0 {
		t.Fatalf("Args with kind 0 = %q", got)
	}
}

func TestScanArgsAllocs(t *testing.T) {
	var data []byte
	for i := 0; i < 16; i++ {
		data = append(data, mb("SET", "key:"+strconv.Itoa(i), value256)...)
	}
	var s RequestScanner
	argsbuf := make([][]byte, 0, 8)
	run := func() {
		for off := 0; off < len(data); {
			n, kind, err := s.Scan(data[off:])
			if err != nil || n == 0 {
				panic(fmt.Sprint(n, err))
			}
			argsbuf = Args(data[off:off+n], kind, argsbuf[:0])
			off += n
		}
	}
	if a := testing.AllocsPerRun(1000, run); a != 0 {
		t.Fatalf("Scan+Args allocate %v times per pipeline", a)
	}
	inline := []byte("GET key:a\r\n")
	if a := testing.AllocsPerRun(1000, func() {
		n, kind, _ := s.Scan(inline)
		argsbuf = Args(inline[:n], kind, argsbuf[:0])
	}); a != 0 {
		t.Fatalf("inline Scan+Args allocate %v times", a)
	}
}

// TestStrchrMatchesReference pins strchr, with its byte loop over the
// first shortScan bytes, to a plain byte-by-byte reading of Redis's strchr
// on a NUL-terminated buffer: inputs of every length around shortScan with
// the target, a NUL, both or neither at every position.
func TestStrchrMatchesReference(t *testing.T) {
	ref := func(b []byte, c byte) (int, int) {
		for j, x := range b {
			if x == c {
				return j, j
			}
			if x == 0 {
				return -1, j
			}
		}
		return -1, len(b)
	}
	for n := 0; n <= 2*shortScan+3; n++ {
		for at := -1; at < n; at++ {
			for nul := -1; nul < n; nul++ {
				b := bytes.Repeat([]byte{'x'}, n)
				if at >= 0 {
					b[at] = '\r'
				}
				if nul >= 0 {
					b[nul] = 0
				}
				gi, gs := strchr(b, '\r')
				wi, ws := ref(b, '\r')
				if gi != wi || gs != ws {
					t.Fatalf("strchr(%q) = %d, %d; want %d, %d", b, gi, gs, wi, ws)
				}
			}
		}
	}
}
