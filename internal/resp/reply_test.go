package resp

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// frameRec is what a test records about one complete reply: where it ended
// in the input and the Frame fields.
type frameRec struct {
	End  int
	Type byte
	Head string
	Int  int64
	Len  int64
}

func (f frameRec) String() string {
	return fmt.Sprintf("{End:%d Type:%q Head:%q Int:%d Len:%d}", f.End, f.Type, f.Head, f.Int, f.Len)
}

// feedResult is the outcome of feeding a whole input, however chunked.
type feedResult struct {
	Frames  []frameRec
	Err     error // nil, ErrBadReply or ErrTooDeep
	ErrAt   int   // input offset where Feed stopped: past a bad type or length byte, before a bad CR or LF
	InFrame bool  // input ended inside a reply
}

func (r feedResult) String() string {
	return fmt.Sprintf("frames=%v err=%v errAt=%d inFrame=%v", r.Frames, r.Err, r.ErrAt, r.InFrame)
}

func (r feedResult) equal(o feedResult) bool {
	if len(r.Frames) != len(o.Frames) || r.Err != o.Err || r.ErrAt != o.ErrAt || r.InFrame != o.InFrame {
		return false
	}
	for i := range r.Frames {
		if r.Frames[i] != o.Frames[i] {
			return false
		}
	}
	return true
}

// feedCuts feeds in to a fresh framer in chunks ending at cuts (increasing
// offsets; len(in) is implied as the last one), checking the Feed contract
// on the way.
func feedCuts(tb testing.TB, in []byte, cuts []int) feedResult {
	tb.Helper()
	r := NewReplyFramer()
	var res feedResult
	start := 0
	for ci := 0; ci <= len(cuts); ci++ {
		end := len(in)
		if ci < len(cuts) {
			end = cuts[ci]
		}
		if end < start {
			continue
		}
		off := start
		for off < end {
			p := in[off:end]
			n, done, err := r.Feed(p)
			if n < 0 || n > len(p) {
				tb.Fatalf("Feed consumed %d of %d bytes", n, len(p))
			}
			off += n
			if err != nil {
				res.Err, res.ErrAt = err, off
				// A failed framer stays failed.
				if n2, d2, err2 := r.Feed([]byte("+OK\r\n")); n2 != 0 || d2 || err2 == nil {
					tb.Fatalf("Feed after %v = (%d, %v, %v), want a failure", err, n2, d2, err2)
				}
				return res
			}
			if done {
				f := r.Frame()
				res.Frames = append(res.Frames, frameRec{End: off, Type: f.Type,
					Head: string(f.Head), Int: f.Int, Len: f.Len})
				if r.InFrame() {
					tb.Fatalf("InFrame after a complete frame")
				}
				continue
			}
			if off != end {
				tb.Fatalf("Feed returned (%d, false, nil) with %d bytes left", n, end-off)
			}
		}
		start = end
	}
	res.InFrame = r.InFrame()
	return res
}

// refParse is an independent, non-incremental reading of the documented
// ReplyFramer contract over a whole buffer: the expected result of feeding
// it in any chunking.
func refParse(in []byte) feedResult {
	p := &refParser{in: in}
	var res feedResult
	for p.pos < len(in) {
		p.f = frameRec{}
		err := p.value(0, true)
		switch {
		case err == errRefShort:
			res.InFrame = true
			return res
		case err != nil:
			res.Err, res.ErrAt = err, p.pos
			return res
		}
		p.f.End = p.pos
		res.Frames = append(res.Frames, p.f)
	}
	return res
}

var errRefShort = errors.New("incomplete")

type refParser struct {
	in  []byte
	pos int
	f   frameRec
}

// value parses one value (after any attributes) at nesting depth d. top is
// true for the reply itself; elem0/direct describe a value directly inside a
// top-level '*' or '>'.
func (p *refParser) value(d int, top bool) error { return p.valueCtx(d, top, false, false) }

func (p *refParser) valueCtx(d int, top, first, direct bool) error {
	for {
		if p.pos >= len(p.in) {
			return errRefShort
		}
		t := p.in[p.pos]
		p.pos++
		switch t {
		case '+', '-', ':', ',', '(', '#', '_':
			line, err := p.line()
			if err != nil {
				return err
			}
			if top {
				p.f.Type = t
				if t == '+' || t == '-' {
					p.f.Head = clip(line)
				}
			}
			if first && t == '+' {
				p.f.Head = clip(line)
			}
			if direct && t == ':' {
				p.f.Int = refInt(line)
			}
			return nil
		case '$', '!', '=', '*', '%', '~', '>', '|':
			n, err := p.length(t == '$' || t == '*' || t == '%' || t == '~')
			if err != nil {
				return err
			}
			if n == refStreamed {
				if top {
					p.f.Type = t
				}
				if t == '$' {
					return p.chunks(first)
				}
				if d >= MaxReplyDepth {
					return ErrTooDeep
				}
				pub := top && t == '*'
				for i := 0; ; i++ {
					if p.pos >= len(p.in) {
						return errRefShort
					}
					if p.in[p.pos] == '.' {
						p.pos++
						if p.pos >= len(p.in) {
							return errRefShort
						}
						if p.in[p.pos] != '\r' {
							return ErrBadReply // the end marker is ".\r\n"
						}
						_, err := p.line()
						return err
					}
					if err := p.valueCtx(d+1, false, pub && i == 0, pub); err != nil {
						return err
					}
				}
			}
			if t == '|' {
				if n < 0 {
					return ErrBadReply
				}
				if n > math.MaxInt64/2 {
					return ErrBadReply
				}
				if n > 0 && d >= MaxReplyDepth {
					return ErrTooDeep
				}
				for i := int64(0); i < 2*n; i++ {
					if err := p.valueCtx(d+1, false, false, false); err != nil {
						return err
					}
				}
				continue // the annotated value follows
			}
			if top {
				p.f.Type, p.f.Len = t, n
			}
			switch t {
			case '$', '!', '=':
				if n < 0 {
					return nil
				}
				if int64(len(p.in)-p.pos) < n {
					return errRefShort
				}
				if first && t == '$' {
					p.f.Head = clip(p.in[p.pos : p.pos+int(n)])
				}
				p.pos += int(n)
				for _, c := range []byte("\r\n") {
					if p.pos >= len(p.in) {
						return errRefShort
					}
					if p.in[p.pos] != c {
						return ErrBadReply // the framer stops before it
					}
					p.pos++
				}
				return nil
			}
			if t == '%' {
				if n > math.MaxInt64/2 {
					return ErrBadReply
				}
				n *= 2
			}
			if n <= 0 {
				return nil
			}
			if d >= MaxReplyDepth {
				return ErrTooDeep
			}
			pub := top && (t == '*' || t == '>')
			for i := int64(0); i < n; i++ {
				if err := p.valueCtx(d+1, false, pub && i == 0, pub); err != nil {
					return err
				}
			}
			return nil
		default:
			return ErrBadReply
		}
	}
}

// line returns the bytes up to CR and consumes CRLF.
func (p *refParser) line() ([]byte, error) {
	j := bytes.IndexByte(p.in[p.pos:], '\r')
	if j < 0 {
		p.pos = len(p.in)
		return nil, errRefShort
	}
	line := p.in[p.pos : p.pos+j]
	p.pos += j + 1
	if p.pos >= len(p.in) {
		return nil, errRefShort
	}
	if p.in[p.pos] != '\n' {
		return nil, ErrBadReply // the framer stops before a bad LF
	}
	p.pos++
	return line, nil
}

// refStreamed is what length returns for a '?' length (RESP3 streamed
// strings and aggregates).
const refStreamed = -2

// chunks parses the ';' chunks of a streamed string up to ';0'.
func (p *refParser) chunks(first bool) error {
	var head []byte
	for {
		if p.pos >= len(p.in) {
			return errRefShort
		}
		c := p.in[p.pos]
		p.pos++
		if c != ';' {
			return ErrBadReply
		}
		n, err := p.length(false)
		if err != nil {
			return err
		}
		if n < 0 {
			return ErrBadReply
		}
		if n == 0 {
			if first {
				p.f.Head = clip(head)
			}
			return nil
		}
		if int64(len(p.in)-p.pos) < n {
			return errRefShort
		}
		head = append(head, p.in[p.pos:p.pos+int(n)]...)
		p.pos += int(n)
		for _, c := range []byte("\r\n") {
			if p.pos >= len(p.in) {
				return errRefShort
			}
			if p.in[p.pos] != c {
				return ErrBadReply
			}
			p.pos++
		}
	}
}

// length parses "[-]digits\r\n": -1 is the only negative value, the number
// must fit in int64 (leading zeros are tolerated). With streamable, "?\r\n"
// is allowed too (refStreamed).
func (p *refParser) length(streamable bool) (int64, error) {
	var v int64
	neg, nd, q := false, 0, false
	for {
		if p.pos >= len(p.in) {
			return 0, errRefShort
		}
		c := p.in[p.pos]
		p.pos++
		switch {
		case c == '?' && streamable && nd == 0 && !neg && !q:
			q = true
		case q && c != '\r':
			return 0, ErrBadReply
		case c >= '0' && c <= '9':
			if v > (math.MaxInt64-int64(c-'0'))/10 {
				return 0, ErrBadReply
			}
			v = v*10 + int64(c-'0')
			nd++
		case c == '-' && nd == 0 && !neg:
			neg = true
		case c == '\r':
			if p.pos >= len(p.in) {
				return 0, errRefShort
			}
			if p.in[p.pos] != '\n' {
				return 0, ErrBadReply // the framer stops before a bad LF
			}
			p.pos++
			if q {
				return refStreamed, nil
			}
			if nd == 0 || neg && v != 1 {
				return 0, ErrBadReply
			}
			if neg {
				return -1, nil
			}
			return v, nil
		default:
			return 0, ErrBadReply
		}
	}
}

func clip(b []byte) string {
	if len(b) > HeadLen {
		b = b[:HeadLen]
	}
	return string(b)
}

// refInt reads an integer line the way Frame.Int documents it for the
// values Redis sends; stray bytes are skipped.
func refInt(line []byte) int64 {
	var v int64
	neg, nd := false, 0
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9' && nd < 19:
			v = v*10 + int64(c-'0')
			nd++
		case c == '-' && nd == 0:
			neg = true
		}
	}
	if neg {
		v = -v
	}
	return v
}

// checkAllChunkings feeds in whole, one byte at a time, split in two at
// every point, and in random chunks, and requires the same result each time.
func checkAllChunkings(t *testing.T, in []byte, want feedResult, rng *rand.Rand, iters int) {
	t.Helper()
	if got := feedCuts(t, in, nil); !got.equal(want) {
		t.Fatalf("whole:\n got %v\nwant %v", got, want)
	}
	bytewise := make([]int, len(in))
	for i := range bytewise {
		bytewise[i] = i + 1
	}
	if got := feedCuts(t, in, bytewise); !got.equal(want) {
		t.Fatalf("byte by byte:\n got %v\nwant %v", got, want)
	}
	for k := 0; k <= len(in); k++ {
		if got := feedCuts(t, in, []int{k}); !got.equal(want) {
			t.Fatalf("split at %d:\n got %v\nwant %v", k, got, want)
		}
	}
	for it := 0; it < iters; it++ {
		cuts := randomCuts(rng, len(in))
		if got := feedCuts(t, in, cuts); !got.equal(want) {
			t.Fatalf("chunks %v:\n got %v\nwant %v", cuts, got, want)
		}
	}
}

func randomCuts(rng *rand.Rand, n int) []int {
	var cuts []int
	for at := 0; at < n; {
		// Mostly small chunks, sometimes large ones.
		step := 1 + rng.IntN(8)
		if rng.IntN(4) == 0 {
			step = 1 + rng.IntN(n+1)
		}
		at += step
		if at < n {
			cuts = append(cuts, at)
		}
	}
	return cuts
}

type replyCase struct {
	name string
	in   string
	want frameRec // End is filled in from len(in)
}

var (
	nested6 = "*2\r\n:1\r\n*2\r\n:2\r\n*2\r\n:3\r\n*2\r\n:4\r\n*2\r\n:5\r\n*1\r\n:6\r\n"
	// C-03: 20 bytes with CR, LF, NUL and RESP type characters.
	c03Payload = "\x00\r\n$*+-:\xff\xfe\x80\x7f\r\r\n\n \t12"
	long400s   = strings.Repeat("s", 400)
)

var replyCases = []replyCase{
	{"simple", "+OK\r\n", frameRec{Type: '+', Head: "OK"}},
	{"simple-empty", "+\r\n", frameRec{Type: '+'}},
	{"error", "-ERR unknown command 'foo'\r\n", frameRec{Type: '-', Head: "ERR unknown comm"}},
	{"integer", ":1000\r\n", frameRec{Type: ':'}},
	{"integer-neg", ":-42\r\n", frameRec{Type: ':'}},
	{"bulk", "$5\r\nhello\r\n", frameRec{Type: '$', Len: 5}},
	{"bulk-empty", "$0\r\n\r\n", frameRec{Type: '$', Len: 0}},
	{"bulk-null", "$-1\r\n", frameRec{Type: '$', Len: -1}},
	{"bulk-crlfnul", "$20\r\n" + c03Payload + "\r\n", frameRec{Type: '$', Len: 20}},
	{"bulk-leading-zero", "$03\r\nabc\r\n", frameRec{Type: '$', Len: 3}},
	{"bulk-70000", "$70000\r\n" + strings.Repeat("v", 70000) + "\r\n", frameRec{Type: '$', Len: 70000}},
	{"array-null", "*-1\r\n", frameRec{Type: '*', Len: -1}},
	{"array-empty", "*0\r\n", frameRec{Type: '*', Len: 0}},
	{"array", "*2\r\n$3\r\nfoo\r\n$3\r\nbar\r\n", frameRec{Type: '*', Head: "foo", Len: 2}},
	{"array-empty-elems", "*3\r\n*0\r\n*-1\r\n$-1\r\n", frameRec{Type: '*', Len: 3}},
	{"array-null-first", "*2\r\n$-1\r\n$1\r\nx\r\n", frameRec{Type: '*', Len: 2}},
	{"C-02-nested6", nested6, frameRec{Type: '*', Int: 1, Len: 2}},
	{"C-02-mixed", "*3\r\n:1\r\n+OK\r\n$1\r\nx\r\n", frameRec{Type: '*', Int: 1, Len: 3}},
	{"C-02-exec", "*2\r\n:2\r\n*2\r\n$1\r\nx\r\n$1\r\ny\r\n", frameRec{Type: '*', Int: 2, Len: 2}},
	{"array-status-first", "*2\r\n+QUEUED\r\n:7\r\n", frameRec{Type: '*', Head: "QUEUED", Int: 7, Len: 2}},
	{"array-head-clipped", "*1\r\n$20\r\nabcdefghijklmnopqrst\r\n", frameRec{Type: '*', Head: "abcdefghijklmnop", Len: 1}},
	{"array-int-max", "*1\r\n:9223372036854775807\r\n", frameRec{Type: '*', Int: math.MaxInt64, Len: 1}},
	{"array-int-min", "*1\r\n:-9223372036854775808\r\n", frameRec{Type: '*', Int: math.MinInt64, Len: 1}},
	{"array-last-int", "*3\r\n:1\r\n*1\r\n:99\r\n:3\r\n", frameRec{Type: '*', Int: 3, Len: 3}},
	{"subscribe", "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n", frameRec{Type: '*', Head: "subscribe", Int: 1, Len: 3}},
	{"punsubscribe", "*3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n", frameRec{Type: '*', Head: "punsubscribe", Len: 3}},
	{"resp2-pong", "*2\r\n$4\r\npong\r\n$0\r\n\r\n", frameRec{Type: '*', Head: "pong", Len: 2}},
	{"null", "_\r\n", frameRec{Type: '_'}},
	{"double", ",3.14\r\n", frameRec{Type: ','}},
	{"double-inf", ",-inf\r\n", frameRec{Type: ','}},
	{"bool-t", "#t\r\n", frameRec{Type: '#'}},
	{"bool-f", "#f\r\n", frameRec{Type: '#'}},
	{"bignum", "(3492890328409238509324850943850943825024385\r\n", frameRec{Type: '('}},
	{"verbatim", "=15\r\ntxt:Some string\r\n", frameRec{Type: '=', Len: 15}},
	{"blob-error", "!21\r\nSYNTAX invalid syntax\r\n", frameRec{Type: '!', Len: 21}},
	{"map", "%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n", frameRec{Type: '%', Len: 2}},
	{"map-empty", "%0\r\n", frameRec{Type: '%'}},
	{"hello", "%3\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:7\r\n",
		frameRec{Type: '%', Len: 3}},
	{"set", "~5\r\n+orange\r\n+apple\r\n#t\r\n:100\r\n:999\r\n", frameRec{Type: '~', Len: 5}},
	{"set-empty", "~0\r\n", frameRec{Type: '~'}},
	{"map-nested-attr", "%2\r\n$1\r\na\r\n|1\r\n+ttl\r\n:10\r\n:1\r\n|1\r\n+k\r\n|1\r\n+x\r\n+y\r\n+v\r\n$1\r\nb\r\n%1\r\n+n\r\n|1\r\n+m\r\n_\r\n:2\r\n",
		frameRec{Type: '%', Len: 2}},
	{"attr-top", "|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n",
		frameRec{Type: '*', Int: 9543892, Len: 2}},
	{"attr-top-int-ignored", "|1\r\n+a\r\n:5\r\n*1\r\n$1\r\nx\r\n", frameRec{Type: '*', Head: "x", Len: 1}},
	{"attr-top-simple", "|1\r\n+a\r\n+b\r\n+OK\r\n", frameRec{Type: '+', Head: "OK"}},
	{"attr-in-attr", "|1\r\n+a\r\n|1\r\n+x\r\n+y\r\n+b\r\n-ERR x\r\n", frameRec{Type: '-', Head: "ERR x"}},
	{"attr-two", "|1\r\n+a\r\n+b\r\n|1\r\n+c\r\n+d\r\n:1\r\n", frameRec{Type: ':'}},
	{"attr-in-array", "*3\r\n:1\r\n:2\r\n|1\r\n+ttl\r\n:3600\r\n:3\r\n", frameRec{Type: '*', Int: 3, Len: 3}},
	{"attr-first-elem", "*2\r\n|1\r\n+a\r\n+b\r\n$9\r\nsubscribe\r\n:1\r\n", frameRec{Type: '*', Head: "subscribe", Int: 1, Len: 2}},
	{"attr-empty-top", "|0\r\n+OK\r\n", frameRec{Type: '+', Head: "OK"}},
	{"attr-empty-in-array", "*1\r\n|0\r\n:1\r\n", frameRec{Type: '*', Int: 1, Len: 1}},
	{"push-message", ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", frameRec{Type: '>', Head: "message", Len: 3}},
	{"push-invalidate", ">2\r\n$10\r\ninvalidate\r\n*1\r\n$5\r\nkey:a\r\n", frameRec{Type: '>', Head: "invalidate", Len: 2}},
	{"push-invalidate-all", ">2\r\n$10\r\ninvalidate\r\n_\r\n", frameRec{Type: '>', Head: "invalidate", Len: 2}},
	{"push-subscribe", ">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:2\r\n", frameRec{Type: '>', Head: "subscribe", Int: 2, Len: 3}},
	{"C-04b-status", "+" + long400s + "\r\n", frameRec{Type: '+', Head: long400s[:HeadLen]}},
	{"C-04b-error", "-ERR " + strings.Repeat("e", 398) + "\r\n", frameRec{Type: '-', Head: "ERR eeeeeeeeeeee"}},
	{"monitor", "+1700000000.123456 [0 127.0.0.1:5000] \"set\" \"key:m\" \"1\"\r\n",
		frameRec{Type: '+', Head: "1700000000.12345"}},
	{"line-with-lf", "+a\nb\r\n", frameRec{Type: '+', Head: "a\nb"}},
	// RESP3 spec, "Streamed strings" and "Streamed aggregates".
	{"streamed-string", "$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;1\r\nd\r\n;0\r\n", frameRec{Type: '$'}},
	{"streamed-string-empty", "$?\r\n;0\r\n", frameRec{Type: '$'}},
	{"streamed-array", "*?\r\n:1\r\n:2\r\n:3\r\n.\r\n", frameRec{Type: '*', Int: 3}},
	{"streamed-array-empty", "*?\r\n.\r\n", frameRec{Type: '*'}},
	{"streamed-map", "%?\r\n+a\r\n:1\r\n+b\r\n:2\r\n.\r\n", frameRec{Type: '%'}},
	{"streamed-set-nested", "~?\r\n*?\r\n$?\r\n;2\r\nab\r\n;0\r\n.\r\n|1\r\n+t\r\n:1\r\n+x\r\n.\r\n", frameRec{Type: '~'}},
	{"streamed-first-elem", "*?\r\n$?\r\n;3\r\nsub\r\n;6\r\nscribe\r\n;0\r\n:7\r\n.\r\n",
		frameRec{Type: '*', Head: "subscribe", Int: 7}},
	{"streamed-in-array", "*2\r\n%?\r\n.\r\n$?\r\n;1\r\n\r\r\n;0\r\n", frameRec{Type: '*', Len: 2}},
}

func TestReplyFramerCases(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range replyCases {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			want.End = len(tc.in)
			wantRes := feedResult{Frames: []frameRec{want}}
			if got := refParse([]byte(tc.in)); !got.equal(wantRes) {
				t.Fatalf("reference parser disagrees with the case:\n got %v\nwant %v", got, wantRes)
			}
			iters := 200
			if len(tc.in) > 1000 {
				iters = 5 // the exhaustive splits above already cost O(n²)
			}
			checkAllChunkings(t, []byte(tc.in), wantRes, rng, iters)
		})
	}
}

// TestReplyFramerConcatenated runs every case back to back in one stream,
// plus a trailing partial reply.
func TestReplyFramerConcatenated(t *testing.T) {
	var in []byte
	var want feedResult
	for _, tc := range replyCases {
		if len(tc.in) > 1000 {
			continue // keep the O(n²) split loop fast
		}
		in = append(in, tc.in...)
		f := tc.want
		f.End = len(in)
		want.Frames = append(want.Frames, f)
	}
	in = append(in, "*2\r\n$3\r\nfoo"...)
	want.InFrame = true
	if got := refParse(in); !got.equal(want) {
		t.Fatalf("reference:\n got %v\nwant %v", got, want)
	}
	checkAllChunkings(t, in, want, rand.New(rand.NewPCG(3, 4)), 2000)
}

func TestReplyFramerMalformed(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		err   error
		errAt int
		ok    int // complete frames before the failure
	}{
		{"unknown-type", "x\r\n", ErrBadReply, 1, 0},
		{"streamed-error", "!?\r\n", ErrBadReply, 2, 0},
		{"streamed-push", ">?\r\n", ErrBadReply, 2, 0},
		{"streamed-len-digit", "$?1\r\n", ErrBadReply, 3, 0},
		{"streamed-bulk-no-chunk", "$?\r\n$1\r\n", ErrBadReply, 5, 0},
		{"chunk-neg", "$?\r\n;-1\r\n", ErrBadReply, 9, 0},
		{"end-marker-top", ".\r\n", ErrBadReply, 1, 0},
		{"end-marker-in-array", "*1\r\n.\r\n", ErrBadReply, 5, 0},
		{"end-marker-text", "*?\r\n.x\r\n", ErrBadReply, 5, 0},
		{"chunk-outside", ";1\r\na\r\n", ErrBadReply, 1, 0},
		{"end-marker-after-attr", "%?\r\n|1\r\n#\r\n#\r\n.", ErrBadReply, 15, 0},
		{"bulk-len-abc", "$abc\r\n", ErrBadReply, 2, 0},
		{"bulk-len-empty", "$\r\n", ErrBadReply, 3, 0},
		{"bulk-len-minus", "$-\r\n", ErrBadReply, 4, 0},
		{"bulk-len-space", "$1 \r\n", ErrBadReply, 3, 0},
		{"bulk-len-cr-x", "$3\rX", ErrBadReply, 3, 0},
		{"bulk-trailer", "$3\r\nabcXY", ErrBadReply, 7, 0},
		{"bulk-trailer-lf", "$3\r\nabc\rX", ErrBadReply, 8, 0},
		{"int-cr-x", ":1\rX", ErrBadReply, 3, 0},
		{"bulk-neg2", "$-2\r\n", ErrBadReply, 5, 0},
		{"bulk-neg0", "$-0\r\n", ErrBadReply, 5, 0},
		{"bulk-double-minus", "$--1\r\n", ErrBadReply, 3, 0},
		{"array-neg2", "*-2\r\n", ErrBadReply, 5, 0},
		{"map-neg5", "%-5\r\n", ErrBadReply, 5, 0},
		{"attr-null", "|-1\r\n+OK\r\n", ErrBadReply, 5, 0},
		{"push-neg3", ">-3\r\n", ErrBadReply, 5, 0},
		{"len-trailing-minus", "*1-\r\n", ErrBadReply, 3, 0},
		{"bulk-len-overflow", "$9999999999999999999\r\n", ErrBadReply, 20, 0},
		{"array-len-overflow", "*99999999999999999999\r\n", ErrBadReply, 20, 0},
		{"map-len-overflow", "%4611686018427387904\r\n", ErrBadReply, 22, 0},
		{"attr-len-overflow", "|4611686018427387904\r\n", ErrBadReply, 22, 0},
		{"inside-array", "*2\r\n:1\r\nX", ErrBadReply, 9, 0},
		{"inside-attr", "|1\r\n+a\r\n?", ErrBadReply, 9, 0},
		{"after-frame", "+OK\r\n+OK\r\n@", ErrBadReply, 11, 2},
		{"line-cr-cr", "+OK\r\r\n", ErrBadReply, 4, 0},
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			want := refParse(in)
			if want.Err != tc.err || want.ErrAt != tc.errAt || len(want.Frames) != tc.ok {
				t.Fatalf("reference parser: %v; the case says err=%v at %d after %d frames",
					want, tc.err, tc.errAt, tc.ok)
			}
			checkAllChunkings(t, in, want, rng, 100)
		})
	}
}

func TestReplyFramerDepth(t *testing.T) {
	deep := func(levels int, open string) []byte {
		return append(bytes.Repeat([]byte(open), levels), ":1\r\n"...)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		err  error
	}{
		{"array-at-limit", deep(MaxReplyDepth, "*1\r\n"), nil},
		{"array-over-limit", deep(MaxReplyDepth+1, "*1\r\n"), ErrTooDeep},
		{"push-over-limit", deep(MaxReplyDepth+1, ">1\r\n"), ErrTooDeep},
		{"attr-over-limit", deep(MaxReplyDepth+1, "|1\r\n+k\r\n"), ErrTooDeep},
		{"map-at-limit", append(bytes.Repeat([]byte("%1\r\n+k\r\n"), MaxReplyDepth), ":1\r\n"...), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := refParse(tc.in)
			if want.Err != tc.err {
				t.Fatalf("reference parser: %v, want err %v", want, tc.err)
			}
			if tc.err == nil && len(want.Frames) != 1 {
				t.Fatalf("reference parser: %v", want)
			}
			for _, cuts := range [][]int{nil, {len(tc.in) / 2}, {1, 2, 3, len(tc.in) - 1}} {
				if got := feedCuts(t, tc.in, cuts); !got.equal(want) {
					t.Fatalf("cuts %v:\n got %v\nwant %v", cuts, got, want)
				}
			}
		})
	}
}

func TestReplyFramerInFrameAndReset(t *testing.T) {
	r := NewReplyFramer()
	if r.InFrame() {
		t.Fatal("InFrame on a fresh framer")
	}
	if n, done, err := r.Feed(nil); n != 0 || done || err != nil {
		t.Fatalf("Feed(nil) = %d, %v, %v", n, done, err)
	}
	if r.InFrame() {
		t.Fatal("InFrame after Feed(nil)")
	}
	for _, part := range []string{"*", "2", "\r", "\n", "|1\r\n+a\r\n+b\r\n"} {
		n, done, err := r.Feed([]byte(part))
		if n != len(part) || done || err != nil {
			t.Fatalf("Feed(%q) = %d, %v, %v", part, n, done, err)
		}
		if !r.InFrame() {
			t.Fatalf("not InFrame after %q", part)
		}
	}
	r.Reset()
	if r.InFrame() {
		t.Fatal("InFrame after Reset")
	}
	in := "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
	n, done, err := r.Feed([]byte(in + "+OK\r\n"))
	if n != len(in) || !done || err != nil {
		t.Fatalf("Feed after Reset = %d, %v, %v", n, done, err)
	}
	f := r.Frame()
	if f.Type != '*' || string(f.Head) != "subscribe" || f.Int != 1 || f.Len != 3 || f.IsError() {
		t.Fatalf("frame after Reset = %+v", *f)
	}
	// A top-level attribute alone leaves the framer inside the reply.
	r.Reset()
	attr := "|1\r\n+a\r\n+b\r\n"
	if n, done, err := r.Feed([]byte(attr)); n != len(attr) || done || err != nil || !r.InFrame() {
		t.Fatalf("attribute alone: %d, %v, %v, InFrame=%v", n, done, err, r.InFrame())
	}
}

func TestFrameIsError(t *testing.T) {
	for typ, want := range map[byte]bool{'-': true, '!': true, '+': false, '$': false, '*': false, '>': false, '_': false} {
		if got := (&Frame{Type: typ}).IsError(); got != want {
			t.Errorf("Frame{Type: %q}.IsError() = %v, want %v", typ, got, want)
		}
	}
}

func TestReplyFeedAllocs(t *testing.T) {
	in := []byte("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n" + nested6 +
		"|1\r\n+a\r\n+b\r\n%1\r\n+k\r\n$1\r\nv\r\n")
	r := NewReplyFramer()
	feedAll := func() {
		for p := in; len(p) > 0; {
			n, _, err := r.Feed(p)
			if err != nil {
				panic(err)
			}
			p = p[n:]
		}
	}
	feedAll() // grow the stack once
	if a := testing.AllocsPerRun(1000, feedAll); a != 0 {
		t.Fatalf("Feed allocates %v times per run", a)
	}
}
