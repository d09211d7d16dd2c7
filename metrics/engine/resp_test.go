package engine

import (
	"bufio"
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
)

// appendValue encodes v as RESP2, the inverse of respconn.Read for round trips.
func appendValue(b []byte, v respconn.Value) []byte {
	b = append(b, v.Type)
	switch v.Type {
	case resp.TypeSimpleString, resp.TypeError:
		b = append(b, v.Str...)
	case resp.TypeInteger:
		b = strconv.AppendInt(b, v.Int, 10)
	case resp.TypeBlobString:
		if v.Null {
			return append(b, "-1\r\n"...)
		}
		b = strconv.AppendInt(b, int64(len(v.Str)), 10)
		b = append(b, "\r\n"...)
		b = append(b, v.Str...)
	case resp.TypeArray:
		if v.Null {
			return append(b, "-1\r\n"...)
		}
		b = strconv.AppendInt(b, int64(len(v.Elems)), 10)
		b = append(b, "\r\n"...)
		for _, e := range v.Elems {
			b = appendValue(b, e)
		}
		return b
	}
	return append(b, "\r\n"...)
}

// isRESP2 reports whether v and its elements are of RESP2 types only, the
// ones appendValue encodes.
func isRESP2(v respconn.Value) bool {
	switch v.Type {
	case resp.TypeSimpleString, resp.TypeError, resp.TypeInteger, resp.TypeBlobString:
		return true
	case resp.TypeArray:
		for _, e := range v.Elems {
			if !isRESP2(e) {
				return false
			}
		}
		return true
	}
	return false
}

func bulk(s string) respconn.Value { return respconn.Value{Type: resp.TypeBlobString, Str: s} }
func num(n int64) respconn.Value   { return respconn.Value{Type: resp.TypeInteger, Int: n} }
func arr(e ...respconn.Value) respconn.Value {
	return respconn.Value{Type: resp.TypeArray, Elems: append([]respconn.Value{}, e...)}
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
		want, err := respconn.Read(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for range 20 {
			r := &chunkReader{b: b, rng: rng}
			got, err := respconn.Read(bufio.NewReaderSize(r, respconn.MaxLineLen))
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

// FuzzReadValue checks that respconn.Read never panics and that what it accepts
// survives a round trip: encoded again and read back, the respconn.Value is the same.
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
		v, err := respconn.Read(bufio.NewReaderSize(bytes.NewReader(in), respconn.MaxLineLen))
		if err != nil || !isRESP2(v) {
			return
		}
		enc := appendValue(nil, v)
		again, err := respconn.Read(bufio.NewReaderSize(bytes.NewReader(enc), respconn.MaxLineLen))
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
