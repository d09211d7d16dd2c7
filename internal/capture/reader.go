package capture

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/klauspost/compress/zstd"
	"github.com/respmeter/respmeter/internal/resp"
)

// Record is one decoded record; a reply (KindReply) is one of a
// KindReplies record's replies, or a version 1 file's 'R' record. Reqs
// aliases the Reader's buffer: valid until the next call to Next.
type Record struct {
	Kind byte
	Conn uint64
	T    int64 // ns since the capture start
	// Seq is the first request's number (KindBatch) or the answered
	// request's (KindReply).
	Seq  uint64
	Reqs []byte // KindConn, KindBatch: RESP request frames
	// Reply, Total and Upstream (ns): KindReply.
	Reply    Summary
	Total    int64
	Upstream int64
	// Injected: KindInjected (Seq is the request it marks).
	Injected Injected
}

// Reader reads a capture file's records in file order.
type Reader struct {
	h   Header
	dec *zstd.Decoder
	br  *bufio.Reader
	off int64 // in the decompressed stream
	buf []byte
	// grp is the rest of the 'G' record being returned reply by reply: its
	// entries not returned yet (aliasing buf), the record's conn and t, the
	// last reply's seq, whether the first reply was returned, and the
	// record's offset and length for errors.
	grp      []byte
	grpMore  bool
	grpConn  uint64
	grpT     int64
	grpSeq   uint64
	grpStart int64
	grpLen   uint64
}

// maxWindow bounds the Zstandard window a reader accepts (the writer uses
// 1 MiB), so that a hostile file cannot make it allocate much.
const maxWindow = 8 << 20

// NewReader reads the header from r and returns a Reader for the records.
// Errors are *FormatError.
func NewReader(r io.Reader) (*Reader, error) {
	var hb [HeaderSize]byte
	n, _ := io.ReadFull(r, hb[:])
	if m := min(n, len(Magic)); string(hb[:m]) != Magic[:m] {
		return nil, &FormatError{Offset: 0, Want: fmt.Sprintf("the magic %q", Magic), Err: ErrNotCapture}
	}
	if n < HeaderSize {
		return nil, &FormatError{Offset: int64(n), Want: fmt.Sprintf("a %d-byte header", HeaderSize), Err: ErrTruncated}
	}
	h := Header{
		Version: binary.LittleEndian.Uint16(hb[8:]),
		Flags:   binary.LittleEndian.Uint16(hb[10:]),
		Start:   int64(binary.LittleEndian.Uint64(hb[12:])),
	}
	if h.Version == 0 || h.Version > Version {
		return nil, &FormatError{Offset: 8, Want: fmt.Sprintf("format version 1..%d, got %d (a newer respmeter wrote it)", Version, h.Version), Err: ErrVersion}
	}
	dec, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow),
		zstd.WithDecoderMaxMemory(MaxRecord+maxWindow))
	if err != nil {
		return nil, err
	}
	return &Reader{h: h, dec: dec, br: bufio.NewReaderSize(dec, 64<<10)}, nil
}

// Header returns the file's header.
func (r *Reader) Header() Header { return r.h }

// Close releases the decoder.
func (r *Reader) Close() { r.dec.Close() }

// wrap turns a read error at r.off into a FormatError.
func (r *Reader) wrap(err error, want string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &FormatError{Offset: r.off, Want: want, Err: ErrTruncated}
	}
	return &FormatError{Offset: r.off, Want: want + " (Zstandard stream: " + err.Error() + ")", Err: ErrCorrupt}
}

func (r *Reader) uvarint(want string) (uint64, error) {
	v, err := binary.ReadUvarint(byteCounter{r})
	if err != nil {
		return 0, r.wrap(err, want)
	}
	return v, nil
}

type byteCounter struct{ r *Reader }

func (b byteCounter) ReadByte() (byte, error) {
	c, err := b.r.br.ReadByte()
	if err == nil {
		b.r.off++
	}
	return c, err
}

// Next returns the next record, io.EOF after the last one, or a
// *FormatError.
func (r *Reader) Next() (Record, error) {
	var rec Record
	if len(r.grp) > 0 {
		return r.groupReply()
	}
	kind, err := r.br.ReadByte()
	if err == io.EOF {
		return rec, io.EOF
	}
	if err != nil {
		return rec, r.wrap(err, "a record kind byte")
	}
	switch {
	case kind == KindConn || kind == KindBatch || kind == KindReply:
	case kind == KindReplies && r.h.Version >= 2:
	case kind == KindInjected && r.h.Version >= 3:
	case r.h.Version >= 3:
		return rec, &FormatError{Offset: r.off, Want: fmt.Sprintf("a record kind 'C', 'B', 'G', 'I' or 'R', got %q", kind), Err: ErrCorrupt}
	case r.h.Version >= 2:
		return rec, &FormatError{Offset: r.off, Want: fmt.Sprintf("a record kind 'C', 'B', 'G' or 'R' (version 2), got %q", kind), Err: ErrCorrupt}
	default:
		return rec, &FormatError{Offset: r.off, Want: fmt.Sprintf("a record kind 'C', 'B' or 'R' (version 1), got %q", kind), Err: ErrCorrupt}
	}
	r.off++
	rec.Kind = kind
	l, err := r.uvarint("a record length")
	if err != nil {
		return rec, err
	}
	if l > MaxRecord {
		return rec, &FormatError{Offset: r.off, Want: fmt.Sprintf("a record length <= %d, got %d", MaxRecord, l), Err: ErrCorrupt}
	}
	start := r.off
	// Read in pieces: a length in a damaged file must not make us
	// allocate it up front.
	r.buf = r.buf[:0]
	for left := int(l); left > 0; {
		n := min(left, 1<<20)
		at := len(r.buf)
		r.buf = append(r.buf, make([]byte, n)...)
		got, err := io.ReadFull(r.br, r.buf[at:])
		r.off += int64(got)
		if err != nil {
			return rec, r.wrap(err, fmt.Sprintf("a record body of %d bytes from offset %d", l, start))
		}
		left -= n
	}
	body := r.buf
	bad := func(what string) error {
		return &FormatError{Offset: start, Want: fmt.Sprintf("%s in a %q record of %d bytes", what, kind, l), Err: ErrCorrupt}
	}
	get := func(what string) (uint64, error) {
		v, n := binary.Uvarint(body)
		if n <= 0 {
			return 0, bad(what)
		}
		body = body[n:]
		return v, nil
	}
	if rec.Conn, err = get("a connection id"); err != nil {
		return rec, err
	}
	if kind == KindReply {
		if rec.Seq, err = get("a request number"); err != nil {
			return rec, err
		}
	}
	t, err := get("a time")
	if err != nil {
		return rec, err
	}
	rec.T = int64(t)
	if kind == KindReplies {
		if r.grpSeq, err = get("a request number"); err != nil {
			return rec, err
		}
		if len(body) == 0 {
			return rec, bad("at least one reply")
		}
		r.grp, r.grpConn, r.grpT, r.grpStart, r.grpLen, r.grpMore = body, rec.Conn, rec.T, start, l, false
		return r.groupReply()
	}
	switch kind {
	case KindConn:
		rec.Reqs = body
	case KindInjected:
		if rec.Seq, err = get("a request number"); err != nil {
			return rec, err
		}
		ns, err := get("an injected time")
		if err != nil {
			return rec, err
		}
		if len(body) < 1 || len(body) < 1+int(body[0]) {
			return rec, bad("an effect after its length")
		}
		rec.Injected = Injected{Effect: string(body[1 : 1+body[0]]), Rule: string(body[1+body[0]:]), Ns: int64(ns)}
	case KindBatch:
		if rec.Seq, err = get("a first request number"); err != nil {
			return rec, err
		}
		rec.Reqs = body
	case KindReply:
		if len(body) < 2 {
			return rec, bad("a reply type and flags")
		}
		rec.Reply.Type, rec.Reply.Flags = body[0], body[1]
		body = body[2:]
		size, err := get("a reply size")
		if err != nil {
			return rec, err
		}
		rec.Reply.Size = int64(size)
		if len(body) < 8 {
			return rec, bad("an 8-byte reply hash")
		}
		rec.Reply.Hash = binary.LittleEndian.Uint64(body)
		body = body[8:]
		tot, err := get("a total time")
		if err != nil {
			return rec, err
		}
		up, err := get("an upstream time")
		if err != nil {
			return rec, err
		}
		rec.Total, rec.Upstream = int64(tot), int64(up)
		if len(body) > maxErrPrefix {
			return rec, bad(fmt.Sprintf("an error prefix of at most %d bytes", maxErrPrefix))
		}
		rec.Reply.ErrPfx = string(body)
	}
	return rec, nil
}

// groupReply decodes the next reply of the 'G' record in r.grp (see the
// package doc for its layout).
func (r *Reader) groupReply() (Record, error) {
	rec := Record{Kind: KindReply, Conn: r.grpConn}
	body := r.grp
	r.grp = nil // a bad entry ends the group
	bad := func(what string) error {
		return &FormatError{Offset: r.grpStart, Want: fmt.Sprintf("%s in a 'G' record of %d bytes", what, r.grpLen), Err: ErrCorrupt}
	}
	get := func() (uint64, bool) {
		v, n := binary.Uvarint(body)
		if n <= 0 {
			return 0, false
		}
		body = body[n:]
		return v, true
	}
	var dt uint64
	if r.grpMore {
		delta, ok := get()
		if !ok {
			return rec, bad("a request number delta")
		}
		if dt, ok = get(); !ok {
			return rec, bad("a reply time")
		}
		r.grpSeq += delta
	}
	r.grpMore = true
	rec.Seq, rec.T = r.grpSeq, r.grpT+int64(dt)
	if len(body) < 2 {
		return rec, bad("a reply type and flags")
	}
	rec.Reply.Type, rec.Reply.Flags = body[0], body[1]
	body = body[2:]
	size, ok := get()
	if !ok {
		return rec, bad("a reply size")
	}
	rec.Reply.Size = int64(size)
	if len(body) < 8 {
		return rec, bad("an 8-byte reply hash")
	}
	rec.Reply.Hash = binary.LittleEndian.Uint64(body)
	body = body[8:]
	tot, ok := get()
	if !ok {
		return rec, bad("a total time")
	}
	up, ok := get()
	if !ok {
		return rec, bad("an upstream time")
	}
	rec.Total, rec.Upstream = int64(tot), int64(up)
	if len(body) < 1 || int(body[0]) > maxErrPrefix || len(body) < 1+int(body[0]) {
		return rec, bad(fmt.Sprintf("an error prefix of at most %d bytes after its length", maxErrPrefix))
	}
	rec.Reply.ErrPfx = string(body[1 : 1+body[0]])
	r.grp = body[1+body[0]:]
	return rec, nil
}

// Decompress returns the decompressed record stream of a whole capture
// file (its header checked as NewReader checks it): what a tool that
// does not parse records sees.
func Decompress(file []byte) ([]byte, error) {
	r, err := NewReader(bytes.NewReader(file))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(r.br)
	if err != nil {
		return b, r.wrap(err, "a complete Zstandard stream")
	}
	return b, nil
}

// Cmd is one captured request.
type Cmd struct {
	Seq  uint64
	Name string // lower case
	Req  []byte // the request frame
	// Reply is the captured reply's summary, nil when not recorded (the
	// record was dropped, or the capture stopped first).
	Reply *Summary
	// Injected is what a fault injection rule did to the request, nil
	// when none touched it (or the file is older than version 3).
	Injected *Injected
	Total    int64 // ns; 0 when Reply is nil
	Upstream int64 // ns
}

// Batch is the requests of one read, sent together.
type Batch struct {
	T    int64 // ns since the workload's start
	Cmds []Cmd
}

// Conn is one captured connection.
type Conn struct {
	File    int    // index of its file
	ID      uint64 // id within that file
	State   []byte // requests that set its state at capture start
	Batches []Batch
}

// Workload is the captured connections of one or more files, on one
// timeline.
type Workload struct {
	Start    int64 // Unix ns of the earliest file's start
	Flags    uint16
	Conns    []*Conn
	Duration int64 // ns from Start to the last batch
}

// Load reads capture files into one Workload: each file's times are
// shifted by its header's start relative to the earliest file's.
func Load(paths ...string) (*Workload, error) {
	w := &Workload{}
	type key struct {
		file int
		conn uint64
	}
	type reply struct {
		s          Summary
		tot, upstr int64
	}
	var hs []Header
	var conns []*Conn
	byKey := map[key]*Conn{}
	replies := map[key]map[uint64]reply{}
	marks := map[key]map[uint64]Injected{}
	var rawBatches = map[key][]Record{}
	for fi, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		r, err := NewReader(bufio.NewReader(f))
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		hs = append(hs, r.Header())
		for {
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				r.Close()
				_ = f.Close()
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			k := key{fi, rec.Conn}
			c := byKey[k]
			if c == nil {
				c = &Conn{File: fi, ID: rec.Conn}
				byKey[k] = c
				conns = append(conns, c)
			}
			switch rec.Kind {
			case KindConn:
				c.State = append(c.State, rec.Reqs...)
			case KindBatch:
				rec.Reqs = bytes.Clone(rec.Reqs)
				rawBatches[k] = append(rawBatches[k], rec)
			case KindReply:
				m := replies[k]
				if m == nil {
					m = map[uint64]reply{}
					replies[k] = m
				}
				m[rec.Seq] = reply{rec.Reply, rec.Total, rec.Upstream}
			case KindInjected:
				m := marks[k]
				if m == nil {
					m = map[uint64]Injected{}
					marks[k] = m
				}
				m[rec.Seq] = rec.Injected
			}
		}
		r.Close()
		_ = f.Close()
	}
	if len(hs) == 0 {
		return w, nil
	}
	w.Start = hs[0].Start
	for _, h := range hs {
		w.Start = min(w.Start, h.Start)
		w.Flags |= h.Flags
	}
	var scan resp.RequestScanner
	var args [][]byte
	for _, c := range conns {
		k := key{c.File, c.ID}
		shift := hs[c.File].Start - w.Start
		for _, rec := range rawBatches[k] {
			b := Batch{T: rec.T + shift}
			seq := rec.Seq
			reqs := rec.Reqs
			for len(reqs) > 0 {
				scan.Reset()
				n, kind, err := scan.Scan(reqs)
				if err != nil || n == 0 {
					return nil, fmt.Errorf("%s: connection %d: a batch holds a bad request at request %d: %v", paths[c.File], c.ID, seq, err)
				}
				frame := reqs[:n]
				reqs = reqs[n:]
				if kind == resp.KindEmpty {
					continue
				}
				args = resp.Args(frame, kind, args[:0])
				if len(args) == 0 {
					continue
				}
				cmd := Cmd{Seq: seq, Name: string(bytes.ToLower(args[0])), Req: frame}
				if rp, ok := replies[k][seq]; ok {
					s := rp.s
					cmd.Reply, cmd.Total, cmd.Upstream = &s, rp.tot, rp.upstr
				}
				if in, ok := marks[k][seq]; ok {
					cmd.Injected = &in
				}
				b.Cmds = append(b.Cmds, cmd)
				seq++
			}
			if len(b.Cmds) > 0 {
				c.Batches = append(c.Batches, b)
				w.Duration = max(w.Duration, b.T)
			}
		}
		if len(c.Batches) > 0 || len(c.State) > 0 {
			w.Conns = append(w.Conns, c)
		}
	}
	sort.SliceStable(w.Conns, func(i, j int) bool { return first(w.Conns[i]) < first(w.Conns[j]) })
	return w, nil
}

func first(c *Conn) int64 {
	if len(c.Batches) == 0 {
		return 0
	}
	return c.Batches[0].T
}
