package capture

import (
	"bytes"
	"encoding/binary"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
)

// Redacted replaces every credential in a capture file.
const Redacted = "<redacted>"

// redactor rewrites the requests of 'C' and 'B' records on their way to
// the file (the writer goroutine; never on an event loop).
//
// Always, credentials are replaced by Redacted: the password of AUTH
// (AUTH pass, AUTH user pass), of HELLO ... AUTH user pass, of MIGRATE
// ... AUTH pass / AUTH2 user pass, the value of CONFIG SET requirepass and
// masterauth, and the password rules of ACL SETUSER (">pass", "<pass",
// "#hash", "!hash"). User names stay.
//
// With values, every other argument that is not the command name, its
// subcommand (CLIENT, CONFIG, OBJECT, ...), a key (where Buf.KeyedBatch
// says the keys are), an argument of
// HELLO, SELECT or SWAPDB (connection setup) or an option keyword (EX, NX, WITHSCORES, ... see keywords) is replaced by filler of
// its length: digits by '1' (so that numbers stay numbers: EX 10 stays a
// valid TTL), any other byte by 'x'.
type redactor struct {
	values bool

	scan    resp.RequestScanner
	args    [][]byte
	keyInfo []byte // a keyed batch's key positions not yet read (AppendKeyPos)
	keys    []int  // the current request's key positions
	tmp     []byte
}

// record appends the record of kind (KindConn, KindBatch or
// kindKeyedBatch) with body, its requests redacted, to out (a keyed batch
// as a KindBatch, without its key positions).
func (r *redactor) record(out []byte, kind byte, body []byte) []byte {
	// conn, t (and first for a batch) stay; the requests follow.
	hdr := 2
	if kind != KindConn {
		hdr = 3
	}
	off := 0
	for range hdr {
		_, m := binary.Uvarint(body[off:])
		off += m
	}
	r.tmp = append(r.tmp[:0], body[:off]...)
	reqs := body[off:]
	r.keyInfo = nil
	if kind == kindKeyedBatch {
		l, m := binary.Uvarint(reqs)
		if m <= 0 || l > uint64(len(reqs)-m) {
			return out // not written by KeyedBatch: keep nothing of it
		}
		r.keyInfo, reqs = reqs[m:m+int(l)], reqs[m+int(l):]
		kind = KindBatch
	}
	r.tmp = r.requests(r.tmp, reqs)
	out = append(out, kind)
	out = binary.AppendUvarint(out, uint64(len(r.tmp)))
	return append(out, r.tmp...)
}

// requests appends the frames of reqs to dst, redacted.
func (r *redactor) requests(dst, reqs []byte) []byte {
	r.scan.Reset()
	for len(reqs) > 0 {
		n, kind, err := r.scan.Scan(reqs)
		if err != nil || n == 0 {
			// Not a whole frame (the proxy records only whole ones): keep
			// nothing of it rather than risk a credential.
			return dst
		}
		frame := reqs[:n]
		reqs = reqs[n:]
		r.scan.Reset()
		if kind == resp.KindEmpty {
			dst = append(dst, frame...)
			continue
		}
		if !r.values && kind == resp.KindMultibulk && !mayHoldSecret(frame) {
			// Most requests: no credential to look for, no need to split
			// them into arguments.
			dst = append(dst, frame...)
			continue
		}
		r.args = resp.Args(frame, kind, r.args[:0])
		if len(r.args) > 0 {
			r.nextKeys()
		}
		if len(r.args) == 0 || !r.redactArgs() {
			dst = append(dst, frame...)
			continue
		}
		dst = respconn.AppendCommand(dst, r.args...)
	}
	return dst
}

// mayHoldSecret reports whether the multibulk frame's command is one whose
// arguments redactArgs looks at (AUTH, HELLO, MIGRATE, CONFIG, ACL), or
// its name cannot be read here.
func mayHoldSecret(frame []byte) bool {
	// "*N\r\n$L\r\nNAME\r\n..."
	i := bytes.IndexByte(frame, '\n')
	if i < 0 || i+1 >= len(frame) || frame[i+1] != resp.TypeBlobString {
		return true
	}
	n, j := 0, i+2
	for ; j < len(frame) && frame[j] >= '0' && frame[j] <= '9'; j++ {
		n = n*10 + int(frame[j]-'0')
		if n > 16 {
			return false // no secret-bearing name is that long
		}
	}
	if j+2+n > len(frame) || frame[j] != '\r' {
		return true
	}
	name := frame[j+2 : j+2+n]
	return eq(name, "auth") || eq(name, "hello") || eq(name, "migrate") || eq(name, "config") || eq(name, "acl")
}

var redacted = []byte(Redacted)

// redactArgs redacts r.args in place (replacing slices, never writing
// into the frame) and reports whether it changed any.
func (r *redactor) redactArgs() bool {
	a := r.args
	changed := false
	secret := func(i int) {
		if i < len(a) {
			a[i] = redacted
			changed = true
		}
	}
	name := a[0]
	switch {
	case eq(name, "auth"):
		secret(len(a) - 1)
	case eq(name, "hello"):
		for i := 2; i < len(a); i++ {
			if eq(a[i], "auth") {
				secret(i + 2)
				i += 2
			}
		}
	case eq(name, "migrate"):
		for i := 6; i < len(a); i++ {
			switch {
			case eq(a[i], "auth"):
				secret(i + 1)
				i++
			case eq(a[i], "auth2"):
				secret(i + 2)
				i += 2
			case eq(a[i], "keys"):
				i = len(a)
			}
		}
	case eq(name, "config") && len(a) > 1 && eq(a[1], "set"):
		for i := 2; i+1 < len(a); i += 2 {
			if eq(a[i], "requirepass") || eq(a[i], "masterauth") {
				secret(i + 1)
			}
		}
	case eq(name, "acl") && len(a) > 1 && eq(a[1], "setuser"):
		for i := 3; i < len(a); i++ {
			if len(a[i]) > 0 && bytes.IndexByte([]byte("><#!"), a[i][0]) >= 0 {
				secret(i)
			}
		}
	}
	if !r.values || eq(name, "hello") || eq(name, "select") || eq(name, "swapdb") {
		return changed
	}
	first := 1
	if len(a) > 1 && containers[string(bytes.ToLower(name))] {
		first = 2
	}
	for i := first; i < len(a); i++ {
		if len(a[i]) == len(redacted) && &a[i][0] == &redacted[0] || isKey(r.keys, i) || keywords[string(bytes.ToUpper(a[i]))] {
			continue
		}
		f := make([]byte, len(a[i]))
		for j, c := range a[i] {
			if c >= '0' && c <= '9' {
				f[j] = '1'
			} else {
				f[j] = 'x'
			}
		}
		a[i] = f
		changed = true
	}
	return changed
}

// nextKeys reads the current request's entry of r.keyInfo (AppendKeyPos)
// into r.keys: none without one, or when its argument count is not the
// request's (then every argument but the name and keywords is redacted).
func (r *redactor) nextKeys() {
	r.keys = r.keys[:0]
	if len(r.keyInfo) == 0 {
		return
	}
	in := r.keyInfo
	argc, m := binary.Uvarint(in)
	if m <= 0 {
		r.keyInfo = nil
		return
	}
	in = in[m:]
	n, m := binary.Uvarint(in)
	if m <= 0 {
		r.keyInfo = nil
		return
	}
	in = in[m:]
	for ; n > 0; n-- {
		pos, m := binary.Uvarint(in)
		if m <= 0 {
			r.keyInfo, r.keys = nil, r.keys[:0]
			return
		}
		in = in[m:]
		r.keys = append(r.keys, int(pos))
	}
	r.keyInfo = in
	if argc != uint64(len(r.args)) {
		r.keys = r.keys[:0]
	}
}

func isKey(keys []int, i int) bool {
	for _, k := range keys {
		if k == i {
			return true
		}
	}
	return false
}

func eq(b []byte, s string) bool { return len(b) == len(s) && bytes.EqualFold(b, []byte(s)) }

// containers are the commands whose first argument is a subcommand name.
var containers = map[string]bool{
	"acl": true, "client": true, "cluster": true, "command": true, "config": true, "debug": true,
	"function": true, "latency": true, "memory": true, "module": true, "object": true,
	"pubsub": true, "script": true, "slowlog": true, "xgroup": true, "xinfo": true,
}

// keywords are option words of Redis commands, kept by value redaction
// (upper case).
var keywords = map[string]bool{}

func init() {
	for _, w := range []string{"EX", "PX", "EXAT", "PXAT", "NX", "XX", "GT", "LT", "CH", "INCR",
		"KEEPTTL", "GET", "PERSIST", "WITHSCORES", "WITHSCORE", "LIMIT", "MATCH", "COUNT", "TYPE",
		"BY", "ASC", "DESC", "ALPHA", "STORE", "WEIGHTS", "AGGREGATE", "SUM", "MIN", "MAX",
		"REV", "BYSCORE", "BYLEX", "LEFT", "RIGHT", "BEFORE", "AFTER", "BLOCK", "STREAMS",
		"GROUP", "NOACK", "MAXLEN", "MINID", "NOMKSTREAM", "IDLE", "TIME", "RETRYCOUNT", "FORCE",
		"JUSTID", "WITHVALUES", "REPLACE", "COPY", "ABSTTL", "FREQ", "IDLETIME", "RANK", "MAXLEN",
		"LEN", "IDX", "MINMATCHLEN", "WITHMATCHLEN", "FIELDS", "FNX", "FXX", "NOVALUES",
		"BIT", "BYTE", "OVERFLOW", "WRAP", "SAT", "FAIL", "U8", "I8", "U16", "I16", "U32", "I32",
		"I64", "FROMMEMBER", "FROMLONLAT", "BYRADIUS", "BYBOX", "M", "KM", "FT", "MI",
		"WITHCOORD", "WITHDIST", "WITHHASH", "ANY", "STOREDIST", "SCHEMA", "RESET", "ON", "OFF", "SKIP",
		"NOLOOP", "NOW", "ID", "ASYNC", "SYNC", "TRUE", "FALSE"} {
		keywords[w] = true
	}
}
