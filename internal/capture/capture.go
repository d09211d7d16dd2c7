// Package capture records the commands clients send through the proxy, with
// their batches, timing and a summary of each reply, to a file that
// "respmeter replay" sends again to any RESP engine; it also reads such
// files back.
//
// File format (version 3; versions 1 and 2 below). A file starts with a 20-byte
// header, not compressed:
//
//	offset 0   8 bytes  magic "RESPCAP\n"
//	offset 8   uint16   format version, little endian (Version)
//	offset 10  uint16   flags, little endian: bit 0 = values redacted
//	offset 12  int64    capture start, Unix time in nanoseconds, little endian
//
// A Zstandard stream (RFC 8878) follows: one or more concatenated frames,
// one ended at every flush of the writer (about once a second, sooner
// when a buffer is half full), so that a file still being written can be
// read up to its last flush. Decompressed, it is a sequence of records:
//
//	kind byte, body length (unsigned LEB128 varint), body
//
// where every integer in a body is an unsigned LEB128 varint unless said
// otherwise, t is nanoseconds since the capture start (the proxy's
// monotonic clock), and conn is a connection id unique within the file:
//
//	'C' connection  conn, t, then the RESP requests that set the
//	                connection's state when it was first captured (AUTH,
//	                HELLO, SELECT, CLIENT SETNAME, ...: credentials
//	                redacted), possibly none.
//	'B' batch       conn, t (when the bytes were read), seq of the first
//	                request, then the requests that arrived in one read,
//	                as RESP bytes (the client's frames; inline commands as
//	                sent). Requests are numbered per connection from 1, in
//	                order: the n-th request of a batch has seq first+n-1.
//	'G' replies     conn, t (when the group's first reply was ready), seq
//	                (the request the first reply answers), then one or
//	                more replies of that connection (those the proxy
//	                finished in one pass of its event loop), each:
//	                  seq delta (not in the first reply, which answers the
//	                    record's seq): added to the previous reply's seq,
//	                    modulo 2^64, gives the request it answers
//	                  dt (not in the first reply, ready at the record's
//	                    t): ns after the record's t when it was ready
//	                  RESP type byte of the reply ('+', '-', ':', '$',
//	                    '*', '%', ...; 0 unknown)
//	                  flags byte (bit 0: streamed, size and hash unknown)
//	                  size in bytes
//	                  8-byte little-endian xxHash64 of the reply bytes
//	                  total ns (request read to reply ready)
//	                  upstream ns (sent to the engine to answered)
//	                  error prefix length byte (0-32), then the prefix: the
//	                    first word of an error reply, e.g. "WRONGTYPE";
//	                    length 0 for other replies.
//	'I' injected    conn, t (when the request was read), seq (the
//	                request a fault injection rule touched), injected ns
//	                (the delay or reply hold it drew; 0 for an error, a
//	                timeout, a reset, an -ASK or a reply paced by
//	                bandwidth or slicer, captured before its pacing),
//	                effect length byte and effect ("delay",
//	                "reply_delay", "error", "timeout", "reset", "migrate",
//	                "failover", "bandwidth", "slicer"), then the rule's name
//	                up to the end of the body. At most one per request;
//	                it may come before or after the request's reply.
//
// Version 2 files are version 3 files without 'I' records.
//
// Version 1 files have the same header, 'C' and 'B' records, and one 'R'
// record per reply instead of 'G' records:
//
//	'R' reply       conn, seq, t (when the reply was ready), RESP type
//	                byte, flags byte, size, 8-byte xxHash64, total ns,
//	                upstream ns (as in a 'G' entry), then the error prefix
//	                (at most 32 bytes) up to the end of the body, else
//	                nothing.
//
// Readers read every version ('R' records in a version 2 or 3 file too); a
// version 2 or 3 writer writes 'G' records only (one per reply from Buf.Reply,
// one per group from Buf.Replies: one record for a pipeline's replies,
// each reply after the first about a third smaller than an 'R' record).
//
// Records of one connection are in order; records of different
// connections may interleave in any order (they come from different event
// loops). A reply without its batch (dropped: the writer fell behind) is
// ignored by readers. Readers reject unknown record kinds and versions
// newer than theirs.
//
// Concurrency: a Capture's Buf methods are called by one event loop each;
// Stats and Stop from any goroutine.
package capture

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/respmeter/respmeter/internal/resp"
)

// Magic starts every capture file.
const Magic = "RESPCAP\n"

// Version is the format version this package writes and the newest it
// reads (it reads every version from 1).
const Version = 3

// HeaderSize is the size in bytes of the uncompressed file header.
const HeaderSize = 20

// Header flags.
const (
	FlagValuesRedacted = 1 << 0
)

// Record kinds.
const (
	KindConn  byte = 'C'
	KindBatch byte = 'B'
	// KindReply is a version 1 file's reply record; Reader.Next returns
	// every reply, of either record kind, as a Record of this kind.
	KindReply byte = 'R'
	// KindReplies is a group of replies of one connection (version 2).
	KindReplies byte = 'G'
	// KindInjected marks a request a fault injection rule touched
	// (version 3).
	KindInjected byte = 'I'

	// kindCleanBatch is a KindBatch record in a Buf that the writer need
	// not redact (Buf.Batch's clean); never in a file.
	kindCleanBatch byte = 'b'
	// kindKeyedBatch is a KindBatch record in a Buf that carries where
	// its requests' keys are (Buf.KeyedBatch); the writer drops that part.
	// Never in a file.
	kindKeyedBatch byte = 'k'
)

// Reply flags.
const (
	ReplyStreamed = 1 << 0
)

// MaxRecord bounds a record body in bytes (a batch holds at most one read
// of a client plus an unfinished request, and a request is bounded by
// proto-max-bulk-len, 512 MiB).
const MaxRecord = 1 << 30

// maxErrPrefix bounds the error prefix kept in a reply record.
const maxErrPrefix = 32

// Sentinel errors. Errors from Reader wrap one of them in a *FormatError.
var (
	// ErrNotCapture: the file does not start with Magic.
	ErrNotCapture = errors.New("capture: not a capture file")
	// ErrVersion: the file's format version is newer than Version.
	ErrVersion = errors.New("capture: unsupported format version")
	// ErrTruncated: the file ends inside the header, a frame or a record.
	ErrTruncated = errors.New("capture: truncated")
	// ErrCorrupt: bytes that are not what the format allows there.
	ErrCorrupt = errors.New("capture: corrupt")
	// ErrRunning: a capture is already running.
	ErrRunning = errors.New("capture: already running")
)

// FormatError is a bad capture file: where (Offset, in the file for the
// header, else in the decompressed record stream) and what was expected.
type FormatError struct {
	Offset int64
	Want   string
	Err    error // ErrNotCapture, ErrVersion, ErrTruncated or ErrCorrupt
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%v at offset %d: expected %s", e.Err, e.Offset, e.Want)
}

func (e *FormatError) Unwrap() error { return e.Err }

// Header is a capture file's header.
type Header struct {
	Version uint16
	Flags   uint16
	Start   int64 // Unix ns
}

// appendHeader appends the encoded header to b.
func appendHeader(b []byte, h Header) []byte {
	b = append(b, Magic...)
	b = binary.LittleEndian.AppendUint16(b, h.Version)
	b = binary.LittleEndian.AppendUint16(b, h.Flags)
	return binary.LittleEndian.AppendUint64(b, uint64(h.Start))
}

// Summary describes a reply without its bytes.
type Summary struct {
	Type   byte   // first byte of the reply; 0 unknown
	Flags  byte   // ReplyStreamed
	Size   int64  // bytes
	Hash   uint64 // xxHash64 of the reply bytes
	ErrPfx string // first word of an error reply, "" otherwise
}

// Injected is what a fault injection rule did to a request (a 'I'
// record).
type Injected struct {
	Rule   string // the rule's name
	Effect string // delay, reply_delay, error, timeout, reset, migrate, failover, bandwidth, slicer
	Ns     int64  // the delay or reply hold drawn; 0 for the other effects
}

// IsErr reports whether the reply is an error reply.
func (s Summary) IsErr() bool { return resp.IsErrorType(s.Type) }
