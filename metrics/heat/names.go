package heat

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// Names says how keys are told apart and shown.
type Names uint8

const (
	// NamesPlain shows keys as they are, escaped as Go's strconv.Quote
	// does (without the quotes), cut to MaxKeyBytes.
	NamesPlain Names = iota
	// NamesPattern rolls keys up into patterns: every UUID
	// (8-4-4-4-12 hexadecimal digits) and every run of decimal digits
	// becomes '#', so "user:1001:cart" and "user:77:cart" are one entry
	// "user:#:cart".
	NamesPattern
	// NamesHash shows a key only as a 16-hex-digit hash of the whole key,
	// keyed by a random seed drawn at start, so that no output holds a key
	// name nor lets one be confirmed by hashing a guess.
	NamesHash
)

// ParseNames parses "plain", "pattern" or "hash" ("" is plain).
func ParseNames(s string) (Names, error) {
	switch s {
	case "", "plain":
		return NamesPlain, nil
	case "pattern":
		return NamesPattern, nil
	case "hash":
		return NamesHash, nil
	}
	return 0, fmt.Errorf("key names %q: want plain, pattern or hash", s)
}

func (n Names) String() string {
	switch n {
	case NamesPattern:
		return "pattern"
	case NamesHash:
		return "hash"
	}
	return "plain"
}

// identify completes id, the start of a key copied by End, as the
// identity the summaries count under: with NamesPattern, its pattern. A
// long key keeps the hash Begin took of the whole key, except under
// NamesPattern, where the pattern of its first MaxKeyBytes bytes is its
// identity.
func (n Names) identify(id *keyID) {
	if n == NamesPattern {
		id.n = uint8(rollUp(id.bytes[:], int(id.n)))
		clear(id.bytes[id.n:])
		id.hash = xxhash.Sum64(id.bytes[:id.n])
		return
	}
	if !id.long {
		id.hash = xxhash.Sum64(id.bytes[:id.n])
	}
}

// rollUp rewrites b[:n] in place into its pattern (UUIDs and digit runs
// become '#') and returns the pattern's length.
func rollUp(b []byte, n int) int {
	out := 0
	for i := 0; i < n; {
		if isUUIDAt(b[i:n]) {
			b[out] = '#'
			out++
			i += 36
			continue
		}
		if b[i] >= '0' && b[i] <= '9' {
			for i < n && b[i] >= '0' && b[i] <= '9' {
				i++
			}
			b[out] = '#'
			out++
			continue
		}
		b[out] = b[i]
		out++
		i++
	}
	return out
}

// isUUIDAt reports whether b starts with a UUID's text form
// (RFC 9562 section 4: 8-4-4-4-12 hexadecimal digits).
func isUUIDAt(b []byte) bool {
	if len(b) < 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := b[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// show returns how id is shown, and whether it was cut.
func (n Names) show(id *keyID, seed uint64) (string, bool) {
	if n == NamesHash {
		var d xxhash.Digest
		d.ResetWithSeed(seed)
		if id.long {
			// Only the whole key's (unkeyed) hash is left: key it.
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], id.hash)
			_, _ = d.Write(b[:])
		} else {
			_, _ = d.Write(id.bytes[:id.n])
		}
		return fmt.Sprintf("%016x", d.Sum64()), false
	}
	q := strconv.Quote(string(id.bytes[:id.n]))
	return q[1 : len(q)-1], id.long
}

// ShowKey returns how a key's first bytes (cut: truncated) are shown
// under n, for the outputs that keep a key of their own (the slow log):
// escaped as Go's strconv.Quote does (without the quotes), its pattern, or
// its hash keyed by seed. A key of at most MaxKeyBytes bytes hashes as the
// summaries show it; a cut key hashes its bytes kept. It never returns
// key's bytes under NamesHash.
func (n Names) ShowKey(key []byte, truncated bool, seed uint64) (string, bool) {
	switch n {
	case NamesHash:
		var d xxhash.Digest
		d.ResetWithSeed(seed)
		_, _ = d.Write(key)
		return fmt.Sprintf("%016x", d.Sum64()), false
	case NamesPattern:
		b := append([]byte(nil), key...)
		key = b[:rollUp(b, len(b))]
	}
	q := strconv.Quote(string(key))
	return q[1 : len(q)-1], truncated
}

// KeyShow returns ShowKey under n with the seed of s's hashes, so a key
// hashes alike in the slow log and in the summaries.
func (s *Set) KeyShow() func(key []byte, truncated bool) (string, bool) {
	n, seed := s.cfg.Names, s.seed
	return func(key []byte, truncated bool) (string, bool) { return n.ShowKey(key, truncated, seed) }
}

// KeyShowOf returns ShowKey under n with a random seed of its own, for a
// run without heat; nil under NamesPlain (the slow log's own escaping).
func KeyShowOf(n Names) func(key []byte, truncated bool) (string, bool) {
	if n == NamesPlain {
		return nil
	}
	seed := randSeed()
	return func(key []byte, truncated bool) (string, bool) { return n.ShowKey(key, truncated, seed) }
}

// randSeed returns a random 64-bit value (crypto/rand, which does not
// fail on Linux).
func randSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
