package engine

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Errors. None of them reaches a caller of the exported API: they end up,
// wrapped, in the LastErr of ProbeStats and PollerStats.
var (
	// errProtocol reports reply bytes that are not RESP2 or exceed a size
	// limit; the connection is dropped and dialled again.
	errProtocol = errors.New("engine: malformed reply")
	// errReply reports an error reply (-ERR ...) from the engine.
	errReply = errors.New("engine: error reply")
	// errShape reports a well-formed reply whose shape is not the one
	// documented for the command (for example a LATENCY HISTOGRAM entry
	// without histogram_usec).
	errShape = errors.New("engine: unexpected reply shape")
)

// Limits on replies, checked before allocating. The largest reply we read is
// INFO commandstats or LATENCY HISTOGRAM of an engine with every one of its
// ~400 commands and subcommands used: tens of kilobytes.
const (
	maxLineLen  = 64 << 10 // longest simple line, and the reader's buffer size
	maxBulkLen  = 16 << 20 // longest bulk string
	maxArrayLen = 1 << 20  // most elements in one array
	maxDepth    = 8        // deepest array nesting (LATENCY HISTOGRAM uses 3)
)

// value is one RESP2 reply.
type value struct {
	kind  byte    // '+' simple string, '-' error, ':' integer, '$' bulk, '*' array
	null  bool    // null bulk ($-1) or null array (*-1)
	str   string  // '+', '-' and '$'
	num   int64   // ':'
	elems []value // '*'
}

// err returns the engine's error message as an error wrapping errReply if v
// is an error reply, and nil otherwise.
func (v value) err() error {
	if v.kind == '-' {
		return fmt.Errorf("%w: %s", errReply, v.str)
	}
	return nil
}

// readValue reads one complete RESP2 reply from r. It returns errProtocol
// (wrapped) for bytes that are not RESP2 or break a limit, and r's error
// (io.EOF, io.ErrUnexpectedEOF inside a bulk string, a timeout, ...) when the
// reply is cut short.
func readValue(r *bufio.Reader) (value, error) {
	return readValueDepth(r, 0)
}

func readValueDepth(r *bufio.Reader, depth int) (value, error) {
	line, err := readLine(r)
	if err != nil {
		return value{}, err
	}
	if len(line) == 0 {
		return value{}, fmt.Errorf("%w: empty line", errProtocol)
	}
	v := value{kind: line[0]}
	body := line[1:]
	switch v.kind {
	case '+', '-':
		v.str = string(body)
	case ':':
		if v.num, err = parseInt(body); err != nil {
			return value{}, err
		}
	case '$':
		n, err := parseLen(body, maxBulkLen)
		if err != nil {
			return value{}, err
		}
		if n < 0 {
			v.null = true
			break
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return value{}, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return value{}, fmt.Errorf("%w: bulk of %d bytes not followed by CRLF", errProtocol, n)
		}
		v.str = string(buf[:n])
	case '*':
		if depth >= maxDepth {
			return value{}, fmt.Errorf("%w: arrays nested deeper than %d", errProtocol, maxDepth)
		}
		n, err := parseLen(body, maxArrayLen)
		if err != nil {
			return value{}, err
		}
		if n < 0 {
			v.null = true
			break
		}
		// Grow with the elements actually read rather than trusting n.
		v.elems = make([]value, 0, min(n, 1024))
		for range n {
			e, err := readValueDepth(r, depth+1)
			if err != nil {
				return value{}, err
			}
			v.elems = append(v.elems, e)
		}
	default:
		return value{}, fmt.Errorf("%w: type byte %q", errProtocol, v.kind)
	}
	return v, nil
}

// readLine returns the next CRLF-terminated line without its CRLF. The slice
// is only valid until the next read from r.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("%w: line longer than %d bytes", errProtocol, r.Size())
	}
	if err != nil {
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line not ended by CRLF", errProtocol)
	}
	return line[:len(line)-2], nil
}

func parseInt(b []byte) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: integer %q", errProtocol, b)
	}
	return n, nil
}

// parseLen parses an aggregate or bulk length: -1 (null) or 0..limit.
func parseLen(b []byte, limit int) (int, error) {
	n, err := parseInt(b)
	if err != nil {
		return 0, err
	}
	if n < -1 || n > int64(limit) {
		return 0, fmt.Errorf("%w: length %d outside -1..%d", errProtocol, n, limit)
	}
	return int(n), nil
}

// appendCommand appends args encoded as a RESP array of bulk strings, the
// form every engine accepts.
func appendCommand(b []byte, args ...string) []byte {
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
