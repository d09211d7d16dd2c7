package proxy

import (
	"bytes"
	"strconv"

	"github.com/respmeter/respmeter/internal/resp"
)

// Reply merging for a request sent to several shards (a multi-key fan-out,
// a broadcast by command tips, SCAN over every shard). Each function is a
// pure function of the parts' replies, given in part order; the merger's
// fields are scratch buffers reused from one request to the next, so that
// merging allocates nothing once warm. A reply that cannot be merged (not
// the type the merge expects) is reported by its index: the client gets
// that reply as it is, as a cluster client surfaces a node's unexpected
// answer.

// merger holds one event loop's scratch for merging.
type merger struct {
	f      *resp.ReplyFramer
	elems  [][]byte
	elems2 [][]byte
	vals   []int64
	num    []byte
}

func newMerger() *merger {
	return &merger{f: resp.NewReplyFramer(), num: make([]byte, 0, 24)}
}

// firstError returns the index of the first error reply ('-', or RESP3's
// blob error '!') in part order, or -1: a part that failed fails the whole
// request, as a cluster client reports a failed fan-out.
func firstError(replies [][]byte) int {
	for i, r := range replies {
		if resp.IsErrorReply(r) {
			return i
		}
	}
	return -1
}

// sum merges integer replies ":n\r\n" into ":<sum>\r\n" appended to dst
// (DEL, EXISTS, TOUCH, UNLINK over several slots; DBSIZE and PUBLISH over
// every shard: command tips response_policy:agg_sum). bad is the index of
// a reply that is not an integer, or -1.
func (m *merger) sum(dst []byte, replies [][]byte) (out []byte, bad int) {
	var n int64
	for i, r := range replies {
		v, ok := parseIntReply(r)
		if !ok {
			return dst, i
		}
		n += v
	}
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, "\r\n"...), -1
}

// mget merges array replies into one array appended to dst, each element
// at the position of its key in the request: pos[i][j] is the position of
// the j-th key part i asked for (MGET of keys in several slots; a key named
// twice has two positions and its value twice). bad is the index of a
// reply that is not an array of len(pos[i]) elements, or -1.
func (m *merger) mget(dst []byte, replies [][]byte, pos [][]int32) (out []byte, bad int) {
	n := 0
	for _, p := range pos {
		n += len(p)
	}
	elems := m.elems[:0]
	for range n {
		elems = append(elems, nil)
	}
	bad = -1
	for i, r := range replies {
		got, ok := splitArray(m.f, r, m.elems2[:0])
		m.elems2 = got[:0]
		if !ok || len(got) != len(pos[i]) {
			bad = i
			break
		}
		for j, at := range pos[i] {
			elems[at] = got[j]
		}
	}
	if bad < 0 {
		dst = append(dst, '*')
		dst = strconv.AppendInt(dst, int64(n), 10)
		dst = append(dst, "\r\n"...)
		for _, el := range elems {
			dst = append(dst, el...)
		}
	}
	clear(elems) // they alias the replies
	m.elems = elems[:0]
	return dst, bad
}

// concat joins array replies into one array appended to dst, in part order
// (KEYS over every shard). bad is the index of a reply that is not an
// array, or -1.
func (m *merger) concat(dst []byte, replies [][]byte) (out []byte, bad int) {
	start := len(dst)
	n := 0
	for i, r := range replies {
		cnt, body, ok := arrayBody(r)
		if !ok {
			return dst[:start], i
		}
		n += cnt
		dst = append(dst, body...)
	}
	// The header's length is known only now: append it, then rotate it to
	// the front (no second buffer).
	hdr := strconv.AppendInt(append(m.num[:0], '*'), int64(n), 10)
	hdr = append(hdr, "\r\n"...)
	m.num = hdr[:0]
	dst = append(dst, hdr...)
	body := dst[start:]
	copy(body[len(hdr):], body[:len(body)-len(hdr)])
	copy(body, hdr)
	return dst, -1
}

// oneSucceeded returns the index of the reply the client gets under
// response_policy:one_succeeded (SCRIPT KILL, FUNCTION KILL: the shard
// running the script answers OK, the others -NOTBUSY): the first reply that
// is not an error, else the first error.
func oneSucceeded(replies [][]byte) int {
	for i, r := range replies {
		if len(r) > 0 && !resp.IsErrorReply(r) {
			return i
		}
	}
	return min(0, len(replies)-1)
}

// ints combines integer replies, or arrays of integer replies element by
// element, with op: aggAnd and aggOr (response_policy:agg_logical_and and
// agg_logical_or: SCRIPT EXISTS's array of 0 and 1 from every shard is 1
// only where every shard has the script), aggMin and aggMax (agg_min: WAIT's
// count of replicas that acknowledged, the fewest over the shards;
// WAITAOF's pair). Every reply must have the first one's shape; bad is the
// index of one that does not, or -1.
func (m *merger) ints(dst []byte, replies [][]byte, op uint8) (out []byte, bad int) {
	vals := m.vals[:0]
	array := false
	for i, r := range replies {
		var got [][]byte
		switch {
		case len(r) > 0 && r[0] == resp.TypeInteger:
			got = append(m.elems2[:0], r)
		case len(r) > 0 && r[0] == resp.TypeArray:
			var ok bool
			if got, ok = splitArray(m.f, r, m.elems2[:0]); !ok {
				return dst, i
			}
		default:
			return dst, i
		}
		m.elems2 = got[:0]
		if i == 0 {
			array = r[0] == resp.TypeArray
		} else if array != (r[0] == resp.TypeArray) || len(got) != len(vals) {
			return dst, i
		}
		for j, g := range got {
			v, ok := parseIntReply(g)
			if !ok {
				return dst, i
			}
			switch {
			case i == 0:
				vals = append(vals, v)
			case op == aggAnd:
				vals[j] = b2i(vals[j] != 0 && v != 0)
			case op == aggOr:
				vals[j] = b2i(vals[j] != 0 || v != 0)
			case op == aggMin:
				vals[j] = min(vals[j], v)
			case op == aggMax:
				vals[j] = max(vals[j], v)
			}
		}
	}
	m.vals = vals
	if op == aggAnd || op == aggOr {
		for j := range vals {
			vals[j] = b2i(vals[j] != 0)
		}
	}
	if array {
		dst = append(dst, '*')
		dst = strconv.AppendInt(dst, int64(len(vals)), 10)
		dst = append(dst, "\r\n"...)
	}
	for _, v := range vals {
		dst = append(dst, ':')
		dst = strconv.AppendInt(dst, v, 10)
		dst = append(dst, "\r\n"...)
	}
	return dst, -1
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// SCAN over several shards (see client.scanRoute): the client's cursor is
// engineCursor*n + k, where k is the shard's position in the list of the n
// live shards. Cursor 0 starts on the first shard with cursor 0; when a
// shard's iteration ends the next shard starts, so one full iteration
// returns every key of every shard once (under SCAN's own guarantees, as
// long as the shard map does not change).

// scanCursor splits a client's SCAN cursor into the engine's cursor and the
// shard position k.
func scanCursor(c uint64, n int) (engine uint64, k int) {
	return c / uint64(n), int(c % uint64(n))
}

// scanNext returns the client's next cursor after the shard at position k
// answered engine cursor next: the same shard while it has more, else the
// next shard from 0, else 0 (the iteration is over).
func scanNext(next uint64, k, n int) uint64 {
	switch {
	case next != 0:
		return next*uint64(n) + uint64(k)
	case k+1 < n:
		return uint64(k + 1)
	}
	return 0
}

// scan rewrites a shard's SCAN reply [cursor, keys] with the client's next
// cursor, appended to dst; ok is false for a reply of another shape.
func (m *merger) scan(dst, reply []byte, k, n int) (out []byte, ok bool) {
	got, ok := splitArray(m.f, reply, m.elems2[:0])
	m.elems2 = got[:0]
	if !ok || len(got) != 2 || len(got[0]) == 0 || got[0][0] != resp.TypeBlobString {
		return dst, false
	}
	line := got[0][bytes.IndexByte(got[0], '\n')+1:]
	c, err := strconv.ParseUint(string(bytes.TrimSuffix(line, []byte("\r\n"))), 10, 64)
	if err != nil {
		return dst, false
	}
	cur := strconv.AppendUint(m.num[:0], scanNext(c, k, n), 10)
	m.num = cur[:0]
	dst = append(dst, "*2\r\n"...)
	dst = appendBulk(dst, cur)
	return append(dst, got[1]...), true
}

// parseIntReply reads an integer reply ":n\r\n".
func parseIntReply(r []byte) (int64, bool) {
	if len(r) < 4 || r[0] != resp.TypeInteger {
		return 0, false
	}
	n, err := strconv.ParseInt(string(r[1:len(r)-2]), 10, 64)
	return n, err == nil
}

// arrayBody splits an array reply "*n\r\n<elements>" into n and the
// elements' bytes.
func arrayBody(r []byte) (int, []byte, bool) {
	if len(r) < 4 || r[0] != resp.TypeArray {
		return 0, nil, false
	}
	i := bytes.IndexByte(r, '\n')
	n, err := strconv.Atoi(string(r[1 : i-1]))
	if err != nil || n < 0 {
		return 0, nil, false
	}
	return n, r[i+1:], true
}

// splitArray appends to dst the complete elements of the array reply r,
// each as its bytes.
func splitArray(f *resp.ReplyFramer, r []byte, dst [][]byte) ([][]byte, bool) {
	n, body, ok := arrayBody(r)
	if !ok {
		return dst, false
	}
	for i := 0; i < n; i++ {
		f.Reset()
		k, fin, err := f.Feed(body)
		if err != nil || !fin {
			return dst, false
		}
		dst = append(dst, body[:k])
		body = body[k:]
	}
	return dst, len(body) == 0
}

// appendBulk appends a as a bulk string.
func appendBulk(b, a []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(a)), 10)
	b = append(b, "\r\n"...)
	b = append(b, a...)
	return append(b, "\r\n"...)
}
