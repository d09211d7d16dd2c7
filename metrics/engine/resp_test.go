package engine

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// appendValue encodes v as RESP2, the inverse of readValue for round trips.
func appendValue(b []byte, v value) []byte {
	b = append(b, v.kind)
	switch v.kind {
	case '+', '-':
		b = append(b, v.str...)
	case ':':
		b = strconv.AppendInt(b, v.num, 10)
	case '$':
		if v.null {
			return append(b, "-1\r\n"...)
		}
		b = strconv.AppendInt(b, int64(len(v.str)), 10)
		b = append(b, "\r\n"...)
		b = append(b, v.str...)
	case '*':
		if v.null {
			return append(b, "-1\r\n"...)
		}
		b = strconv.AppendInt(b, int64(len(v.elems)), 10)
		b = append(b, "\r\n"...)
		for _, e := range v.elems {
			b = appendValue(b, e)
		}
		return b
	}
	return append(b, "\r\n"...)
}

func bulk(s string) value  { return value{kind: '$', str: s} }
func num(n int64) value    { return value{kind: ':', num: n} }
func arr(e ...value) value { return value{kind: '*', elems: append([]value{}, e...)} }

func TestReadValue(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want value
	}{
		{"simple", "+PONG\r\n", value{kind: '+', str: "PONG"}},
		{"error", "-ERR unknown subcommand 'HISTOGRAM'\r\n", value{kind: '-', str: "ERR unknown subcommand 'HISTOGRAM'"}},
		{"integer", ":-42\r\n", num(-42)},
		{"bulk", "$5\r\nhe\r\no\r\n", bulk("he\r\no")},
		{"empty bulk", "$0\r\n\r\n", bulk("")},
		{"null bulk", "$-1\r\n", value{kind: '$', null: true}},
		{"null array", "*-1\r\n", value{kind: '*', null: true}},
		{"empty array", "*0\r\n", arr()},
		{"nested", "*2\r\n$3\r\nget\r\n*2\r\n:8\r\n:1\r\n", arr(bulk("get"), arr(num(8), num(1)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, split := range []string{"whole", "bytewise"} {
				var r io.Reader = strings.NewReader(tt.in + "+next\r\n")
				if split == "bytewise" {
					r = iotest.OneByteReader(r)
				}
				br := bufio.NewReaderSize(r, maxLineLen)
				got, err := readValue(br)
				if err != nil {
					t.Fatalf("%s: %v", split, err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("%s: got %+v, want %+v", split, got, tt.want)
				}
				// The reader stops exactly at the end of the reply.
				next, err := readValue(br)
				if err != nil || next.str != "next" {
					t.Errorf("%s: following reply: %+v, %v", split, next, err)
				}
			}
		})
	}
}

func TestReadValueBad(t *testing.T) {
	long := "+" + strings.Repeat("x", maxLineLen) + "\r\n"
	deep := strings.Repeat("*1\r\n", maxDepth+1) + ":1\r\n"
	tests := []struct {
		name    string
		in      string
		wantErr error // errProtocol, or the reader's error for a cut reply
	}{
		{"unknown type", "%1\r\n", errProtocol},
		{"LF only", "+OK\n", errProtocol},
		{"empty line", "\r\n", errProtocol},
		{"bad integer", ":12a\r\n", errProtocol},
		{"bad length", "$x\r\n", errProtocol},
		{"negative length", "$-2\r\n", errProtocol},
		{"bulk too long", "$" + strconv.Itoa(maxBulkLen+1) + "\r\n", errProtocol},
		{"array too long", "*" + strconv.Itoa(maxArrayLen+1) + "\r\n", errProtocol},
		{"bulk without CRLF", "$2\r\nabcd", errProtocol},
		{"line too long", long, errProtocol},
		{"too deep", deep, errProtocol},
		{"cut line", "+PON", io.EOF},
		{"cut bulk", "$5\r\nab", io.ErrUnexpectedEOF},
		{"cut array", "*2\r\n:1\r\n", io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readValue(bufio.NewReaderSize(strings.NewReader(tt.in), maxLineLen))
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestAppendCommand(t *testing.T) {
	got := string(appendCommand(nil, "CLIENT", "SETNAME", "respmeter-probe"))
	want := "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$15\r\nrespmeter-probe\r\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestReadValueCapturedSplits reads every captured reply cut at random
// points into reads of random sizes and compares with the whole read.
func TestReadValueCapturedSplits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, path := range capturedFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := readValue(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for range 20 {
			r := &chunkReader{b: b, rng: rng}
			got, err := readValue(bufio.NewReaderSize(r, maxLineLen))
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: split read: %v", path, err)
			}
		}
	}
}

// chunkReader returns b in reads of 1..8 bytes.
type chunkReader struct {
	b   []byte
	rng *rand.Rand
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.b), 1+r.rng.IntN(8))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

func capturedFiles(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*.resp"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no testdata/*.resp: %v", err)
	}
	return paths
}

// FuzzReadValue checks that readValue never panics and that what it accepts
// survives a round trip: encoded again and read back, the value is the same.
func FuzzReadValue(f *testing.F) {
	for _, path := range capturedFiles(f) {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("*2\r\n$-1\r\n*-1\r\n"))
	f.Add([]byte("-ERR x\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 1<<16 {
			return
		}
		v, err := readValue(bufio.NewReaderSize(bytes.NewReader(in), maxLineLen))
		if err != nil {
			return
		}
		enc := appendValue(nil, v)
		again, err := readValue(bufio.NewReaderSize(bytes.NewReader(enc), maxLineLen))
		if err != nil {
			t.Fatalf("re-encoded %q: %v", enc, err)
		}
		if !reflect.DeepEqual(again, v) {
			t.Fatalf("round trip: %+v != %+v", again, v)
		}
		// The interpreters must not panic on whatever shape came back.
		_, _ = parseLatencyHistogram(v)
		if text, err := infoText(v); err == nil {
			_, _ = parseCommandStats(text)
			_, _ = parseLatencyStats(text)
		}
	})
}
