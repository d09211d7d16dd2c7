package resp

import (
	"bytes"
	"testing"
)

// fuzzMax caps fuzz inputs. It is also InlineMax, so no input is long
// enough for the "too big" request errors, whose outcome (like Redis's)
// depends on how much has been buffered when the scanner looks.
const fuzzMax = 64 << 10

func FuzzReplyFramer(f *testing.F) {
	for _, tc := range replyCases {
		f.Add([]byte(tc.in), uint16(len(tc.in)/2))
	}
	for _, s := range []string{
		"x\r\n", "$abc\r\n", "$3\r\nabcXY", ":1\rX", "$-2\r\n", "*-2\r\n", "|-1\r\n",
		"$9999999999999999999\r\n", "%4611686018427387904\r\n", "$?\r\n",
		"*1\r\n|0\r\n:1\r\n", "+OK\r\n*2\r\n$3\r\nfoo",
		"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n>3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n",
	} {
		f.Add([]byte(s), uint16(1))
	}
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		if len(in) > fuzzMax {
			return
		}
		k := int(cut) % (len(in) + 1)
		whole := feedCuts(t, in, nil) // also checks n <= len(p) and progress
		if split := feedCuts(t, in, []int{k}); !split.equal(whole) {
			t.Fatalf("split at %d:\n got %v\nwant %v", k, split, whole)
		}
		if ref := refParse(in); !ref.equal(whole) {
			t.Fatalf("reference parser:\n got %v\nwant %v", whole, ref)
		}
		if len(in) <= 512 {
			bytewise := make([]int, len(in))
			for i := range bytewise {
				bytewise[i] = i + 1
			}
			if got := feedCuts(t, in, bytewise); !got.equal(whole) {
				t.Fatalf("byte by byte:\n got %v\nwant %v", got, whole)
			}
		}
	})
}

func FuzzRequestScanner(f *testing.F) {
	for _, tc := range reqCases {
		if len(tc.in) <= fuzzMax {
			f.Add([]byte(tc.in), uint16(len(tc.in)/2))
		}
	}
	for _, tc := range badRequests() {
		if len(tc.in) <= fuzzMax {
			f.Add(tc.in, uint16(3))
		}
	}
	f.Add([]byte("*1\r\n$4\r\nPING\r\nPING\r\n\r\n*0\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), uint16(17))
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		if len(in) > fuzzMax {
			return
		}
		k := int(cut) % (len(in) + 1)
		whole, rest := scanCuts(t, &RequestScanner{}, in, nil)
		split, srest := scanCuts(t, &RequestScanner{}, in, []int{k})
		if !equalRecs(whole, split) || rest != srest {
			t.Fatalf("split at %d: got %v rest %d, want %v rest %d", k, split, srest, whole, rest)
		}
		if len(in) <= 512 {
			bytewise := make([]int, len(in))
			for i := range bytewise {
				bytewise[i] = i + 1
			}
			if got, r := scanCuts(t, &RequestScanner{}, in, bytewise); !equalRecs(got, whole) || r != rest {
				t.Fatalf("byte by byte: got %v rest %d, want %v rest %d", got, r, whole, rest)
			}
		}
		off := 0
		for _, r := range whole {
			if r.Err != nil {
				break
			}
			checkArgs(t, in[off:off+r.N], r.Kind)
			off += r.N
		}
	})
}

// checkArgs checks Args on a frame Scan accepted against the arguments
// Redis would see: all of them, or (when the frame's separators are not all
// CRLF, which redcon insists on) at least the first one.
func checkArgs(t *testing.T, frame []byte, kind Kind) {
	t.Helper()
	args := Args(frame, kind, nil)
	switch kind {
	case KindEmpty:
		if len(args) != 0 {
			t.Fatalf("Args(%q) of an empty request = %q", frame, args)
		}
	case KindInline:
		if len(args) == 0 {
			t.Fatalf("Args(%q) of an inline request is empty", frame)
		}
		// Quoted sections can only join white-space separated fields, and
		// every argument lies within the frame.
		// (Redis's white space is ASCII only: " \t\r\n\v\f", not U+00A0
		// or U+0085 as bytes.Fields would have it.)
		if len(args) > len(bytes.FieldsFunc(frame, func(r rune) bool { return r < 0x80 && isSpace(byte(r)) })) {
			t.Fatalf("Args(%q) = %q: more words than fields", frame, args)
		}
		for _, a := range args {
			if len(a) > 0 && !bytes.Contains(frame, a) {
				t.Fatalf("Args(%q) = %q: %q is not part of the frame", frame, args, a)
			}
		}
	case KindMultibulk:
		want, crlf := redisArgs(frame)
		if crlf && len(args) != len(want) || len(args) != len(want) && len(args) != 1 {
			t.Fatalf("Args(%q) = %q, redis sees %q", frame, args, want)
		}
		for i := range args {
			if !bytes.Equal(args[i], want[i]) {
				t.Fatalf("Args(%q) = %q, redis sees %q", frame, args, want)
			}
		}
	default:
		t.Fatalf("kind %d", kind)
	}
}

// redisArgs splits a multibulk frame the way processMultibulkBuffer does
// (header up to CR, one unchecked byte after it, two unchecked bytes after a
// payload); crlf reports whether every one of those separators was CRLF.
func redisArgs(frame []byte) (args [][]byte, crlf bool) {
	crlf = true
	line := func(at int) (string, int) {
		r := at + bytes.IndexByte(frame[at:], '\r')
		crlf = crlf && frame[r+1] == '\n'
		return string(frame[at:r]), r + 2
	}
	count, pos := line(1)
	n, _ := parseInt([]byte(count))
	for i := int64(0); i < n; i++ {
		l, p := line(pos + 1)
		size, _ := parseInt([]byte(l))
		args = append(args, frame[p:p+int(size)])
		pos = p + int(size) + 2
		crlf = crlf && frame[pos-2] == '\r' && frame[pos-1] == '\n'
	}
	return args, crlf
}

// redisArgsOnly is redisArgs without the CRLF verdict: the arguments
// Redis's processMultibulkBuffer takes (it skips the two bytes after each
// payload unchecked).
func redisArgsOnly(frame []byte) [][]byte {
	args, _ := redisArgs(frame)
	return args
}
