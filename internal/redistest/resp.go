package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/respmeter/respmeter/internal/resp"
)

// ErrBadFrame reports bytes that are not RESP2/RESP3.
var ErrBadFrame = errors.New("redistest: malformed RESP frame")

// maxFrameDepth bounds aggregate nesting in FrameLen.
const maxFrameDepth = 128

// FrameLen returns the length of the complete RESP2/RESP3 frame at the
// start of b, 0 when b holds only part of one, or ErrBadFrame. An attribute
// (`|`) counts as a frame of its own. It is a test oracle for splitting
// reply streams, not a validating parser: simple lines are not checked.
func FrameLen(b []byte) (int, error) {
	return frameLen(b, 0, 0)
}

func frameLen(b []byte, off, depth int) (int, error) {
	if depth > maxFrameDepth {
		return 0, fmt.Errorf("%w: nesting deeper than %d", ErrBadFrame, maxFrameDepth)
	}
	if off >= len(b) {
		return 0, nil
	}
	i := bytes.Index(b[off:], []byte("\r\n"))
	if i < 0 {
		return 0, nil
	}
	line := b[off+1 : off+i]
	next := off + i + 2
	switch b[off] {
	case resp.TypeSimpleString, resp.TypeError, resp.TypeInteger, resp.TypeNull, resp.TypeBoolean, resp.TypeDouble, resp.TypeBigNumber:
		return next - off, nil
	case resp.TypeBlobString, resp.TypeBlobError, resp.TypeVerbatim:
		n, err := strconv.Atoi(string(line))
		if err != nil || n < -1 {
			return 0, fmt.Errorf("%w: bulk length %q", ErrBadFrame, line)
		}
		if n == -1 {
			return next - off, nil
		}
		if len(b) < next+n+2 {
			return 0, nil
		}
		if b[next+n] != '\r' || b[next+n+1] != '\n' {
			return 0, fmt.Errorf("%w: bulk of %d not followed by CRLF", ErrBadFrame, n)
		}
		return next + n + 2 - off, nil
	case resp.TypeArray, resp.TypeSet, resp.TypePush, resp.TypeMap, resp.TypeAttribute:
		n, err := strconv.Atoi(string(line))
		if err != nil || n < -1 {
			return 0, fmt.Errorf("%w: aggregate length %q", ErrBadFrame, line)
		}
		if b[off] == resp.TypeMap || b[off] == resp.TypeAttribute {
			n *= 2
		}
		pos := next
		for k := 0; k < n; k++ {
			m, err := frameLen(b, pos, depth+1)
			if err != nil || m == 0 {
				return 0, err
			}
			pos += m
		}
		return pos - off, nil
	default:
		return 0, fmt.Errorf("%w: type byte %q", ErrBadFrame, b[off])
	}
}

// SplitFrames cuts b into complete top-level frames and returns them with
// the incomplete rest.
func SplitFrames(b []byte) (frames [][]byte, rest []byte, err error) {
	for len(b) > 0 {
		n, err := FrameLen(b)
		if err != nil {
			return frames, b, err
		}
		if n == 0 {
			break
		}
		frames = append(frames, b[:n])
		b = b[n:]
	}
	return frames, b, nil
}

// Cmd encodes args as a RESP array of bulk strings, the way clients send
// requests.
func Cmd(args ...string) []byte {
	var b []byte
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

// Cmds concatenates several Cmd encodings, one pipeline in one write.
func Cmds(cmds ...[]string) []byte {
	var b []byte
	for _, c := range cmds {
		b = append(b, Cmd(c...)...)
	}
	return b
}

// Mask replaces every match of re in b with repl (regexp.ReplaceAll
// syntax), for hiding connection-specific values before comparing.
func Mask(b []byte, re *regexp.Regexp, repl string) []byte {
	return re.ReplaceAll(b, []byte(repl))
}

// HelloIDRe matches the client id inside a HELLO reply (RESP2 or RESP3).
var HelloIDRe = regexp.MustCompile(`(\$2\r\nid\r\n:)[0-9]+\r\n`)

// MaskHelloID hides the connection id in HELLO replies.
func MaskHelloID(b []byte) []byte { return Mask(b, HelloIDRe, "${1}<id>\r\n") }
