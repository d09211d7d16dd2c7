// Package respconn is a small blocking RESP client for respmeter's side
// connections: the engine probe and poller, the cluster topology fetch, the
// command table fetch and the proxy's auth check. It is not on the hot path
// (internal/resp frames client and upstream traffic there) and imports only
// internal/resp (a leaf, for the RESP type bytes), so every other package
// may use it.
//
// Read decodes one RESP2 or RESP3 reply (RESP3 spec:
// https://github.com/redis/redis-specifications/blob/master/protocol/RESP3.md)
// into a Value, bounding every announced length before allocating; Conn
// sends commands and reads their replies with a deadline.
package respconn

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/respmeter/respmeter/internal/resp"
)

// Limits of Read, checked before allocating. A line (simple string, error,
// number, or the header of a bulk or aggregate) is bounded by the size of
// the bufio.Reader's buffer; Dial makes it MaxLineLen.
const (
	MaxLineLen  = 64 << 10 // longest line, CRLF included, read by a Conn
	MaxBulkLen  = 16 << 20 // longest bulk string, bulk error or verbatim string, in bytes
	MaxElems    = 1 << 20  // most elements of one aggregate (a map's pairs count twice)
	MaxDepth    = 16       // deepest aggregate nesting (COMMAND INFO over RESP3 nests 8)
	maxInitCap  = 1024     // aggregates grow with the elements actually read beyond this
	verbatimTag = 4        // "txt:" before a verbatim string's text
	verbatimSep = ':'      // ends a verbatim string's format tag
)

// ErrProtocol is wrapped by Read's error when the bytes are not RESP, or
// break one of the limits above.
var ErrProtocol = errors.New("respconn: malformed reply")

// ServerError is an error reply (-ERR ... or RESP3 !) from the server: its
// text, error code first ("NOAUTH Authentication required.").
type ServerError string

func (e ServerError) Error() string { return "respconn: server error: " + string(e) }

// Value is one reply.
type Value struct {
	Type  byte    // a type byte of internal/resp (never resp.TypeAttribute)
	Null  bool    // resp.TypeNull, $-1 or *-1
	Str   string  // simple/bulk string, error text, verbatim text (tag dropped), double and big number text
	Int   int64   // resp.TypeInteger; resp.TypeBoolean: 1 for #t, 0 for #f
	Elems []Value // resp.TypeArray, resp.TypeSet, resp.TypePush; resp.TypeMap: key, value, key, value, ...
}

// IsError reports whether v is an error reply.
func (v Value) IsError() bool { return resp.IsErrorType(v.Type) }

// Err returns v's text as a ServerError if v is an error reply, and nil
// otherwise.
func (v Value) Err() error {
	if v.IsError() {
		return ServerError(v.Str)
	}
	return nil
}

// IsString reports whether v is a non-null simple, bulk or verbatim string.
func (v Value) IsString() bool {
	return !v.Null && (v.Type == resp.TypeSimpleString || v.Type == resp.TypeBlobString || v.Type == resp.TypeVerbatim)
}

// IsArray reports whether v is a non-null array, set or push.
func (v Value) IsArray() bool {
	return !v.Null && (v.Type == resp.TypeArray || v.Type == resp.TypeSet || v.Type == resp.TypePush)
}

// Any returns v as plain Go values: nil (null), string (strings, big
// numbers), int64, float64 (a double; 0 for text that does not parse),
// bool, ServerError (an error reply), []any (arrays, sets, pushes) and
// map[string]any (a map; keys that are not strings are formatted with %v,
// a later duplicate wins).
func (v Value) Any() any {
	switch {
	case v.Null:
		return nil
	case v.IsError():
		return ServerError(v.Str)
	}
	switch v.Type {
	case resp.TypeInteger:
		return v.Int
	case resp.TypeBoolean:
		return v.Int == 1
	case resp.TypeDouble:
		f, _ := strconv.ParseFloat(v.Str, 64)
		return f
	case resp.TypeArray, resp.TypeSet, resp.TypePush:
		a := make([]any, len(v.Elems))
		for i, e := range v.Elems {
			a[i] = e.Any()
		}
		return a
	case resp.TypeMap:
		m := make(map[string]any, len(v.Elems)/2)
		for i := 0; i+1 < len(v.Elems); i += 2 {
			k, ok := v.Elems[i].Any().(string)
			if !ok {
				k = fmt.Sprint(v.Elems[i].Any())
			}
			m[k] = v.Elems[i+1].Any()
		}
		return m
	}
	return v.Str
}

// String formats v for error messages: strings quoted with their type
// byte, aggregates in brackets, cut at 200 bytes.
func (v Value) String() string {
	switch {
	case v.Type == 0:
		return "(absent)"
	case v.Null:
		return "(nil)"
	case v.Type == resp.TypeInteger:
		return strconv.FormatInt(v.Int, 10)
	case v.Type == resp.TypeBoolean:
		return strconv.FormatBool(v.Int == 1)
	case len(v.Elems) > 0 || v.Type == resp.TypeArray || v.Type == resp.TypeSet || v.Type == resp.TypePush || v.Type == resp.TypeMap:
		b := []byte{'['}
		for i, e := range v.Elems {
			if i > 0 {
				b = append(b, ' ')
			}
			b = append(b, e.String()...)
			if len(b) > 200 {
				return string(b[:200]) + "...]"
			}
		}
		return string(append(b, ']'))
	}
	return string(v.Type) + strconv.Quote(v.Str)
}

// Read reads one complete reply from r. It returns an error wrapping
// ErrProtocol for bytes that are not RESP2/RESP3 or break a limit (a line
// longer than r's buffer, a length over MaxBulkLen or MaxElems, nesting
// deeper than MaxDepth), and r's error (io.EOF, io.ErrUnexpectedEOF inside a
// bulk string, a timeout, ...) when the reply is cut short. Streamed strings
// and aggregates (RESP3 "$?", "*?") are refused as ErrProtocol: no engine
// sends them to a side connection.
func Read(r *bufio.Reader) (Value, error) {
	d := decoder{r: r, lim: defaultReader, values: true}
	return d.read(0)
}

// A Reader reads replies under limits of its own, for a client that keeps
// replies as bytes (AppendRaw): the consistency checker compares each with
// the bytes it expects.
type Reader struct {
	MaxBulkLen int  // longest bulk string, bulk error or verbatim string
	MaxElems   int  // most elements of one aggregate
	MaxDepth   int  // deepest aggregate nesting
	RESP2      bool // only RESP2's five types: a RESP3 one is ErrProtocol
}

// defaultReader is Read's: the package's limits, every type.
var defaultReader = Reader{MaxBulkLen: MaxBulkLen, MaxElems: MaxElems, MaxDepth: MaxDepth}

// AppendRaw reads one complete reply from r, as Read does under rd's
// limits, and appends its bytes, as they came, to dst. On an error it
// returns dst with what was read of the reply appended.
func (rd Reader) AppendRaw(dst []byte, r *bufio.Reader) ([]byte, error) {
	d := decoder{r: r, lim: rd, raw: dst, keep: true}
	_, err := d.read(0)
	return d.raw, err
}

// decoder reads one reply: into a Value (values), and/or appending its
// bytes to raw (keep).
type decoder struct {
	r      *bufio.Reader
	lim    Reader
	values bool
	keep   bool
	raw    []byte
}

func (d *decoder) read(depth int) (Value, error) {
	line, err := d.readLine()
	if err != nil {
		return Value{}, err
	}
	if len(line) == 0 {
		return Value{}, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	v := Value{Type: line[0]}
	body := line[1:]
	if d.lim.RESP2 {
		switch v.Type {
		case resp.TypeSimpleString, resp.TypeError, resp.TypeInteger, resp.TypeBlobString, resp.TypeArray:
		default:
			return Value{}, fmt.Errorf("%w: not a RESP2 reply: %q", ErrProtocol, line)
		}
	}
	switch v.Type {
	case resp.TypeSimpleString, resp.TypeError, resp.TypeBigNumber:
		if d.values {
			v.Str = string(body)
		}
	case resp.TypeDouble:
		if _, err := strconv.ParseFloat(string(body), 64); err != nil {
			return Value{}, fmt.Errorf("%w: double %q", ErrProtocol, body)
		}
		if d.values {
			v.Str = string(body)
		}
	case resp.TypeInteger:
		if v.Int, err = parseInt(body); err != nil {
			return Value{}, err
		}
	case resp.TypeNull:
		if len(body) != 0 {
			return Value{}, fmt.Errorf("%w: null %q", ErrProtocol, line)
		}
		v.Null = true
	case resp.TypeBoolean:
		switch string(body) {
		case "t":
			v.Int = 1
		case "f":
		default:
			return Value{}, fmt.Errorf("%w: boolean %q", ErrProtocol, line)
		}
	case resp.TypeBlobString, resp.TypeBlobError, resp.TypeVerbatim:
		n, err := parseLen(body, d.lim.MaxBulkLen)
		if err != nil {
			return Value{}, err
		}
		if n < 0 {
			v.Null = true
			break
		}
		buf, err := d.readBulk(n)
		if err != nil {
			return Value{}, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return Value{}, fmt.Errorf("%w: bulk of %d bytes not followed by CRLF", ErrProtocol, n)
		}
		if v.Type == resp.TypeVerbatim {
			if n < verbatimTag || buf[verbatimTag-1] != verbatimSep {
				return Value{}, fmt.Errorf("%w: verbatim string without its format tag", ErrProtocol)
			}
			buf = buf[verbatimTag:]
			n -= verbatimTag
		}
		if d.values {
			v.Str = string(buf[:n])
		}
	case resp.TypeArray, resp.TypeSet, resp.TypePush, resp.TypeMap, resp.TypeAttribute:
		if depth >= d.lim.MaxDepth {
			return Value{}, fmt.Errorf("%w: aggregates nested deeper than %d", ErrProtocol, d.lim.MaxDepth)
		}
		n, err := parseLen(body, d.lim.MaxElems)
		if err != nil {
			return Value{}, err
		}
		if n < 0 {
			v.Null = true
			break
		}
		if v.Type == resp.TypeMap || v.Type == resp.TypeAttribute {
			if n > d.lim.MaxElems/2 {
				return Value{}, fmt.Errorf("%w: map of %d pairs over %d elements", ErrProtocol, n, d.lim.MaxElems)
			}
			n *= 2
		}
		if d.values {
			// Grow with the elements actually read rather than trusting n.
			v.Elems = make([]Value, 0, min(n, maxInitCap))
		}
		for range n {
			e, err := d.read(depth + 1)
			if err != nil {
				return Value{}, err
			}
			if d.values {
				v.Elems = append(v.Elems, e)
			}
		}
		if v.Type == resp.TypeAttribute { // metadata about the next reply: dropped
			return d.read(depth)
		}
	default:
		return Value{}, fmt.Errorf("%w: type byte %q", ErrProtocol, v.Type)
	}
	return v, nil
}

// readBulk reads a bulk payload of n bytes and its CRLF: into raw when the
// decoder keeps the reply's bytes (what arrived of it, on an error), else
// into a new buffer.
func (d *decoder) readBulk(n int) ([]byte, error) {
	if !d.keep {
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(d.r, buf); err != nil {
			return nil, err
		}
		return buf, nil
	}
	start := len(d.raw)
	d.raw = slices.Grow(d.raw, n+2)[:start+n+2]
	got, err := io.ReadFull(d.r, d.raw[start:])
	if err != nil {
		d.raw = d.raw[:start+got]
		return nil, err
	}
	return d.raw[start:], nil
}

// readLine returns the next CRLF-terminated line without its CRLF (kept
// whole in raw when the decoder keeps the reply's bytes). The slice is only
// valid until the next read.
func (d *decoder) readLine() ([]byte, error) {
	line, err := d.r.ReadSlice('\n')
	if d.keep {
		d.raw = append(d.raw, line...)
	}
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, d.r.Size())
	}
	if err != nil {
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line not ended by CRLF", ErrProtocol)
	}
	return line[:len(line)-2], nil
}

func parseInt(b []byte) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: integer %q", ErrProtocol, b)
	}
	return n, nil
}

// parseLen parses a bulk or aggregate length: -1 (null) or 0..limit.
func parseLen(b []byte, limit int) (int, error) {
	n, err := parseInt(b)
	if err != nil {
		return 0, err
	}
	if n < -1 || n > int64(limit) {
		return 0, fmt.Errorf("%w: length %d outside -1..%d", ErrProtocol, n, limit)
	}
	return int(n), nil
}

// AppendCommand appends args encoded as a RESP array of bulk strings, the
// form of request every engine accepts.
func AppendCommand[S ~string | ~[]byte](b []byte, args ...S) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}
