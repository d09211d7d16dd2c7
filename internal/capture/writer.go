package capture

import (
	"encoding/binary"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"
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
	// KeyPos returns the positions of the keys in args (the command name
	// at 0), appended to dst; with RedactValues it tells keys from values.
	// Nil: no argument is taken for a key.
	KeyPos func(args [][]byte, dst []int) []int
	// BufferBytes bounds each loop's buffer of records not yet written; a
	// record that does not fit is dropped and counted. 0 means 4 MiB.
	BufferBytes int
	// FlushEvery is how often the writer drains the buffers and ends a
	// Zstandard frame, so that the file is readable up to then. 0 means
	// 1 s.
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
	enc, err := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(1<<20))
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	c := &Capture{opt: o, path: path, f: f, enc: enc, bufs: make([]Buf, o.Loops),
		stop: make(chan struct{}), done: make(chan struct{}),
		redact: redactor{values: o.RedactValues, keyPos: o.KeyPos}}
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

// begin reserves room for a record of kind with a body of at most max
// bytes; false: dropped (full or closed), counted unless closed.
func (b *Buf) begin(max int) bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false
	}
	if len(b.b)+max+1+binary.MaxVarintLen64 > cap(b.b) {
		b.mu.Unlock()
		b.dropped.Add(1)
		return false
	}
	return true
}

// end writes the record's kind and length in front of body bytes
// appended from at (the record start) and unlocks.
func (b *Buf) end(kind byte, at int) {
	body := len(b.b) - at - 1 - binary.MaxVarintLen64
	// The body was appended after room for the longest varint: move it
	// down to follow the real one.
	b.b[at] = kind
	n := binary.PutUvarint(b.b[at+1:], uint64(body))
	copy(b.b[at+1+n:], b.b[at+1+binary.MaxVarintLen64:])
	b.b = b.b[:at+1+n+body]
	b.mu.Unlock()
}

// open starts a record's body; the caller holds b.mu (begin).
func (b *Buf) open() int {
	at := len(b.b)
	b.b = b.b[:at+1+binary.MaxVarintLen64]
	return at
}

func (b *Buf) t(now int64) uint64 { return uint64(max(now-b.c.opt.Base, 0)) }

// Conn records a connection first seen by this capture, with the
// requests that set its state (concatenated RESP frames, may be empty).
func (b *Buf) Conn(conn uint64, now int64, state []byte) {
	if !b.begin(3*binary.MaxVarintLen64 + len(state)) {
		return
	}
	at := b.open()
	b.b = binary.AppendUvarint(b.b, conn)
	b.b = binary.AppendUvarint(b.b, b.t(now))
	b.b = append(b.b, state...)
	b.end(KindConn, at)
}

// Batch records the requests (complete RESP frames) read in one read of
// connection conn at now, the first numbered first.
func (b *Buf) Batch(conn uint64, now int64, first uint64, reqs []byte) {
	if !b.begin(3*binary.MaxVarintLen64 + len(reqs)) {
		return
	}
	at := b.open()
	b.b = binary.AppendUvarint(b.b, conn)
	b.b = binary.AppendUvarint(b.b, b.t(now))
	b.b = binary.AppendUvarint(b.b, first)
	b.b = append(b.b, reqs...)
	b.end(KindBatch, at)
}

// Reply records the reply to request seq of conn, ready at now: reply is
// its bytes (nil with streamed: they went to the client piece by piece),
// total and upstream its phases in ns.
func (b *Buf) Reply(conn, seq uint64, now int64, reply []byte, streamed bool, total, upstream int64) {
	var typ, flags byte
	var h uint64
	if streamed {
		flags = ReplyStreamed
	} else if len(reply) > 0 {
		typ = reply[0]
		h = xxhash.Sum64(reply)
	}
	pfx := ErrPrefix(reply)
	if !b.begin(6*binary.MaxVarintLen64 + 10 + len(pfx)) {
		return
	}
	at := b.open()
	b.b = binary.AppendUvarint(b.b, conn)
	b.b = binary.AppendUvarint(b.b, seq)
	b.b = binary.AppendUvarint(b.b, b.t(now))
	b.b = append(b.b, typ, flags)
	b.b = binary.AppendUvarint(b.b, uint64(len(reply)))
	b.b = binary.LittleEndian.AppendUint64(b.b, h)
	b.b = binary.AppendUvarint(b.b, uint64(max(total, 0)))
	b.b = binary.AppendUvarint(b.b, uint64(max(upstream, 0)))
	b.b = append(b.b, pfx...)
	b.end(KindReply, at)
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
	case '-':
		r = reply[1:]
	case '!':
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
			if last {
				b.closed = true
			}
			b.mu.Unlock()
			spare[i] = got
			if len(got) == 0 || c.failed() {
				continue
			}
			var n int64
			out, n = c.redact.records(out[:0], got)
			if _, err := c.enc.Write(out); err != nil {
				c.fail(err)
				continue
			}
			c.raw.Add(int64(len(out)))
			c.recs.Add(n)
			wrote = true
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
