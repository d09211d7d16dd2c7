package check

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/respmeter/respmeter/internal/hashslot"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
)

// Shape of the generated load.
const (
	// pubEvery: one batch in pubEvery carries a PUBLISH (with PubSub).
	pubEvery = 16
	// delEvery: once this many SET keys have been read back by GET, the
	// next request deletes them (DEL → :delEvery), bounding the key count.
	delEvery = 32
	// maxStrLen: past it, the next APPEND is replaced by DEL of the string.
	maxStrLen = 1 << 20
	// maxListLen: from it on, the next LPUSH is replaced by LTRIM 0 2.
	maxListLen = 1 << 14
	// hashRotate: after this many HSETs the next one is replaced by DEL of
	// the hash, keeping HGETALL replies small.
	hashRotate = 8
	// counterBase spaces the connections' INCR counters: connection i
	// counts from (i+1)*counterBase, so no two connections' INCR replies
	// are equal.
	counterBase = 1_000_000_000_000
	// bigValueEvery: one value in bigValueEvery is 1..maxValue bytes long;
	// the others up to smallPad bytes past their unique tag.
	bigValueEvery = 256
	// maxValue bounds the padding of a big value.
	maxValue = 16 << 10
	// smallPad bounds the padding of an ordinary value.
	smallPad = 24
	// asyncWrite: batches larger than this are written by a goroutine
	// while the replies are read, so that a target that stops reading
	// until its replies are taken cannot deadlock the checker.
	asyncWrite = 32 << 10
	// readBuffer is the size of each connection's read buffer.
	readBuffer = 64 << 10
)

// The two scripts sent with EVAL.
const (
	scriptEcho  = "return ARGV[1]"
	scriptError = "return redis.error_reply(ARGV[1])"
)

// Padding alphabets: one value in four is padded with bytes that mean
// something in RESP, to catch proxies that look inside bulk strings.
const (
	textAlphabet   = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	binaryAlphabet = "\r\n$*:+-_%>\x00\xff \"\\"
)

// kind is a request's command, for the statistics of tests and for
// choosing how its reply is compared.
type kind uint8

const (
	kSet kind = iota
	kGet
	kDelKeys
	kIncr
	kAppend
	kDelString
	kLPush
	kLTrim
	kLRange
	kHSet
	kDelHash
	kHGetAll
	kEval
	kEvalError
	kEcho
	kPublish
	numKinds
)

// expect is the prediction for one request of a batch: offsets of the
// request in worker.out and of the exact expected reply (and, for PUBLISH,
// of the message the subscriber must receive) in worker.exp.
type expect struct {
	kind           kind
	seq            int64 // the request's number on its connection, from 1
	reqStart       int
	reqEnd         int
	wantStart      int
	wantEnd        int
	pubStart       int
	pubEnd         int
	published      bool // PUBLISH answered :1: the subscriber must receive the message
	fieldMapResult bool // HGETALL: any order of the fields matches
}

// setKey is a key written by SET and not yet read back, with its value.
type setKey struct {
	seq   int64
	value []byte
}

// worker drives one checking connection (and its subscriber). All its
// fields belong to the goroutine running run, and are read by Run after
// it returned.
type worker struct {
	id    int
	quota int64 // requests to send
	o     *Options
	rec   *recorder
	rng   *rand.Rand

	// mu guards conn and sub while setup assigns them (the goroutine
	// running run reads them without it).
	mu   sync.Mutex
	conn net.Conn
	br   *bufio.Reader
	sub  net.Conn // nil without PubSub
	subr *bufio.Reader

	// Fixed keys and channel of the connection.
	prefix                                  []byte
	ctrKey, strKey, listKey, hashKey, chanK []byte

	// Limits of the string and the list (maxStrLen, maxListLen; tests
	// lower them).
	maxStr, maxList int64

	// The model: what the target holds after the requests built so far.
	seq        int64           // requests built
	counter    int64           // value of ctrKey
	strLen     int64           // length of strKey
	listLen    int64           // length of listKey
	newest     [][]byte        // the up to 3 first elements of listKey
	listDirty  bool            // listKey changed since the last LRANGE
	hashFields [][]byte        // field, value, … of hashKey in insertion order
	hashSets   int             // HSETs since hashKey was last deleted
	hashDirty  bool            // hashKey changed since the last HGETALL
	unread     []setKey        // SET keys not yet read
	read       []int64         // SET keys read, not yet deleted
	deleting   []int64         // SET keys deleted in the current batch
	kinds      [numKinds]int64 // requests built, by kind (for tests)

	// The current batch.
	out   []byte
	exp   []byte
	batch []expect
	buf   []byte // the reply being checked

	// Outcome.
	connected    bool // the connection was opened
	interrupted  bool // stopped by the context
	commands     int64
	mismatches   int64
	errorReplies int64
	connErrors   int64
	// slots: the mismatches by the hash slot of their request's key, and
	// when they were seen; start is the run's start.
	slots map[uint16]*SlotMismatches
	start time.Time
}

// newWorker returns the worker of connection id, which is to send quota
// requests with the resolved options o.
func newWorker(id int, quota int64, o *Options, rec *recorder) *worker {
	w := &worker{
		id:     id,
		quota:  quota,
		o:      o,
		rec:    rec,
		rng:    newRand(o.Seed, id),
		prefix: []byte(o.KeyPrefix),
	}
	name := func(what string) []byte {
		b := append([]byte(o.KeyPrefix), what...)
		return strconv.AppendInt(b, int64(id), 10)
	}
	w.ctrKey, w.strKey, w.listKey, w.hashKey, w.chanK = name("ctr_"), name("str_"), name("list_"), name("hash_"), name("chan_")
	w.counter = int64(id+1) * counterBase
	w.maxStr, w.maxList = maxStrLen, maxListLen
	return w
}

// newRand returns the random source of connection id for seed. The PCG's
// two seed words are mixed (splitmix64) first: PCGs seeded with nearby
// words start with correlated outputs.
func newRand(seed int64, id int) *rand.Rand {
	a := splitmix64(uint64(seed))
	return rand.New(rand.NewPCG(a, splitmix64(a^uint64(id))))
}

// splitmix64 is the output function of the SplitMix64 generator.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// setKeyName returns the name of the key of the SET with request number seq.
func (w *worker) setKeyName(seq int64) []byte {
	b := append(w.prefix[:len(w.prefix):len(w.prefix)], "k_"...)
	b = strconv.AppendInt(b, int64(w.id), 10)
	b = append(b, '_')
	return strconv.AppendInt(b, seq, 10)
}

// run opens the connections, sets up the keys and runs batches until the
// quota is sent, stopAt (if not zero) has passed, ctx is done or the
// connection fails.
func (w *worker) run(ctx context.Context, stopAt time.Time) {
	defer w.close()
	stop := context.AfterFunc(ctx, w.unblock)
	defer stop()
	if err := w.setup(ctx); err != nil {
		w.fail(ctx, "set-up", err)
		return
	}
	for w.seq < w.quota {
		if !stopAt.IsZero() && time.Now().After(stopAt) {
			return
		}
		if err := w.setDeadline(time.Now().Add(w.o.Timeout)); err != nil {
			w.fail(ctx, "set deadline", err)
			return
		}
		// After the deadline is set: a cancellation from now on moves it
		// into the past (unblock).
		if ctx.Err() != nil {
			w.interrupted = true
			return
		}
		w.buildBatch()
		if err := w.exchange(); err != nil {
			if errors.Is(err, errProtocol) && ctx.Err() == nil {
				return // counted as a mismatch where it was read
			}
			w.fail(ctx, fmt.Sprintf("batch of %d ending with request %d", len(w.batch), w.seq), err)
			return
		}
		w.deleting = w.deleting[:0]
	}
}

// fail ends the worker after err: a connection error, or only interrupted
// when ctx is done.
func (w *worker) fail(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		w.interrupted = true
		return
	}
	w.connErrors++
	w.rec.connError(fmt.Sprintf("conn %d: %s: %v", w.id, what, err))
}

// unblock makes the reads and writes in flight on the connections fail at
// once; ctx's AfterFunc calls it on any goroutine.
func (w *worker) unblock() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn != nil {
		_ = w.setDeadline(time.Unix(1, 0))
	}
}

// setDeadline sets the deadline of the connection and the subscriber.
// Called by the worker's goroutine once they are open, or under w.mu.
func (w *worker) setDeadline(t time.Time) error {
	err := w.conn.SetDeadline(t)
	if w.sub != nil {
		err = errors.Join(err, w.sub.SetDeadline(t))
	}
	return err
}

// close closes the connections that were opened.
func (w *worker) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range []net.Conn{w.conn, w.sub} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// dial opens one connection to the target, bounded by o.Timeout and ctx.
func dial(ctx context.Context, o *Options) (net.Conn, error) {
	return respconn.DialNet(ctx, o.Target, o.Timeout, o.TLS)
}

// setup opens the connection (and the subscriber), deletes the
// connection's fixed keys, sets the counter to its base and subscribes.
// Any failure, unexpected replies included, is returned, to be counted as
// a connection error: the checks have not started.
func (w *worker) setup(ctx context.Context) error {
	conn, err := dial(ctx, w.o)
	if err != nil {
		return err
	}
	var sub net.Conn
	if w.o.PubSub {
		if sub, err = dial(ctx, w.o); err != nil {
			_ = conn.Close()
			return err
		}
	}
	w.mu.Lock()
	w.conn, w.sub = conn, sub
	w.mu.Unlock()
	w.connected = true
	if err := w.setDeadline(time.Now().Add(w.o.Timeout)); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	w.br = bufio.NewReaderSize(conn, readBuffer)

	// Delete what an earlier run with the same KeyPrefix may have left
	// (one key per DEL, for proxies that do not split multi-key DELs) and
	// start the counter at its base.
	var reqs [][]byte
	for _, k := range [][]byte{w.ctrKey, w.strKey, w.listKey, w.hashKey} {
		reqs = append(reqs, appendCommand(nil, []byte("DEL"), k))
	}
	reqs = append(reqs, appendCommand(nil, []byte("SET"), w.ctrKey, strconv.AppendInt(nil, w.counter, 10)))
	if _, err := conn.Write(bytes.Join(reqs, nil)); err != nil {
		return err
	}
	for i, req := range reqs {
		raw, err := readReply(w.br, w.buf[:0])
		w.buf = raw
		if err != nil {
			return err
		}
		if last := i == len(reqs)-1; !last && raw[0] != resp.TypeInteger || last && string(raw) != "+OK\r\n" {
			return fmt.Errorf("unexpected reply %s to %s", show(raw), showCommand(req))
		}
	}
	if sub == nil {
		return nil
	}
	w.subr = bufio.NewReaderSize(sub, readBuffer)
	req := appendCommand(nil, []byte("SUBSCRIBE"), w.chanK)
	if _, err := sub.Write(req); err != nil {
		return err
	}
	want := appendArrayHeader(nil, 3)
	want = appendBulkString(want, "subscribe")
	want = appendBulk(want, w.chanK)
	want = appendInt(want, 1)
	raw, err := readReply(w.subr, w.buf[:0])
	w.buf = raw
	if err != nil {
		return err
	}
	if !bytes.Equal(raw, want) {
		return fmt.Errorf("SUBSCRIBE %s: expected %s, got %s (does the target support pub/sub?)", w.chanK, show(want), show(raw))
	}
	return nil
}

// appendCommand appends args as a RESP array of bulk strings.
func appendCommand(dst []byte, args ...[]byte) []byte {
	dst = appendArrayHeader(dst, len(args))
	for _, a := range args {
		dst = appendBulk(dst, a)
	}
	return dst
}

// begin starts the next request: the caller appends the request's bytes
// to w.out and the predicted reply's to w.exp, then passes the offsets
// begin returns to end.
func (w *worker) begin() (reqStart, wantStart int) {
	w.seq++
	return len(w.out), len(w.exp)
}

// end records the request begun at reqStart, a k, with its prediction
// from wantStart, in the batch, and returns its entry.
func (w *worker) end(k kind, reqStart, wantStart int) *expect {
	w.kinds[k]++
	w.batch = append(w.batch, expect{
		kind: k, seq: w.seq,
		reqStart: reqStart, reqEnd: len(w.out),
		wantStart: wantStart, wantEnd: len(w.exp),
	})
	return &w.batch[len(w.batch)-1]
}

// value returns a new value unique in the run: tag, connection, request
// number and index, then random padding.
func (w *worker) value(tag byte, idx int, binaryOK bool) []byte {
	pad := w.rng.IntN(smallPad + 1)
	if w.rng.IntN(bigValueEvery) == 0 {
		pad = 1 + w.rng.IntN(maxValue)
	}
	alphabet := textAlphabet
	if binaryOK && w.rng.IntN(4) == 0 {
		alphabet = binaryAlphabet
	}
	v := make([]byte, 0, 32+pad)
	v = append(v, tag)
	v = strconv.AppendInt(v, int64(w.id), 10)
	v = append(v, '.')
	v = strconv.AppendInt(v, w.seq, 10)
	if idx >= 0 {
		v = append(v, '.')
		v = strconv.AppendInt(v, int64(idx), 10)
	}
	v = append(v, ':')
	for range pad {
		v = append(v, alphabet[w.rng.IntN(len(alphabet))])
	}
	return v
}

// buildBatch builds the next batch: its requests in w.out, their
// predictions in w.batch and w.exp.
func (w *worker) buildBatch() {
	w.out, w.exp, w.batch = w.out[:0], w.exp[:0], w.batch[:0]
	depth := int64(1 + w.rng.IntN(w.o.MaxDepth))
	depth = min(depth, w.quota-w.seq)
	pubAt := int64(-1)
	if w.o.PubSub && w.rng.IntN(pubEvery) == 0 {
		pubAt = w.rng.Int64N(depth)
	}
	for i := range depth {
		if i == pubAt {
			w.addPublish()
		} else {
			w.addRequest()
		}
	}
}

// addRequest adds one request drawn from the mix (weights out of 32).
func (w *worker) addRequest() {
	if len(w.read) >= delEvery {
		w.addDelKeys()
		return
	}
	switch r := w.rng.IntN(32); {
	case r < 5:
		w.addSet()
	case r < 11:
		w.addGet()
	case r < 14:
		w.addIncr()
	case r < 17:
		w.addAppend()
	case r < 20:
		w.addLPush()
	case r < 22:
		w.addLRange()
	case r < 25:
		w.addHSet()
	case r < 27:
		w.addHGetAll()
	case r < 29:
		w.addEval()
	case r < 30:
		w.addEvalError()
	default:
		w.addEcho()
	}
}

// addSet: SET k_<conn>_<seq> <unique> → +OK.
func (w *worker) addSet() {
	rs, ws := w.begin()
	v := w.value('s', -1, true)
	w.out = appendCommand(w.out, []byte("SET"), w.setKeyName(w.seq), v)
	w.exp = append(w.exp, "+OK\r\n"...)
	w.unread = append(w.unread, setKey{seq: w.seq, value: v})
	w.end(kSet, rs, ws)
}

// addGet: GET of a key set earlier and not read yet → its value. Each key
// is read once, so each GET's reply is unique. Without such a key, SET.
func (w *worker) addGet() {
	if len(w.unread) == 0 {
		w.addSet()
		return
	}
	i := w.rng.IntN(len(w.unread))
	k := w.unread[i]
	w.unread[i] = w.unread[len(w.unread)-1]
	w.unread = w.unread[:len(w.unread)-1]
	w.read = append(w.read, k.seq)
	rs, ws := w.begin()
	w.out = appendCommand(w.out, []byte("GET"), w.setKeyName(k.seq))
	w.exp = appendBulk(w.exp, k.value)
	w.end(kGet, rs, ws)
}

// addDelKeys: DEL of the keys read → their number.
func (w *worker) addDelKeys() {
	rs, ws := w.begin()
	w.out = appendArrayHeader(w.out, 1+len(w.read))
	w.out = appendBulkString(w.out, "DEL")
	for _, seq := range w.read {
		w.out = appendBulk(w.out, w.setKeyName(seq))
	}
	w.exp = appendInt(w.exp, int64(len(w.read)))
	w.deleting = append(w.deleting, w.read...)
	w.read = w.read[:0]
	w.end(kDelKeys, rs, ws)
}

// addIncr: INCR of the connection's counter → the next integer.
func (w *worker) addIncr() {
	rs, ws := w.begin()
	w.counter++
	w.out = appendCommand(w.out, []byte("INCR"), w.ctrKey)
	w.exp = appendInt(w.exp, w.counter)
	w.end(kIncr, rs, ws)
}

// addAppend: APPEND of a unique chunk → the new length.
func (w *worker) addAppend() {
	rs, ws := w.begin()
	if w.strLen > w.maxStr {
		w.out = appendCommand(w.out, []byte("DEL"), w.strKey)
		w.exp = appendInt(w.exp, 1)
		w.strLen = 0
		w.end(kDelString, rs, ws)
		return
	}
	v := w.value('a', -1, true)
	w.strLen += int64(len(v))
	w.out = appendCommand(w.out, []byte("APPEND"), w.strKey, v)
	w.exp = appendInt(w.exp, w.strLen)
	w.end(kAppend, rs, ws)
}

// addLPush: LPUSH of 1..3 unique elements → the new length.
func (w *worker) addLPush() {
	rs, ws := w.begin()
	if w.listLen >= w.maxList {
		w.out = appendCommand(w.out, []byte("LTRIM"), w.listKey, []byte("0"), []byte("2"))
		w.exp = append(w.exp, "+OK\r\n"...)
		w.listLen = int64(len(w.newest))
		w.end(kLTrim, rs, ws)
		return
	}
	n := 1 + w.rng.IntN(3)
	w.out = appendArrayHeader(w.out, 2+n)
	w.out = appendBulkString(w.out, "LPUSH")
	w.out = appendBulk(w.out, w.listKey)
	pushed := make([][]byte, 0, n+len(w.newest))
	for i := range n {
		v := w.value('l', i, true)
		w.out = appendBulk(w.out, v)
		pushed = append(pushed, v)
	}
	w.listLen += int64(n)
	// Each element goes to the head: the last pushed is first.
	for i, j := 0, len(pushed)-1; i < j; i, j = i+1, j-1 {
		pushed[i], pushed[j] = pushed[j], pushed[i]
	}
	w.newest = append(pushed, w.newest...)[:min(3, len(pushed)+len(w.newest))]
	w.listDirty = true
	w.exp = appendInt(w.exp, w.listLen)
	w.end(kLPush, rs, ws)
}

// addLRange: LRANGE 0 2 → the 3 newest elements, if the list changed since
// the last LRANGE; LPUSH otherwise.
func (w *worker) addLRange() {
	if !w.listDirty {
		w.addLPush()
		return
	}
	rs, ws := w.begin()
	w.out = appendCommand(w.out, []byte("LRANGE"), w.listKey, []byte("0"), []byte("2"))
	w.exp = appendArrayHeader(w.exp, len(w.newest))
	for _, v := range w.newest {
		w.exp = appendBulk(w.exp, v)
	}
	w.listDirty = false
	w.end(kLRange, rs, ws)
}

// addHSet: HSET of 1..3 new unique fields → their number; every
// hashRotate-th time DEL of the hash → :1 instead.
func (w *worker) addHSet() {
	rs, ws := w.begin()
	if w.hashSets >= hashRotate {
		w.out = appendCommand(w.out, []byte("DEL"), w.hashKey)
		w.exp = appendInt(w.exp, 1)
		w.hashFields, w.hashSets, w.hashDirty = w.hashFields[:0], 0, false
		w.end(kDelHash, rs, ws)
		return
	}
	n := 1 + w.rng.IntN(3)
	w.out = appendArrayHeader(w.out, 2+2*n)
	w.out = appendBulkString(w.out, "HSET")
	w.out = appendBulk(w.out, w.hashKey)
	for i := range n {
		f, v := w.value('f', i, true), w.value('h', i, true)
		w.out = appendBulk(appendBulk(w.out, f), v)
		w.hashFields = append(w.hashFields, f, v)
	}
	w.hashSets++
	w.hashDirty = true
	w.exp = appendInt(w.exp, int64(n))
	w.end(kHSet, rs, ws)
}

// addHGetAll: HGETALL → exactly the fields set, in any order, if the hash
// changed since the last HGETALL; HSET otherwise.
func (w *worker) addHGetAll() {
	if !w.hashDirty {
		w.addHSet()
		return
	}
	rs, ws := w.begin()
	w.out = appendCommand(w.out, []byte("HGETALL"), w.hashKey)
	w.exp = appendArrayHeader(w.exp, len(w.hashFields))
	for _, b := range w.hashFields {
		w.exp = appendBulk(w.exp, b)
	}
	w.hashDirty = false
	w.end(kHGetAll, rs, ws).fieldMapResult = true
}

// addEval: EVAL "return ARGV[1]" 0 <unique> → the same bulk.
func (w *worker) addEval() {
	rs, ws := w.begin()
	v := w.value('v', -1, true)
	w.out = appendCommand(w.out, []byte("EVAL"), []byte(scriptEcho), []byte("0"), v)
	w.exp = appendBulk(w.exp, v)
	w.end(kEval, rs, ws)
}

// addEvalError: EVAL "return redis.error_reply(ARGV[1])" 0 "ERR rmcheck
// <unique>" → that error reply, an expected one.
func (w *worker) addEvalError() {
	rs, ws := w.begin()
	msg := append([]byte("ERR rmcheck "), w.value('x', -1, false)...)
	w.out = appendCommand(w.out, []byte("EVAL"), []byte(scriptError), []byte("0"), msg)
	w.exp = append(w.exp, '-')
	w.exp = append(w.exp, msg...)
	w.exp = append(w.exp, '\r', '\n')
	w.end(kEvalError, rs, ws)
}

// addEcho: ECHO <unique> → the same bulk.
func (w *worker) addEcho() {
	rs, ws := w.begin()
	v := w.value('e', -1, true)
	w.out = appendCommand(w.out, []byte("ECHO"), v)
	w.exp = appendBulk(w.exp, v)
	w.end(kEcho, rs, ws)
}

// addPublish: PUBLISH <own channel> <unique> → :1, and the subscriber
// receives exactly ["message", channel, <unique>].
func (w *worker) addPublish() {
	rs, ws := w.begin()
	v := w.value('p', -1, true)
	w.out = appendCommand(w.out, []byte("PUBLISH"), w.chanK, v)
	w.exp = appendInt(w.exp, 1)
	ps := len(w.exp)
	w.exp = appendArrayHeader(w.exp, 3)
	w.exp = appendBulkString(w.exp, "message")
	w.exp = appendBulk(w.exp, w.chanK)
	w.exp = appendBulk(w.exp, v)
	e := w.end(kPublish, rs, ws)
	e.wantEnd = ps
	e.pubStart, e.pubEnd = ps, len(w.exp)
}

// exchange writes the batch, reads and checks its replies, then the
// messages published to the subscriber. It returns the first read or
// write error; an error wrapping errProtocol has been counted as a
// mismatch.
func (w *worker) exchange() error {
	var werr chan error
	if len(w.out) > asyncWrite {
		werr = make(chan error, 1)
		out := w.out
		go func() {
			_, err := w.conn.Write(out)
			werr <- err
		}()
	} else if _, err := w.conn.Write(w.out); err != nil {
		return err
	}
	rerr := w.readReplies()
	if werr != nil {
		// The deadline bounds the write; after a read error the caller
		// closes the connection.
		if err := <-werr; rerr == nil {
			rerr = err
		}
	}
	if rerr != nil {
		return rerr
	}
	for i := range w.batch {
		e := &w.batch[i]
		if !e.published {
			continue
		}
		raw, err := readReply(w.subr, w.buf[:0])
		w.buf = raw
		if err != nil {
			if errors.Is(err, errProtocol) {
				w.mismatch(e, "subscriber: ", w.exp[e.pubStart:e.pubEnd], raw)
			}
			return fmt.Errorf("subscriber: %w", err)
		}
		if !bytes.Equal(raw, w.exp[e.pubStart:e.pubEnd]) {
			w.mismatch(e, "subscriber: ", w.exp[e.pubStart:e.pubEnd], raw)
		}
	}
	return nil
}

// readReplies reads and checks the replies of the batch.
func (w *worker) readReplies() error {
	for i := range w.batch {
		e := &w.batch[i]
		want := w.exp[e.wantStart:e.wantEnd]
		raw, err := readReply(w.br, w.buf[:0])
		w.buf = raw
		if err != nil {
			if errors.Is(err, errProtocol) {
				w.mismatch(e, "", want, raw)
			}
			return err
		}
		w.commands++
		if raw[0] == resp.TypeError {
			w.errorReplies++
		}
		switch {
		case bytes.Equal(raw, want):
			e.published = e.kind == kPublish
		case e.fieldMapResult && sameFieldMap(want, raw):
		default:
			w.mismatch(e, "", want, raw)
		}
	}
	return nil
}

// mismatch counts a mismatch on request e and offers its description.
func (w *worker) mismatch(e *expect, where string, want, got []byte) {
	w.mismatches++
	if key, ok := requestKey(w.out[e.reqStart:e.reqEnd]); ok && where == "" {
		slot, at := hashslot.Slot(key), time.Since(w.start)
		sm := w.slots[slot]
		if sm == nil {
			if w.slots == nil {
				w.slots = map[uint16]*SlotMismatches{}
			}
			sm = &SlotMismatches{Slot: slot, First: at}
			w.slots[slot] = sm
		}
		sm.Mismatches++
		sm.Last = at
	}
	w.rec.mismatch(func() string {
		return fmt.Sprintf("conn %d, request %d (%s): %sexpected %s, got %s",
			w.id, e.seq, showCommand(w.out[e.reqStart:e.reqEnd]), where, show(want), show(got))
	})
}

// keys returns every key the worker may have created.
func (w *worker) keys() [][]byte {
	ks := [][]byte{w.ctrKey, w.strKey, w.listKey, w.hashKey}
	for _, k := range w.unread {
		ks = append(ks, w.setKeyName(k.seq))
	}
	for _, seq := range w.read {
		ks = append(ks, w.setKeyName(seq))
	}
	for _, seq := range w.deleting {
		ks = append(ks, w.setKeyName(seq))
	}
	return ks
}
