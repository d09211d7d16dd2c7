package resp

import (
	"bytes"

	"github.com/tidwall/redcon"
)

// Limits on requests, as in redis-server 7.0 (server.h).
const (
	// InlineMax is PROTO_INLINE_MAX_SIZE: the longest inline command, and the
	// longest multibulk or bulk length header, in bytes.
	InlineMax = 64 * 1024
	// DefaultMaxBulkLen is the default proto-max-bulk-len (512 MiB).
	DefaultMaxBulkLen = 512 * 1024 * 1024
	// maxMultibulk is INT_MAX, the largest multibulk count Redis accepts.
	maxMultibulk = 1<<31 - 1
)

// Kind is what a complete request frame turned out to be.
type Kind uint8

// Request kinds.
const (
	// KindMultibulk is a RESP array of bulk strings, what every client
	// library sends.
	KindMultibulk Kind = iota + 1
	// KindInline is a line of space-separated words (telnet style).
	KindInline
	// KindEmpty is a request Redis consumes without a reply and without
	// running anything: "*0\r\n", "*-1\r\n", an empty or blank inline line
	// (the bare CRLF that redis-cli --pipe sends).
	KindEmpty
)

// ProtocolError is a malformed request. Its text is exactly what
// redis-server 7.0 puts after "-ERR " (networking.c, setProtocolError and
// its callers), so that a client sees the same reply through the proxy as
// directly. After a ProtocolError the connection must be closed once the
// replies before it have been delivered, as Redis does.
type ProtocolError string

// Error returns "Protocol error: <reason>".
func (e ProtocolError) Error() string { return "Protocol error: " + string(e) }

// Reply returns the error reply Redis sends: "-ERR Protocol error: ...\r\n".
func (e ProtocolError) Reply() []byte {
	return []byte("-ERR " + e.Error() + "\r\n")
}

// The protocol errors of redis-server 7.0.
const (
	ErrInvalidMultibulkLen ProtocolError = "invalid multibulk length"
	ErrInvalidBulkLen      ProtocolError = "invalid bulk length"
	ErrTooBigInline        ProtocolError = "too big inline request"
	ErrTooBigMbulkCount    ProtocolError = "too big mbulk count string"
	ErrTooBigBulkCount     ProtocolError = "too big bulk count string"
	// ErrInvalidCRLF is Valkey's error for a header line whose CR is not
	// followed by LF, or a bulk payload not followed by CR LF, under
	// Dialect.StrictCRLF.
	ErrInvalidCRLF ProtocolError = "invalid CRLF in request"
)

// Dialect holds the request-parsing rules in which engines differ, each as
// the engine itself answers it (respmeter probes the engine for them: see
// proxy's Start). The zero value is redis-server's rules (7.0 to 8.0, and
// Valkey 8.1.1).
type Dialect struct {
	// QuoteJoins: in an inline request a closing quote ends only the quoted
	// section, and the argument goes on up to the next blank (Valkey 9.1:
	// `"a"b` is the argument ab, `"x"'y'` is xy, `x"a"b` is xab).
	// Otherwise (sdssplitargs) a closing quote must be followed by white
	// space or the end of the line, or the request is refused as
	// "unbalanced quotes in request".
	QuoteJoins bool
	// StrictCRLF: the byte after the CR that ends a multibulk or bulk
	// length header must be LF, and the two bytes after a bulk payload CR
	// LF; anything else is ErrInvalidCRLF and the connection is closed
	// (Valkey 9.1.2). Otherwise, as in redis-server, those bytes are
	// skipped unchecked.
	StrictCRLF bool
}

// RequestScanner finds the end of the next request in a client's byte
// stream and validates it as redis-server 7.0 does (processInlineBuffer and
// processMultibulkBuffer), so malformed input gets Redis's own error text.
//
// Scan is resumable: when a frame is incomplete the scanner remembers how far
// it got, and the next call (with the same frame start and more bytes)
// continues from there, so a large request costs O(bytes) in total however
// many reads it takes. The caller must pass the frame from its first byte on
// every call until Scan returns a frame or an error.
type RequestScanner struct {
	// MaxBulkLen is proto-max-bulk-len; 0 means DefaultMaxBulkLen.
	MaxBulkLen int64
	// Dialect is the engine's parsing rules where engines differ; the
	// zero value is redis-server's.
	Dialect Dialect

	pos     int   // bytes of the current frame already validated
	nargs   int64 // multibulk count; 0 while the header is unread
	argi    int64 // bulk arguments complete
	bulklen int64 // length of the current bulk; -1 while its header is unread
	// spans holds [start, end) of each bulk payload of the current (or
	// last complete) multibulk frame, relative to its first byte: the
	// scan already reads every bulk header, so ArgsOf splits the frame
	// without a second parse. Kept across frames for its capacity.
	spans []int
}

// maxKeptSpans bounds the span buffer a scanner keeps after a frame with
// very many arguments (pairs of ints: 64 KiB).
const maxKeptSpans = 8 << 10

// Reset forgets a partially scanned frame.
func (s *RequestScanner) Reset() {
	spans := s.spans[:0]
	if cap(spans) > maxKeptSpans {
		spans = nil
	}
	*s = RequestScanner{MaxBulkLen: s.MaxBulkLen, Dialect: s.Dialect, spans: spans}
}

// ArgsOf splits frame, the multibulk frame Scan returned last (n bytes,
// KindMultibulk), into its arguments, reusing argsbuf; they alias frame.
// It is Args without parsing the frame again. Any other kind goes to Args.
func (s *RequestScanner) ArgsOf(frame []byte, kind Kind, argsbuf [][]byte) [][]byte {
	if kind != KindMultibulk || len(s.spans) == 0 || s.spans[len(s.spans)-1] > len(frame) {
		return Args(frame, kind, argsbuf)
	}
	args := argsbuf[:0]
	for i := 0; i+1 < len(s.spans); i += 2 {
		args = append(args, frame[s.spans[i]:s.spans[i+1]:s.spans[i+1]])
	}
	return args
}

// Pending reports how many bytes of an unfinished frame have been validated.
func (s *RequestScanner) Pending() int { return s.pos }

// Scan looks for one complete request at the start of buf. It returns n > 0
// and the frame's kind when buf[:n] is a complete request; n == 0 and a nil
// error when more bytes are needed; or a ProtocolError for input Redis would
// reject (the frame and everything after it must then be dropped).
func (s *RequestScanner) Scan(buf []byte) (n int, kind Kind, err error) {
	if len(buf) == 0 {
		return 0, 0, nil
	}
	if buf[0] != '*' {
		return s.scanInline(buf)
	}
	if s.nargs == 0 {
		r, seen := strchr(buf[s.pos:], '\r')
		if r < 0 {
			if len(buf) > InlineMax {
				return 0, 0, ErrTooBigMbulkCount
			}
			s.pos += seen
			return 0, 0, nil
		}
		r += s.pos
		if r+1 >= len(buf) { // Redis waits for the byte after CR
			s.pos = r
			return 0, 0, nil
		}
		if s.Dialect.StrictCRLF && buf[r+1] != '\n' {
			return 0, 0, ErrInvalidCRLF
		}
		ll, ok := parseInt(buf[1:r])
		if !ok || ll > maxMultibulk {
			return 0, 0, ErrInvalidMultibulkLen
		}
		if ll <= 0 {
			n = r + 2
			s.Reset()
			return n, KindEmpty, nil
		}
		s.nargs, s.pos, s.bulklen = ll, r+2, -1
		s.spans = s.spans[:0]
	}
	maxBulk := s.MaxBulkLen
	if maxBulk <= 0 {
		maxBulk = DefaultMaxBulkLen
	}
	for s.argi < s.nargs {
		if s.bulklen < 0 {
			if s.pos >= len(buf) {
				return 0, 0, nil
			}
			r, _ := strchr(buf[s.pos:], '\r')
			if r < 0 {
				if len(buf)-s.pos > InlineMax {
					return 0, 0, ErrTooBigBulkCount
				}
				return 0, 0, nil
			}
			r += s.pos
			if r+1 >= len(buf) {
				return 0, 0, nil
			}
			if buf[s.pos] != '$' {
				c := buf[s.pos]
				if c == '\r' || c == '\n' { // addReplyErrorFormat blanks newlines
					c = ' '
				}
				// The raw byte, as Redis's %c writes it (string(c) would
				// UTF-8 encode bytes >= 0x80).
				return 0, 0, ProtocolError("expected '$', got '" + string([]byte{c}) + "'")
			}
			if s.Dialect.StrictCRLF && buf[r+1] != '\n' {
				return 0, 0, ErrInvalidCRLF
			}
			ll, ok := parseInt(buf[s.pos+1 : r])
			if !ok || ll < 0 || ll > maxBulk {
				return 0, 0, ErrInvalidBulkLen
			}
			s.bulklen, s.pos = ll, r+2
		}
		// Redis skips the two bytes after the payload without checking them.
		// (Compared so that a MaxBulkLen near MaxInt64 cannot overflow.)
		if s.bulklen > int64(len(buf)-s.pos)-2 {
			return 0, 0, nil
		}
		if end := s.pos + int(s.bulklen); s.Dialect.StrictCRLF && (buf[end] != '\r' || buf[end+1] != '\n') {
			return 0, 0, ErrInvalidCRLF
		}
		s.spans = append(s.spans, s.pos, s.pos+int(s.bulklen))
		s.pos += int(s.bulklen) + 2
		s.argi++
		s.bulklen = -1
	}
	n = s.pos
	// A reset that keeps the spans for ArgsOf (the next frame's header
	// clears them).
	*s = RequestScanner{MaxBulkLen: s.MaxBulkLen, Dialect: s.Dialect, spans: s.spans}
	return n, KindMultibulk, nil
}

func (s *RequestScanner) scanInline(buf []byte) (int, Kind, error) {
	j, seen := strchr(buf[s.pos:], '\n')
	if j < 0 {
		if len(buf) > InlineMax {
			return 0, 0, ErrTooBigInline
		}
		s.pos += seen
		return 0, 0, nil
	}
	n := s.pos + j + 1
	s.Reset()
	line := buf[:n-1]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	if !splitArgsOK(line, s.Dialect.QuoteJoins) {
		return 0, 0, errUnbalancedQuotes
	}
	for _, c := range buf[:n] {
		if !isSpace(c) {
			return n, KindInline, nil
		}
	}
	return n, KindEmpty, nil
}

// errUnbalancedQuotes is the reply to an inline request that sdssplitargs
// rejects (Redis logs it as "unbalanced quotes in inline request").
const errUnbalancedQuotes ProtocolError = "unbalanced quotes in request"

// strchr searches b for c the way Redis does, with strchr on its
// NUL-terminated query buffer: a NUL byte ends the search, so a request with
// a NUL before its CR (headers) or LF (inline) never completes and can only
// end in a "too big" error. It returns the index of c or -1, and how many
// leading bytes of b hold neither c nor NUL (where a later search resumes).
func strchr(b []byte, c byte) (i, seen int) {
	// Headers ("*2", "$3", "$13") end within a few bytes: a byte loop over
	// the first shortScan bytes finds c or NUL without the two IndexByte
	// calls below, which cost more than the loop on so short a search.
	n := min(len(b), shortScan)
	for j := 0; j < n; j++ {
		switch b[j] {
		case c:
			return j, j
		case 0:
			return -1, j
		}
	}
	if n == len(b) {
		return -1, n
	}
	i, seen = strchrLong(b[n:], c)
	if i >= 0 {
		i += n
	}
	return i, seen + n
}

// shortScan is how many bytes strchr looks at one by one before it calls
// bytes.IndexByte.
const shortScan = 16

// strchrLong is strchr with bytes.IndexByte, for what follows the bytes
// strchr looked at one by one.
func strchrLong(b []byte, c byte) (i, seen int) {
	if len(b) > 0 && b[0] == 0 {
		return -1, 0
	}
	i = bytes.IndexByte(b, c)
	if i < 0 {
		if z := bytes.IndexByte(b, 0); z >= 0 {
			return -1, z
		}
		return -1, len(b)
	}
	if z := bytes.IndexByte(b[:i], 0); z >= 0 {
		return -1, z
	}
	return i, i
}

// splitArgsOK reports whether redis-server's sdssplitargs accepts an inline
// line (without its line ending): quotes must be closed, and a closing quote
// must be followed by white space or the end of the line, unless joins
// (Dialect.QuoteJoins), where it only ends the quoted section. The line
// holds no NUL (see strchr), so the end of the slice stands for C's
// terminator.
func splitArgsOK(line []byte, joins bool) bool {
	at := func(k int) byte {
		if k < len(line) {
			return line[k]
		}
		return 0
	}
	i := 0
	for {
		for i < len(line) && isSpace(line[i]) {
			i++
		}
		if i >= len(line) {
			return true
		}
		inq, insq := false, false
		for done := false; !done; {
			c := at(i)
			switch {
			case inq:
				switch {
				case c == '\\' && at(i+1) == 'x' && isHex(at(i+2)) && isHex(at(i+3)):
					i += 3
				case c == '\\' && at(i+1) != 0:
					i++
				case c == '"' && joins:
					inq = false
				case c == '"':
					if n := at(i + 1); n != 0 && !isSpace(n) {
						return false
					}
					done = true
				case c == 0:
					return false
				}
			case insq:
				switch {
				case c == '\\' && at(i+1) == '\'':
					i++
				case c == '\'' && joins:
					insq = false
				case c == '\'':
					if n := at(i + 1); n != 0 && !isSpace(n) {
						return false
					}
					done = true
				case c == 0:
					return false
				}
			default:
				switch c {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				}
			}
			if i < len(line) {
				i++
			}
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'
}

// parseInt is Redis's string2ll: an optional '-', then digits with no
// leading zero (except "0" itself), no '+', no spaces, within int64.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := false
	if b[0] == '-' {
		neg = true
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	if b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<63)/10 || v*10 > (1<<63)-d {
			return 0, false
		}
		v = v*10 + d
	}
	if neg {
		return -int64(v), true // v may be 1<<63: -int64 overflows to MinInt64, correct
	}
	if v > 1<<63-1 {
		return 0, false
	}
	return int64(v), true
}

// Args splits a complete request frame (as returned by Scan) into its
// arguments, reusing argsbuf. The arguments alias frame. For multibulk
// frames this is redcon.ReadNextCommand; inline frames are split on white
// space (the proxy only needs the command and subcommand words, and forwards
// the raw line for the engine to parse, quotes included).
func Args(frame []byte, kind Kind, argsbuf [][]byte) [][]byte {
	switch kind {
	case KindMultibulk:
		complete, args, _, _, err := redcon.ReadNextCommand(frame, argsbuf)
		if complete && err == nil {
			return args
		}
		// redcon insists on CRLF after every payload where Redis does not
		// check; fall back to the scanner's view of the first argument.
		return firstBulk(frame, argsbuf[:0])
	case KindInline:
		return inlineArgs(frame, argsbuf[:0])
	}
	return argsbuf[:0]
}

// inlineArgs splits an inline request into words where Redis's
// sdssplitargs puts the boundaries: white space separates words, except
// inside double quotes (where a backslash escapes the next byte) or single
// quotes (where \' is a quote). A word that is one quoted section, such as
// "QUIT" or 'a b', is returned without its quotes; any other word is
// returned as it stands. Escapes are not decoded: the proxy only classifies
// the request, and the engine parses the raw line.
func inlineArgs(frame []byte, args [][]byte) [][]byte {
	i := 0
	for i < len(frame) {
		for i < len(frame) && isSpace(frame[i]) {
			i++
		}
		if i >= len(frame) {
			break
		}
		st, closed := i, -1 // closed: where the first quoted section ended
		var inq byte
		for i < len(frame) {
			c := frame[i]
			if inq != 0 {
				if c == '\\' && i+1 < len(frame) && (inq == '"' || frame[i+1] == '\'') {
					i += 2
					continue
				}
				if c == inq {
					inq = 0
					if closed < 0 {
						closed = i
					}
				}
				i++
				continue
			}
			if isSpace(c) {
				break
			}
			if c == '"' || c == '\'' {
				inq = c
			}
			i++
		}
		end := min(i, len(frame))
		word := frame[st:end]
		if q := word[0]; (q == '"' || q == '\'') && closed == end-1 {
			word = word[1 : len(word)-1]
		}
		args = append(args, word)
	}
	return args
}

func firstBulk(frame []byte, args [][]byte) [][]byte {
	// As in Scan (and Redis), a header ends at its CR and the byte after
	// the CR is skipped unchecked.
	r := bytes.IndexByte(frame, '\r')
	if r < 0 || r+2 >= len(frame) || frame[r+2] != '$' {
		return args
	}
	rest := frame[r+3:]
	e := bytes.IndexByte(rest, '\r')
	if e < 0 {
		return args
	}
	n, ok := parseInt(rest[:e])
	if !ok || n < 0 || int64(len(rest)-e-2) < n {
		return args
	}
	return append(args, rest[e+2:e+2+int(n)])
}
