// Package resp frames the Redis serialization protocol in both directions:
// requests from clients (RESP2 multibulk arrays and inline commands, with the
// same validation and error texts as redis-server 7.0's networking.c) and
// replies from engines (every RESP2 and RESP3 type, attributes and pushes).
//
// Both framers are incremental and resumable: a frame may arrive split at any
// byte boundary over any number of reads, and the total cost is O(bytes)
// however it is split. Neither retains the caller's buffers.
//
// Concurrency: a framer belongs to one connection and is used by one
// goroutine at a time.
package resp

import (
	"bytes"
	"errors"
	"math"
)

// ErrBadReply is returned by ReplyFramer.Feed for bytes that are not RESP2 or
// RESP3 (an unknown type byte, a malformed length, a bulk string not followed
// by CRLF). An engine never sends them; the connection cannot be resynced and
// must be closed. A failed framer stays failed.
var ErrBadReply = errors.New("resp: malformed reply from upstream")

// ErrTooDeep is returned for replies nested deeper than MaxReplyDepth.
var ErrTooDeep = errors.New("resp: reply nested too deeply")

// MaxReplyDepth bounds aggregate nesting in replies (Redis's own Lua-to-RESP
// conversion stops far below this).
const MaxReplyDepth = 1 << 14

// HeadLen is how many leading bytes of a frame's first string are kept in
// Frame.Head: enough for "punsubscribe", "sunsubscribe", "FULLRESYNC" and a
// MONITOR timestamp prefix.
const HeadLen = 16

// Frame describes the last complete top-level reply a ReplyFramer saw.
type Frame struct {
	// Type is the RESP type byte of the top-level value: '+', '-', ':',
	// '$', '*', '%', '~', '>', '_', ',', '#', '(', '=', '!'. Attributes ('|')
	// that precede the value are part of the frame but never its Type.
	Type byte
	// Head holds up to HeadLen leading bytes of: the line itself for '+' and
	// '-'; the first element, when it is a string, for '*' and '>'.
	Head []byte
	// Int is the value of the last ':' integer directly inside a top-level
	// '*' or '>' (the subscription count of a pub/sub confirmation).
	Int int64
	// Len is the element count of a top-level aggregate (-1 for a null; 0
	// for a streamed one, whose count is not announced).
	Len int64
}

// IsError reports whether the frame is an error reply ('-' or '!').
func (f *Frame) IsError() bool { return IsErrorType(f.Type) }

// Reply framer states.
const (
	stType   uint8 = iota // expecting a type byte
	stLine                // inside a line, looking for CR
	stLineLF              // saw CR of a line, expecting LF
	stLen                 // inside a length/count header
	stLenLF               // saw CR of a length header
	stBulk                // inside bulk payload
	stBulkCR              // expecting CR after a bulk payload
	stBulkLF              // expecting LF after a bulk payload
	stFailed
)

type level struct {
	remain   int64 // elements still expected at this level
	attr     bool  // this level is an attribute map: it does not count as an element of its parent
	streamed bool  // a '*?', '%?' or '~?' aggregate: elements until its '.' end marker
}

// ReplyFramer finds the boundaries of RESP2/RESP3 replies in a byte stream
// without buffering it: bytes handed to Feed are consumed at once, so a
// proxy can forward them immediately (cut-through) while the framer keeps
// only a small state (current type, a length accumulator and a stack of
// remaining element counts, one entry per open aggregate).
//
// Source: the RESP3 specification (github.com/redis/redis-specification,
// protocol/RESP3.md), "Simple types", "Aggregate data types", "Attribute
// type", "Push type" and "Streamed strings" / "Streamed aggregates": a
// '$?' string is a sequence of ';<len>' chunks ended by ';0', and a '*?',
// '%?' or '~?' aggregate holds elements up to a '.' end marker. No engine
// sends the streamed forms today; the specification allows them, so they
// are relayed like any other reply.
type ReplyFramer struct {
	state uint8
	typ   byte // type byte of the item being parsed
	neg   bool
	ndig  int
	num   int64 // length/integer accumulator
	bulk  int64 // bulk bytes still to skip
	stack []level
	qlen  bool // the length header being parsed is '?' (a streamed string or aggregate)
	// chunks: inside a streamed string ('$?'), whose next item is a ';'
	// chunk header.
	chunks bool
	// annot: an attribute inside a streamed aggregate just ended, so a
	// value follows, not the aggregate's end marker.
	annot bool

	// Top-level frame info, filled while parsing.
	frame   Frame
	head    [HeadLen]byte
	headN   uint8
	capture bool // copying the current item's bytes into head
	started bool // inside a frame (at least one byte consumed)
	elemIdx int64
}

// NewReplyFramer returns a framer ready for the first reply.
func NewReplyFramer() *ReplyFramer {
	return &ReplyFramer{stack: make([]level, 0, 8)}
}

// InFrame reports whether some bytes of an unfinished reply have been
// consumed (a connection lost now has cut a reply in two).
func (r *ReplyFramer) InFrame() bool { return r.started }

// Frame returns the description of the frame completed by the last Feed
// call that returned done. Head aliases the framer's memory: valid until the
// next Feed.
func (r *ReplyFramer) Frame() *Frame { return &r.frame }

// Reset discards any partial state (used when a connection is reused).
func (r *ReplyFramer) Reset() {
	r.state = stType
	r.stack = r.stack[:0]
	r.started = false
	r.qlen, r.chunks, r.annot = false, false, false
}

// Feed consumes bytes of p up to the end of the current reply. It returns the
// number of bytes consumed and done == true when a complete top-level reply
// ended at p[n-1]; then Frame describes it and the next call starts a new
// reply. With done == false all of p was consumed and the reply continues in
// later bytes. err is ErrBadReply or ErrTooDeep; after an error the framer
// keeps failing.
func (r *ReplyFramer) Feed(p []byte) (n int, done bool, err error) {
	if r.state == stFailed {
		return 0, false, ErrBadReply
	}
	i := 0
	for i < len(p) {
		if !r.started {
			r.started = true
			r.frame = Frame{}
			r.elemIdx = 0
			r.headN = 0
		}
		switch r.state {
		case stType:
			r.typ = p[i]
			i++
			if err := r.begin(); err != nil {
				return i, false, err
			}
		case stLine:
			j := bytes.IndexByte(p[i:], '\r')
			end := len(p)
			if j >= 0 {
				end = i + j
			}
			seg := p[i:end]
			if r.typ == '.' && len(seg) > 0 {
				return i, false, r.fail(ErrBadReply) // the end marker is ".\r\n"
			}
			if r.capture {
				r.captureBytes(seg)
			}
			if r.typ == ':' && r.countsInt() {
				r.accumulate(seg)
			}
			i = end
			if j >= 0 {
				i++
				r.state = stLineLF
			}
		case stLineLF:
			if p[i] != '\n' {
				return i, false, r.fail(ErrBadReply)
			}
			i++
			if r.typ == ':' && r.countsInt() {
				v := r.num
				if r.neg {
					v = -v
				}
				r.frame.Int = v
			}
			if r.typ == '.' {
				// The end of a streamed aggregate, which is now one
				// complete element of its parent.
				r.stack = r.stack[:len(r.stack)-1]
			}
			if r.itemDone() {
				return i, true, nil
			}
		case stLen:
			c := p[i]
			i++
			switch {
			case c >= '0' && c <= '9' && !r.qlen:
				// A length beyond int64 is malformed (it used to wrap
				// negative and pass for a null).
				if r.num > (math.MaxInt64-int64(c-'0'))/10 {
					return i, false, r.fail(ErrBadReply)
				}
				r.num = r.num*10 + int64(c-'0')
				r.ndig++
			case c == '-' && r.ndig == 0 && !r.neg && !r.qlen:
				r.neg = true
			case c == '?' && r.ndig == 0 && !r.neg && !r.qlen &&
				(r.typ == '$' || r.typ == '*' || r.typ == '%' || r.typ == '~'):
				r.qlen = true
			case c == '\r':
				r.state = stLenLF
			default:
				return i, false, r.fail(ErrBadReply)
			}
		case stLenLF:
			if p[i] != '\n' {
				return i, false, r.fail(ErrBadReply)
			}
			i++
			if r.ndig == 0 && !r.qlen {
				return i, false, r.fail(ErrBadReply)
			}
			fin, err := r.header()
			if err != nil {
				return i, false, err
			}
			if fin {
				return i, true, nil
			}
		case stBulk:
			take := int64(len(p) - i)
			if take > r.bulk {
				take = r.bulk
			}
			if r.capture {
				r.captureBytes(p[i : i+int(take)])
			}
			i += int(take)
			r.bulk -= take
			if r.bulk == 0 {
				r.state = stBulkCR
			}
		case stBulkCR:
			if p[i] != '\r' {
				return i, false, r.fail(ErrBadReply)
			}
			i++
			r.state = stBulkLF
		case stBulkLF:
			if p[i] != '\n' {
				return i, false, r.fail(ErrBadReply)
			}
			i++
			if r.chunks {
				r.state = stType // the next chunk header
				continue
			}
			if r.itemDone() {
				return i, true, nil
			}
		}
	}
	return i, false, nil
}

func (r *ReplyFramer) fail(err error) error {
	r.state = stFailed
	return err
}

// begin handles a type byte.
func (r *ReplyFramer) begin() error {
	if r.chunks {
		// Inside a streamed string only chunk headers come.
		if r.typ != ';' {
			return r.fail(ErrBadReply)
		}
		r.state = stLen
		r.num, r.neg, r.ndig = 0, false, 0
		return nil
	}
	if r.typ == '.' {
		// The end marker of a streamed aggregate, nowhere else.
		if n := len(r.stack); n == 0 || !r.stack[n-1].streamed || r.annot {
			return r.fail(ErrBadReply)
		}
		r.state = stLine
		r.capture = false
		return nil
	}
	r.annot = false
	top := len(r.stack) == 0
	// The first non-attribute value at depth 0 names the frame; attributes
	// before it are skipped over.
	if top && r.typ != '|' {
		r.frame.Type = r.typ
	}
	// Capture the line of a top-level simple string/error, or the first
	// element of a top-level array/push.
	r.capture = false
	if top && (r.typ == '+' || r.typ == '-') {
		r.capture = true
	} else if len(r.stack) == 1 && !r.stack[0].attr && r.elemIdx == 0 &&
		(r.frame.Type == '*' || r.frame.Type == '>') && (r.typ == '$' || r.typ == '+') {
		r.capture = true
	}
	switch r.typ {
	case '+', '-', ':', ',', '(', '#', '_':
		r.state = stLine
		r.num, r.neg, r.ndig = 0, false, 0
	case '$', '!', '=', '*', '%', '~', '>', '|':
		r.state = stLen
		r.num, r.neg, r.ndig = 0, false, 0
	default:
		return r.fail(ErrBadReply)
	}
	return nil
}

// header handles a complete length header; it reports whether this
// completed the top-level frame.
func (r *ReplyFramer) header() (bool, error) {
	if r.qlen {
		r.qlen = false
		if r.typ == '$' {
			r.chunks = true
			r.state = stType
			return false, nil
		}
		if len(r.stack) >= MaxReplyDepth {
			return false, r.fail(ErrTooDeep)
		}
		r.stack = append(r.stack, level{streamed: true})
		r.state = stType
		r.capture = false
		return false, nil
	}
	if r.chunks { // a ';' chunk header
		switch {
		case r.neg:
			return false, r.fail(ErrBadReply)
		case r.num == 0: // ";0": the streamed string ends
			r.chunks = false
			return r.itemDone(), nil
		}
		r.bulk = r.num
		r.state = stBulk
		return false, nil
	}
	n := r.num
	if r.neg {
		if n != 1 {
			return false, r.fail(ErrBadReply)
		}
		n = -1
	}
	if len(r.stack) == 0 && r.typ != '|' {
		r.frame.Len = n
	}
	switch r.typ {
	case '$', '!', '=':
		if n < 0 {
			return r.itemDone(), nil
		}
		r.bulk = n
		r.state = stBulk
		if n == 0 {
			r.state = stBulkCR
		}
		return false, nil
	}
	// Aggregates.
	if r.typ == '|' && n <= 0 {
		// An empty attribute annotates the next value and, like any
		// attribute, is not an element of its parent. There is no null
		// attribute.
		if n < 0 {
			return false, r.fail(ErrBadReply)
		}
		r.state = stType
		r.capture = false
		return false, nil
	}
	if r.typ == '%' || r.typ == '|' {
		if n > math.MaxInt64/2 {
			return false, r.fail(ErrBadReply)
		}
		n *= 2
	}
	if n <= 0 {
		r.capture = false
		return r.itemDone(), nil
	}
	if len(r.stack) >= MaxReplyDepth {
		return false, r.fail(ErrTooDeep)
	}
	r.stack = append(r.stack, level{remain: n, attr: r.typ == '|'})
	r.state = stType
	r.capture = false
	return false, nil
}

// itemDone closes the current item and any aggregates it completes. It
// reports whether the top-level frame is complete.
func (r *ReplyFramer) itemDone() bool {
	r.state = stType
	r.capture = false
	wasAttr := false
	for {
		if len(r.stack) == 0 {
			if wasAttr || r.frame.Type == 0 {
				// A top-level attribute: the reply it annotates follows.
				return false
			}
			r.frame.Head = r.head[:r.headN]
			r.started = false
			return true
		}
		top := &r.stack[len(r.stack)-1]
		if top.streamed {
			// Open until its '.' end marker.
			if !wasAttr && len(r.stack) == 1 {
				r.elemIdx++
			}
			r.annot = wasAttr
			return false
		}
		if !wasAttr {
			top.remain--
			if len(r.stack) == 1 && !top.attr {
				r.elemIdx++
			}
		}
		if top.remain > 0 {
			return false
		}
		wasAttr = top.attr
		r.stack = r.stack[:len(r.stack)-1]
	}
}

// countsInt reports whether the ':' being parsed sits directly inside a
// top-level '*' or '>' (see Frame.Int).
func (r *ReplyFramer) countsInt() bool {
	return len(r.stack) == 1 && !r.stack[0].attr &&
		(r.frame.Type == '*' || r.frame.Type == '>')
}

func (r *ReplyFramer) captureBytes(b []byte) {
	room := HeadLen - int(r.headN)
	if room <= 0 {
		return
	}
	if len(b) > room {
		b = b[:room]
	}
	copy(r.head[r.headN:], b)
	r.headN += uint8(len(b))
}

func (r *ReplyFramer) accumulate(seg []byte) {
	for _, c := range seg {
		switch {
		case c >= '0' && c <= '9':
			if r.ndig < 19 {
				r.num = r.num*10 + int64(c-'0')
				r.ndig++
			}
		case c == '-' && r.ndig == 0:
			r.neg = true
		}
	}
}
