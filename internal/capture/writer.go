package capture

import (
	"encoding/binary"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/respmeter/respmeter/internal/resp"
)

// Options configures a capture.
type Options struct {
	// Loops is the number of per-loop buffers (one per event loop); at
	// least 1.
	Loops int
	// Base is the caller's clock reading (ns) at the capture start: the
	// t of every record is the now passed to a Buf method minus Base.
	Base int64
	// Sample is the fraction (0, 1] of connections captured, chosen by
	// connection id; 0 means 1.
	Sample float64
	// RedactValues replaces request values (not command names, keys,
	// option keywords or sizes) by filler of the same length (see
	// RedactValues).
	RedactValues bool
	// BufferBytes bounds each loop's buffer of records not yet written; a
	// record that does not fit is dropped and counted. 0 means 4 MiB.
	BufferBytes int
	// FlushEvery is how often the writer drains the buffers and ends a
	// Zstandard frame, so that the file is readable up to then; it drains
	// sooner when a buffer is half full. 0 means 1 s.
	FlushEvery time.Duration
}

// Stats is a capture's progress.
type Stats struct {
	File    string `json:"file"`
	Running bool   `json:"running"`
	// Bytes is the size of the file written so far (compressed), Raw the
	// decompressed record bytes.
	Bytes   int64  `json:"bytes"`
	Raw     int64  `json:"raw_bytes"`
	Records int64  `json:"records"`
	Dropped uint64 `json:"dropped"`
	Err     string `json:"error,omitempty"`
}

// Capture is a running capture: per-loop buffers the event loops append
// records to, drained by one writer goroutine into the file.
type Capture struct {
	opt    Options
	path   string
	f      *os.File
	enc    *zstd.Encoder
	bufs   []Buf
	conns  atomic.Uint64
	cut    uint64 // connection ids below cut are sampled (of 2^64)
	stop   chan struct{}
	kick   chan struct{} // a buffer is half full: drain now
	done   chan struct{}
	once   sync.Once
	bytes  atomic.Int64
	raw    atomic.Int64
	recs   atomic.Int64
	errMu  sync.Mutex
	err    error
	redact redactor
}

// Buf is one event loop's buffer of records. Its methods are called by
// that loop only; they never block on the file (a mutex shared with the
// writer's buffer swap only) and allocate nothing once the buffer has
// grown to its bound.
type Buf struct {
	c       *Capture
	mu      sync.Mutex
	b       []byte
	closed  bool
	kicked  bool // the writer was told this buffer is half full
	dropped atomic.Uint64
	_       [64]byte // keep loops' buffers on separate cache lines
}

// Start creates path (mode 0600; it must not exist) and starts capturing
// into it. The caller passes records through Loop(i).
func Start(path string, o Options) (*Capture, error) {
	if o.Loops < 1 {
		o.Loops = 1
	}
	if o.Sample <= 0 || o.Sample > 1 {
		o.Sample = 1
	}
	if o.BufferBytes <= 0 {
		o.BufferBytes = 4 << 20
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = time.Second
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	h := Header{Version: Version, Start: time.Now().UnixNano()}
	if o.RedactValues {
		h.Flags |= FlagValuesRedacted
	}
	hb := appendHeader(nil, h)
	if _, err := f.Write(hb); err != nil {
		_ = f.Close()
		return nil, err
	}
	enc, err := zstd.NewWriter(f, encoderOptions()...)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	c := &Capture{opt: o, path: path, f: f, enc: enc, bufs: make([]Buf, o.Loops),
		stop: make(chan struct{}), kick: make(chan struct{}, 1), done: make(chan struct{}),
		redact: redactor{values: o.RedactValues}}
	c.cut = ^uint64(0)
	if o.Sample < 1 {
		c.cut = uint64(o.Sample * (1 << 63) * 2)
	}
	c.bytes.Store(int64(len(hb)))
	for i := range c.bufs {
		c.bufs[i].c = c
		c.bufs[i].b = make([]byte, 0, o.BufferBytes)
	}
	go c.run()
	return c, nil
}

// encoderOptions returns how the writer compresses: the fastest level on one
// goroutine, literals stored as they are (no Huffman coding) and a 64 KiB
// window (so 64 KiB blocks). Against a 1 MiB window with Huffman-coded
// literals this takes about 0.6-0.7x the encoder's CPU per byte on records
// of redis-benchmark and of BenchmarkCaptureHotPath (the encoder alone, both
// inputs, side by side; BENCHMARKS.md) for files about 1.25x as
// large. The content checksum stays: it is what tells a corrupt literal
// from a request.
func encoderOptions() []zstd.EOption {
	return []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(64 << 10), zstd.WithNoEntropyCompression(true)}
}

// Loop returns the buffer of event loop i (taken modulo Options.Loops).
func (c *Capture) Loop(i int) *Buf { return &c.bufs[i%len(c.bufs)] }

// NewConn returns a new connection id and whether that connection is
// sampled (Options.Sample).
func (c *Capture) NewConn() (id uint64, sampled bool) {
	id = c.conns.Add(1)
	return id, c.cut == ^uint64(0) || mix(id) < c.cut
}

// mix is SplitMix64's finalizer: sequential ids spread over 2^64.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// begin reserves room for a record with a body of at most max bytes and
// starts it: it returns the record's start, or -1 when it is dropped
// (full or closed; counted unless closed). The caller appends the body
// and calls end.
func (b *Buf) begin(max int) int {
	hdr := 1 + uvarintLen(uint64(max))
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return -1
	}
	if len(b.b)+hdr+max > cap(b.b) {
		b.mu.Unlock()
		b.dropped.Add(1)
		return -1
	}
	at := len(b.b)
	b.b = b.b[:at+hdr]
	if !b.kicked && at > cap(b.b)/2 {
		// Wake the writer rather than wait for its tick: the buffer holds
		// bursts above BufferBytes per FlushEvery without drops.
		b.kicked = true
		select {
		case b.c.kick <- struct{}{}:
		default:
		}
	}
	return at
}

// head is begin for a 'B', 'G' or 'I' record: it also appends the three
// varints that start the body (conn, t, a request number).
func (b *Buf) head(max int, conn, t, seq uint64) int {
	at := b.begin(max)
	if at >= 0 {
		b.b = binary.AppendUvarint(b.b, conn)
		b.b = binary.AppendUvarint(b.b, t)
		b.b = binary.AppendUvarint(b.b, seq)
	}
	return at
}

// end writes the record's kind and length in front of the body appended
// since begin returned at, and unlocks.
func (b *Buf) end(kind byte, at, max int) {
	hdr := 1 + uvarintLen(uint64(max))
	body := len(b.b) - at - hdr
	b.b[at] = kind
	n := binary.PutUvarint(b.b[at+1:], uint64(body))
	if 1+n < hdr {
		// Room was left for the longest length the body could have: move
		// the body down to follow the real one (only bodies near a
		// power of 128 bytes).
		copy(b.b[at+1+n:], b.b[at+hdr:])
		b.b = b.b[:at+1+n+body]
	}
	b.mu.Unlock()
}

// uvarintLen is the size of x as an unsigned LEB128 varint.
func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func (b *Buf) t(now int64) uint64 { return uint64(max(now-b.c.opt.Base, 0)) }

// Conn records a connection first seen by this capture, with the
// requests that set its state (concatenated RESP frames, may be empty).
func (b *Buf) Conn(conn uint64, now int64, state []byte) {
	room := 2*binary.MaxVarintLen64 + len(state)
	at := b.begin(room)
	if at < 0 {
		return
	}
	b.b = binary.AppendUvarint(b.b, conn)
	b.b = binary.AppendUvarint(b.b, b.t(now))
	b.b = append(b.b, state...)
	b.end(KindConn, at, room)
}

// Batch records the requests (complete RESP frames) read in one read of
// connection conn at now, the first numbered first. clean tells the
// writer that the caller knows no request of reqs can carry a credential
// (none is an inline request or an AUTH, HELLO, MIGRATE, CONFIG or ACL
// command; see redactor): it writes the batch as it is, without scanning
// it again. Without Options.RedactValues only; false is always safe.
func (b *Buf) Batch(conn uint64, now int64, first uint64, reqs []byte, clean bool) {
	room := 3*binary.MaxVarintLen64 + len(reqs)
	at := b.head(room, conn, b.t(now), first)
	if at < 0 {
		return
	}
	b.b = append(b.b, reqs...)
	kind := KindBatch
	if clean && !b.c.opt.RedactValues {
		kind = kindCleanBatch
	}
	b.end(kind, at, room)
}

// KeyedBatch is Batch for a capture with Options.RedactValues (RedactsValues):
// keys tells, for each request of reqs that has arguments, in order, where
// its keys are (AppendKeyPos), so that value redaction keeps them. The
// caller found the keys when it routed the requests; the writer does not
// look the commands up again. A plain Batch under RedactValues keeps no
// argument as a key.
func (b *Buf) KeyedBatch(conn uint64, now int64, first uint64, reqs, keys []byte) {
	room := 4*binary.MaxVarintLen64 + len(keys) + len(reqs)
	at := b.head(room, conn, b.t(now), first)
	if at < 0 {
		return
	}
	b.b = binary.AppendUvarint(b.b, uint64(len(keys)))
	b.b = append(b.b, keys...)
	b.b = append(b.b, reqs...)
	b.end(kindKeyedBatch, at, room)
}

// RedactsValues reports whether the capture redacts values
// (Options.RedactValues): its batches then want KeyedBatch.
func (c *Capture) RedactsValues() bool { return c.opt.RedactValues }

// AppendKeyPos appends to dst the entry of one request for KeyedBatch:
// its number of arguments (the command name included), the number of
// keys found, and each key's position in args (the name at 0). keys are
// the request's keys as aliases of its arguments (routing.Call.Keys); a
// key that aliases none of them (or an empty one) is left out, and its
// argument is then redacted as a value. The writer ignores an entry whose
// argument count is not its request's, and keeps no key for it.
func AppendKeyPos(dst []byte, args, keys [][]byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(args)))
	at := len(dst)
	dst = append(dst, 0) // the count, set below (at most 127 in this byte)
	n, i := 0, 1
	for _, k := range keys {
		if len(k) == 0 {
			continue
		}
		// Keys come in argument order (key specs walk forward); a key
		// behind i is looked for from the start.
		j := findArg(args, k, i)
		if j < 0 {
			j = findArg(args, k, 1)
		}
		if j < 0 {
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(j))
		n++
		i = j + 1
	}
	if n < 0x80 {
		dst[at] = byte(n)
		return dst
	}
	// More than 127 keys: the count takes more bytes; rebuild the entry.
	pos := append([]byte(nil), dst[at+1:]...)
	dst = binary.AppendUvarint(dst[:at], uint64(n))
	return append(dst, pos...)
}

// findArg returns the index from from on of the argument that k aliases,
// or -1.
func findArg(args [][]byte, k []byte, from int) int {
	for j := from; j < len(args); j++ {
		if len(args[j]) > 0 && &args[j][0] == &k[0] {
			return j
		}
	}
	return -1
}

// Reply records the reply to request seq of conn, ready at now: reply is
// its bytes (nil with streamed: they went to the client piece by piece),
// total and upstream its phases in ns. It writes a KindReplies record of
// one reply; Replies groups several.
func (b *Buf) Reply(conn, seq uint64, now int64, reply []byte, streamed bool, total, upstream int64) {
	room := 3*binary.MaxVarintLen64 + maxReplyEntry
	at := b.head(room, conn, b.t(now), seq)
	if at < 0 {
		return
	}
	b.b = appendReplyEntry(b.b, false, 0, 0, reply, streamed, total, upstream)
	b.end(KindReplies, at, room)
}

// Injected records that a fault injection rule named rule touched request
// seq of conn, read at now: its effect and the time it injected (ns; see
// the 'I' record in the package doc).
func (b *Buf) Injected(conn, seq uint64, now int64, rule, effect string, ns int64) {
	effect = effect[:min(len(effect), 255)]
	room := 4*binary.MaxVarintLen64 + 1 + len(effect) + len(rule)
	at := b.head(room, conn, b.t(now), seq)
	if at < 0 {
		return
	}
	b.b = binary.AppendUvarint(b.b, uint64(max(ns, 0)))
	b.b = append(b.b, byte(len(effect)))
	b.b = append(b.b, effect...)
	b.b = append(b.b, rule...)
	b.end(KindInjected, at, room)
}

// Replies records the replies g gathered for connection conn as one
// KindReplies record, and empties g. Nothing is written when g is empty.
func (b *Buf) Replies(conn uint64, g *Replies) {
	if len(g.b) == 0 {
		return
	}
	room := 3*binary.MaxVarintLen64 + len(g.b)
	if at := b.head(room, conn, b.t(g.t0), g.seq); at >= 0 {
		b.b = append(b.b, g.b...)
		b.end(KindReplies, at, room)
	}
	g.Reset()
}

// Replies gathers the replies of one connection (those its event loop
// finishes in one pass, typically a pipeline's) for Buf.Replies: one record
// and one lock of the Buf for all of them instead of one per reply. Owned
// by the goroutine that calls Add (the connection's event loop); the zero
// value is empty and ready; it allocates only while growing to the largest
// group it has held.
type Replies struct {
	b    []byte // the encoded entries
	seq  uint64 // the first reply's request number
	last uint64 // the last reply's
	t0   int64  // the first reply's now
}

// Add gathers the reply to request seq, ready at now (arguments as
// Buf.Reply's).
func (g *Replies) Add(seq uint64, now int64, reply []byte, streamed bool, total, upstream int64) {
	more := len(g.b) > 0
	if !more {
		g.seq, g.last, g.t0 = seq, seq, now
	}
	// seq - g.last wraps for a number lower than the last; the reader's
	// sum wraps back (modulo 2^64).
	g.b = appendReplyEntry(g.b, more, seq-g.last, uint64(max(now-g.t0, 0)), reply, streamed, total, upstream)
	g.last = seq
}

// Len is the size in bytes of the entries gathered so far.
func (g *Replies) Len() int { return len(g.b) }

// Reset drops the replies gathered.
func (g *Replies) Reset() { g.b = g.b[:0] }

// maxReplyEntry bounds an encoded reply entry: five varints, type and
// flags, the hash, the prefix's length and the prefix.
const maxReplyEntry = 5*binary.MaxVarintLen64 + 2 + 8 + 1 + maxErrPrefix

// appendReplyEntry appends one reply of a KindReplies record (see the
// package doc for its layout): with more, a reply after the first, which
// starts with its seq delta and dt.
func appendReplyEntry(dst []byte, more bool, seqDelta, dt uint64, reply []byte, streamed bool, total, upstream int64) []byte {
	var typ, flags byte
	var h uint64
	if streamed {
		flags = ReplyStreamed
	} else if len(reply) > 0 {
		typ = reply[0]
		h = xxhash.Sum64(reply)
	}
	pfx := ErrPrefix(reply)
	if more {
		dst = binary.AppendUvarint(dst, seqDelta)
		dst = binary.AppendUvarint(dst, dt)
	}
	dst = append(dst, typ, flags)
	dst = binary.AppendUvarint(dst, uint64(len(reply)))
	dst = binary.LittleEndian.AppendUint64(dst, h)
	dst = binary.AppendUvarint(dst, uint64(max(total, 0)))
	dst = binary.AppendUvarint(dst, uint64(max(upstream, 0)))
	dst = append(dst, byte(len(pfx)))
	return append(dst, pfx...)
}

// ErrPrefix returns the first word of an error reply ("-WRONGTYPE ..." ->
// "WRONGTYPE"; RESP3 blob errors "!n\r\nWORD ..." too), at most 32 bytes,
// or nil when reply is not an error. It aliases reply.
func ErrPrefix(reply []byte) []byte {
	if len(reply) == 0 {
		return nil
	}
	var r []byte
	switch reply[0] {
	case resp.TypeError:
		r = reply[1:]
	case resp.TypeBlobError:
		i := 0
		for i < len(reply) && reply[i] != '\n' {
			i++
		}
		if i >= len(reply) {
			return nil
		}
		r = reply[i+1:]
	default:
		return nil
	}
	n := 0
	for n < len(r) && n < maxErrPrefix && r[n] != ' ' && r[n] != '\r' && r[n] != '\n' {
		n++
	}
	return r[:n]
}

// Summarize returns the summary of a complete reply, as Buf.Reply records
// it.
func Summarize(reply []byte) Summary {
	s := Summary{Size: int64(len(reply)), ErrPfx: string(ErrPrefix(reply))}
	if len(reply) > 0 {
		s.Type, s.Hash = reply[0], xxhash.Sum64(reply)
	}
	return s
}

// Stats returns the capture's progress.
func (c *Capture) Stats() Stats {
	s := Stats{File: c.path, Bytes: c.bytes.Load(), Raw: c.raw.Load(), Records: c.recs.Load()}
	select {
	case <-c.done:
	default:
		s.Running = true
	}
	for i := range c.bufs {
		s.Dropped += c.bufs[i].dropped.Load()
	}
	c.errMu.Lock()
	if c.err != nil {
		s.Err = c.err.Error()
	}
	c.errMu.Unlock()
	return s
}

// Done is closed once the capture has stopped and its file is closed.
func (c *Capture) Done() <-chan struct{} { return c.done }

// Stop ends the capture: records buffered so far are written, the last
// frame ended and the file closed. It returns the first write error, if
// any; calling it again returns the same.
func (c *Capture) Stop() error {
	c.once.Do(func() { close(c.stop) })
	<-c.done
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// run is the writer goroutine.
func (c *Capture) run() {
	defer close(c.done)
	tick := time.NewTicker(c.opt.FlushEvery)
	defer tick.Stop()
	spare := make([][]byte, len(c.bufs))
	for i := range spare {
		spare[i] = make([]byte, 0, c.opt.BufferBytes)
	}
	var out []byte
	drain := func(last bool) {
		wrote := false
		for i := range c.bufs {
			b := &c.bufs[i]
			b.mu.Lock()
			got := b.b
			b.b = spare[i][:0]
			b.kicked = false
			if last {
				b.closed = true
			}
			b.mu.Unlock()
			spare[i] = got
			if len(got) == 0 || c.failed() {
				continue
			}
			raw, n, err := c.write(got, &out)
			c.raw.Add(raw)
			c.recs.Add(n)
			wrote = wrote || raw > 0
			if err != nil {
				c.fail(err)
			}
		}
		if wrote && !last && !c.failed() {
			// End the frame: a reader gets everything up to here.
			if err := c.enc.Close(); err != nil {
				c.fail(err)
			}
			c.enc.Reset(c.f)
		}
		c.sync()
	}
	for {
		select {
		case <-tick.C:
			drain(false)
		case <-c.kick:
			drain(false)
		case <-c.stop:
			drain(true)
			if err := c.enc.Close(); err != nil {
				c.fail(err)
			}
			c.sync()
			if err := c.f.Close(); err != nil {
				c.fail(err)
			}
			return
		}
	}
}

// write compresses the records of in (whole records, as a Buf holds
// them), redacted, and returns the decompressed bytes and records written.
// Runs of records with nothing to redact (replies, and batches the event
// loop marked clean: their kind is set to KindBatch here, in place; fault
// injection marks) go to
// the encoder as they are; the others are redacted into *out first.
func (c *Capture) write(in []byte, out *[]byte) (raw, n int64, err error) {
	run := 0 // start of the run of records written as they are
	flush := func(end int) error {
		if end == run {
			return nil
		}
		_, err := c.enc.Write(in[run:end])
		raw += int64(end - run)
		return err
	}
	for i := 0; i < len(in); {
		kind := in[i]
		l, k := binary.Uvarint(in[i+1:])
		next := i + 1 + k + int(l)
		n++
		switch kind {
		case kindCleanBatch:
			in[i] = KindBatch
			fallthrough
		case KindReplies, KindInjected: // no values in them
			i = next
			continue
		}
		if err := flush(i); err != nil {
			return raw, n, err
		}
		*out = c.redact.record((*out)[:0], kind, in[i+1+k:next])
		if _, err := c.enc.Write(*out); err != nil {
			return raw, n, err
		}
		raw += int64(len(*out))
		i, run = next, next
	}
	return raw, n, flush(len(in))
}

func (c *Capture) sync() {
	if st, err := c.f.Stat(); err == nil {
		c.bytes.Store(st.Size())
	}
}

func (c *Capture) fail(err error) {
	c.errMu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.errMu.Unlock()
}

func (c *Capture) failed() bool {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err != nil
}
