package respconn

import (
	"bufio"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/respmeter/respmeter/internal/resp"
)

func bulk(s string) Value  { return Value{Type: resp.TypeBlobString, Str: s} }
func num(n int64) Value    { return Value{Type: resp.TypeInteger, Int: n} }
func arr(e ...Value) Value { return Value{Type: resp.TypeArray, Elems: append([]Value{}, e...)} }

func TestRead(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Value
	}{
		{"simple", "+PONG\r\n", Value{Type: resp.TypeSimpleString, Str: "PONG"}},
		{"error", "-ERR unknown subcommand 'HISTOGRAM'\r\n", Value{Type: resp.TypeError, Str: "ERR unknown subcommand 'HISTOGRAM'"}},
		{"integer", ":-42\r\n", num(-42)},
		{"bulk", "$5\r\nhe\r\no\r\n", bulk("he\r\no")},
		{"empty bulk", "$0\r\n\r\n", bulk("")},
		{"null bulk", "$-1\r\n", Value{Type: resp.TypeBlobString, Null: true}},
		{"null array", "*-1\r\n", Value{Type: resp.TypeArray, Null: true}},
		{"empty array", "*0\r\n", arr()},
		{"nested", "*2\r\n$3\r\nget\r\n*2\r\n:8\r\n:1\r\n", arr(bulk("get"), arr(num(8), num(1)))},
		// RESP3 types (RESP3.md).
		{"null", "_\r\n", Value{Type: resp.TypeNull, Null: true}},
		{"double", ",3.5\r\n", Value{Type: resp.TypeDouble, Str: "3.5"}},
		{"double inf", ",-inf\r\n", Value{Type: resp.TypeDouble, Str: "-inf"}},
		{"true", "#t\r\n", Value{Type: resp.TypeBoolean, Int: 1}},
		{"false", "#f\r\n", Value{Type: resp.TypeBoolean}},
		{"big number", "(3492890328409238509324850943850943825024385\r\n", Value{Type: resp.TypeBigNumber, Str: "3492890328409238509324850943850943825024385"}},
		{"bulk error", "!21\r\nSYNTAX invalid syntax\r\n", Value{Type: resp.TypeBlobError, Str: "SYNTAX invalid syntax"}},
		{"verbatim", "=15\r\ntxt:Some string\r\n", Value{Type: resp.TypeVerbatim, Str: "Some string"}},
		{"map", "%2\r\n+first\r\n:1\r\n$6\r\nsecond\r\n_\r\n", Value{Type: resp.TypeMap, Elems: []Value{
			{Type: resp.TypeSimpleString, Str: "first"}, num(1), bulk("second"), {Type: resp.TypeNull, Null: true}}}},
		{"set", "~2\r\n:1\r\n:2\r\n", Value{Type: resp.TypeSet, Elems: []Value{num(1), num(2)}}},
		{"push", ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n", Value{Type: resp.TypePush, Elems: []Value{bulk("invalidate"), arr(bulk("k"))}}},
		{"attribute dropped", "|1\r\n+ttl\r\n:3600\r\n*1\r\n:2\r\n", arr(num(2))},
		{"attribute inside array", "*2\r\n|1\r\n+a\r\n:1\r\n:5\r\n:6\r\n", arr(num(5), num(6))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, split := range []string{"whole", "bytewise"} {
				var r io.Reader = strings.NewReader(tt.in + "+next\r\n")
				if split == "bytewise" {
					r = iotest.OneByteReader(r)
				}
				br := bufio.NewReaderSize(r, MaxLineLen)
				got, err := Read(br)
				if err != nil {
					t.Fatalf("%s: %v", split, err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("%s: got %+v, want %+v", split, got, tt.want)
				}
				// The reader stops exactly at the end of the reply.
				next, err := Read(br)
				if err != nil || next.Str != "next" {
					t.Errorf("%s: following reply: %+v, %v", split, next, err)
				}
			}
		})
	}
}

func TestReadBad(t *testing.T) {
	long := "+" + strings.Repeat("x", MaxLineLen) + "\r\n"
	deep := strings.Repeat("*1\r\n", MaxDepth+1) + ":1\r\n"
	deepMap := strings.Repeat("%1\r\n+k\r\n", MaxDepth+1) + ":1\r\n"
	tests := []struct {
		name    string
		in      string
		wantErr error // ErrProtocol, or the reader's error for a cut reply
	}{
		{"unknown type", "@1\r\n", ErrProtocol},
		{"streamed string", "$?\r\n;4\r\nHell\r\n;0\r\n", ErrProtocol},
		{"LF only", "+OK\n", ErrProtocol},
		{"empty line", "\r\n", ErrProtocol},
		{"bad integer", ":12a\r\n", ErrProtocol},
		{"bad double", ",1.2.3\r\n", ErrProtocol},
		{"bad boolean", "#x\r\n", ErrProtocol},
		{"null with body", "_x\r\n", ErrProtocol},
		{"bad length", "$x\r\n", ErrProtocol},
		{"negative length", "$-2\r\n", ErrProtocol},
		{"bulk too long", "$" + strconv.Itoa(MaxBulkLen+1) + "\r\n", ErrProtocol},
		{"bulk error too long", "!" + strconv.Itoa(MaxBulkLen+1) + "\r\n", ErrProtocol},
		{"array too long", "*" + strconv.Itoa(MaxElems+1) + "\r\n", ErrProtocol},
		{"map too long", "%" + strconv.Itoa(MaxElems/2+1) + "\r\n", ErrProtocol},
		{"huge length", "*99999999999999999999\r\n", ErrProtocol},
		{"bulk without CRLF", "$2\r\nabcd", ErrProtocol},
		{"verbatim without tag", "=2\r\nab\r\n", ErrProtocol},
		{"line too long", long, ErrProtocol},
		{"too deep", deep, ErrProtocol},
		{"maps too deep", deepMap, ErrProtocol},
		{"cut line", "+PON", io.EOF},
		{"cut bulk", "$5\r\nab", io.ErrUnexpectedEOF},
		{"cut array", "*2\r\n:1\r\n", io.EOF},
		{"cut map", "%1\r\n+k\r\n", io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(bufio.NewReaderSize(strings.NewReader(tt.in), MaxLineLen))
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// TestReadDepthLimit reads the deepest nesting allowed, one level below
// what TestReadBad refuses.
func TestReadDepthLimit(t *testing.T) {
	in := strings.Repeat("*1\r\n", MaxDepth) + ":1\r\n"
	v, err := Read(bufio.NewReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	for range MaxDepth {
		v = v.Elems[0]
	}
	if !reflect.DeepEqual(v, num(1)) {
		t.Errorf("innermost = %+v", v)
	}
}

func TestAny(t *testing.T) {
	in := "*9\r\n_\r\n$-1\r\n+s\r\n:7\r\n,2.5\r\n#t\r\n-ERR x\r\n~1\r\n=7\r\ntxt:abc\r\n%2\r\n+k\r\n*0\r\n:3\r\n(12\r\n"
	v, err := Read(bufio.NewReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	want := []any{nil, nil, "s", int64(7), 2.5, true, ServerError("ERR x"), []any{"abc"},
		map[string]any{"k": []any{}, "3": "12"}}
	if got := v.Any(); !reflect.DeepEqual(got, want) {
		t.Errorf("Any() = %#v\nwant %#v", got, want)
	}
}

func TestValueErr(t *testing.T) {
	var se ServerError
	if err := (Value{Type: resp.TypeBlobError, Str: "SYNTAX x"}).Err(); !errors.As(err, &se) || se != "SYNTAX x" {
		t.Errorf("bulk error: Err() = %v", err)
	}
	if err := bulk("ERR not an error").Err(); err != nil {
		t.Errorf("bulk string: Err() = %v", err)
	}
}

func TestAppendCommand(t *testing.T) {
	got := string(AppendCommand(nil, "CLIENT", "SETNAME", "respmeter-probe"))
	want := "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$15\r\nrespmeter-probe\r\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestAppendRaw: AppendRaw appends each reply's bytes as they came (after
// what dst held), reads the same replies Read does, refuses RESP3 types
// with RESP2 set, and keeps what it read of a reply it refuses.
func TestAppendRaw(t *testing.T) {
	replies := []string{"+OK\r\n", "$5\r\nhello\r\n", "*2\r\n:1\r\n$-1\r\n", "%1\r\n+a\r\n#t\r\n", "=8\r\ntxt:abcd\r\n", "|1\r\n+k\r\n+v\r\n:3\r\n"}
	in := strings.Join(replies, "")
	br := bufio.NewReaderSize(strings.NewReader(in), 16)
	rd := Reader{MaxBulkLen: MaxBulkLen, MaxElems: MaxElems, MaxDepth: MaxDepth}
	for _, want := range replies {
		got, err := rd.AppendRaw([]byte("keep"), br)
		if err != nil || string(got) != "keep"+want {
			t.Errorf("AppendRaw = %q, %v; want %q", got, err, "keep"+want)
		}
	}
	rd.RESP2 = true
	if got, err := rd.AppendRaw(nil, bufio.NewReader(strings.NewReader("*2\r\n:1\r\n_\r\n"))); !errors.Is(err, ErrProtocol) || string(got) != "*2\r\n:1\r\n_\r\n" {
		t.Errorf("RESP2 reader on a RESP3 null: %q, %v; want the bytes read and ErrProtocol", got, err)
	}
	if got, err := rd.AppendRaw(nil, bufio.NewReader(strings.NewReader("$5\r\nab"))); err == nil || errors.Is(err, ErrProtocol) || string(got) != "$5\r\nab" {
		t.Errorf("cut bulk: %q, %v; want the bytes read and an I/O error", got, err)
	}
}
