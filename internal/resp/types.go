package resp

// RESP type bytes: the first byte of every reply (and of every element
// inside one). RESP2 has the first five; the rest are RESP3's (RESP3 spec:
// https://github.com/redis/redis-specifications/blob/master/protocol/RESP3.md),
// sent after HELLO 3. Every package of respmeter that reads RESP names them
// from here (a test, typebytes_test.go, keeps raw type-byte comparisons out
// of the others).
const (
	TypeSimpleString byte = '+' // simple string
	TypeError        byte = '-' // simple error
	TypeInteger      byte = ':' // signed 64-bit integer
	TypeBlobString   byte = '$' // blob (bulk) string; $-1 is RESP2's null
	TypeArray        byte = '*' // array; *-1 is RESP2's null array
	TypeNull         byte = '_' // RESP3 null
	TypeDouble       byte = ',' // RESP3 double, as text (inf, -inf, nan too)
	TypeBoolean      byte = '#' // RESP3 boolean: #t or #f
	TypeBigNumber    byte = '(' // RESP3 big number, as decimal text
	TypeBlobError    byte = '!' // RESP3 blob error
	TypeVerbatim     byte = '=' // RESP3 verbatim string: "txt:" or "mkd:" then the text
	TypeMap          byte = '%' // RESP3 map: keys and values alternating
	TypeSet          byte = '~' // RESP3 set
	TypePush         byte = '>' // RESP3 push (out-of-band data)
	TypeAttribute    byte = '|' // RESP3 attribute: annotates the reply that follows it

	// Streamed strings and aggregates (RESP3 spec, "Streamed strings",
	// "Streamed aggregates"): a chunk of a streamed string, and the end of
	// a streamed aggregate.
	TypeStreamChunk byte = ';'
	TypeStreamEnd   byte = '.'
)

// IsErrorType reports whether t is the type byte of an error reply: a
// simple error or a RESP3 blob error. It is the one place respmeter decides
// what an error reply is.
func IsErrorType(t byte) bool { return t == TypeError || t == TypeBlobError }

// IsErrorReply reports whether reply, a whole RESP reply, is an error
// reply (IsErrorType of its first byte); false for an empty one.
func IsErrorReply(reply []byte) bool { return len(reply) > 0 && IsErrorType(reply[0]) }
