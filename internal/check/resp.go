package check

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/respmeter/respmeter/internal/respconn"
)

// RESP2 limits of the reply reader. The checker never expects a bulk larger
// than maxValue plus its own framing, nor an array longer than a few dozen
// elements; the bounds only keep a broken target from making it allocate
// without limit.
const (
	// maxBulkLen bounds the length of one bulk string in a reply.
	maxBulkLen = 64 << 20
	// maxArrayLen bounds the element count of one array in a reply.
	maxArrayLen = 1 << 20
	// maxNesting bounds array nesting in a reply.
	maxNesting = 8
)

// appendArrayHeader appends the RESP header of an array of n elements.
func appendArrayHeader(dst []byte, n int) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '\r', '\n')
}

// appendBulk appends b as a RESP bulk string.
func appendBulk(dst, b []byte) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(b)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}

// appendBulkString appends s as a RESP bulk string.
func appendBulkString(dst []byte, s string) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, s...)
	return append(dst, '\r', '\n')
}

// appendInt appends the RESP integer reply :n.
func appendInt(dst []byte, n int64) []byte {
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, '\r', '\n')
}

// replyReader reads the target's replies: RESP2 only (a RESP3 reply to a
// RESP2 client is a fault the checker reports), under the limits above.
var replyReader = respconn.Reader{MaxBulkLen: maxBulkLen, MaxElems: maxArrayLen, MaxDepth: maxNesting, RESP2: true}

// readReply reads one complete RESP2 reply from br and appends its raw
// bytes to dst. Errors from br (timeouts, EOF) are returned as they are;
// bytes that are not a RESP2 reply give an error wrapping errProtocol, with
// what was read of the reply so far appended to dst.
func readReply(br *bufio.Reader, dst []byte) ([]byte, error) {
	out, err := replyReader.AppendRaw(dst, br)
	if errors.Is(err, respconn.ErrProtocol) {
		err = fmt.Errorf("%w: %w", errProtocol, err)
	}
	return out, err
}

// flatBulks parses b, a complete RESP2 array of non-null bulk strings, into
// its elements (sub-slices of b). ok is false for anything else.
func flatBulks(b []byte) (elems [][]byte, ok bool) {
	n, rest, ok := header(b, '*')
	if !ok || n < 0 {
		return nil, false
	}
	elems = make([][]byte, 0, n)
	for range n {
		var m int
		if m, rest, ok = header(rest, '$'); !ok || m < 0 || len(rest) < m+2 || rest[m] != '\r' || rest[m+1] != '\n' {
			return nil, false
		}
		elems = append(elems, rest[:m])
		rest = rest[m+2:]
	}
	return elems, len(rest) == 0
}

// header parses the line "<typ><n>\r\n" at the start of b.
func header(b []byte, typ byte) (n int, rest []byte, ok bool) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 2 || b[0] != typ {
		return 0, nil, false
	}
	n, err := strconv.Atoi(string(b[1:i]))
	if err != nil {
		return 0, nil, false
	}
	return n, b[i+2:], true
}

// sameFieldMap reports whether want and got, both RESP2 flat arrays of
// field/value bulk strings as HGETALL replies, hold the same fields with
// the same values in any order. want must not repeat a field.
func sameFieldMap(want, got []byte) bool {
	w, ok := flatBulks(want)
	if !ok || len(w)%2 != 0 {
		return false
	}
	g, ok := flatBulks(got)
	if !ok || len(g) != len(w) {
		return false
	}
	m := make(map[string][]byte, len(w)/2)
	for i := 0; i < len(w); i += 2 {
		m[string(w[i])] = w[i+1]
	}
	for i := 0; i < len(g); i += 2 {
		v, found := m[string(g[i])]
		if !found || !bytes.Equal(v, g[i+1]) {
			return false
		}
		delete(m, string(g[i])) // a field repeated in got is then missing
	}
	return len(m) == 0
}

// showCommand renders a request encoded by this package (an array of bulk
// strings) as its arguments separated by spaces, each quoted when it is not
// plain text, each cut to maxArgShown bytes and the whole to maxShown.
// requestKey returns the key of one of the checker's requests: the
// argument after the command name, or EVAL's first key (its numkeys
// non-zero); false for a request without one (PUBLISH names a channel)
// or with several (a DEL of several keys, which may lie in several slots).
func requestKey(req []byte) ([]byte, bool) {
	args, ok := flatBulks(req)
	if !ok || len(args) < 2 || bytes.EqualFold(args[0], []byte("PUBLISH")) ||
		(bytes.EqualFold(args[0], []byte("DEL")) && len(args) > 2) {
		return nil, false
	}
	if bytes.EqualFold(args[0], []byte("EVAL")) || bytes.EqualFold(args[0], []byte("EVALSHA")) {
		if len(args) < 4 || string(args[2]) == "0" {
			return nil, false
		}
		return args[3], true
	}
	return args[1], true
}

func showCommand(req []byte) string {
	args, ok := flatBulks(req)
	if !ok {
		return show(req)
	}
	var b []byte
	for i, a := range args {
		if i > 0 {
			b = append(b, ' ')
		}
		if len(b) > maxShown {
			b = fmt.Appendf(b, "…(%d more arguments)", len(args)-i)
			break
		}
		cut := a
		if len(cut) > maxArgShown {
			cut = cut[:maxArgShown]
		}
		if plain(cut) {
			b = append(b, cut...)
		} else {
			b = strconv.AppendQuote(b, string(cut))
		}
		if len(cut) < len(a) {
			b = fmt.Appendf(b, "…(%d bytes)", len(a))
		}
	}
	return string(b)
}

// plain reports whether b is non-empty printable ASCII without spaces or
// quotes, shown as it is.
func plain(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// show quotes b, cut to maxShown bytes with its full length noted.
func show(b []byte) string {
	if len(b) <= maxShown {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%s…(%d bytes)", strconv.Quote(string(b[:maxShown])), len(b))
}
