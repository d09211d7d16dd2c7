package slowlog

import "strings"

// SafeFirstKey returns the argument of a request that the slow log may keep
// as its first key, or ok false when nothing may be kept. cmd is the
// command's label from the command table ("get", "migrate", "other"; a
// container's subcommand may be given as "config|set"), args the request's
// arguments with args[0] the command name, and keyPos the index in args the
// command's key spec gives for the first key, -1 if it has none.
//
// ok is false, whatever keyPos says, for commands that carry credentials or
// whose key spec cannot be trusted:
//   - AUTH, HELLO (AUTH user pass), CONFIG (SET requirepass/masterauth),
//     ACL (SETUSER >pass #hash), CLIENT and SENTINEL, none of which has keys;
//   - "other", "" and any label that args[0] does not match, since no key
//     spec is known for them;
//   - MIGRATE when any argument other than args[0] is AUTH or AUTH2 (case
//     insensitively) at or before keyPos: its password follows AUTH/AUTH2.
//
// Otherwise ok is true and key is args[keyPos] if 0 < keyPos < len(args). key
// aliases args: copy it (KeyBuf.Set) before the request's buffer is reused.
// SafeFirstKey does not allocate.
func SafeFirstKey(cmd string, args [][]byte, keyPos int) (key []byte, ok bool) {
	if keyPos <= 0 || keyPos >= len(args) {
		return nil, false
	}
	// (A loop, not strings.IndexByte: labels are a few bytes, and this
	// runs for every request.)
	for i := 0; i < len(cmd); i++ {
		if cmd[i] == '|' {
			cmd = cmd[:i]
			break
		}
	}
	// The label must name args[0]: a mismatch means the caller's lookup and
	// the request disagree, and then the key spec is not to be trusted.
	// This also fences off a credential-bearing command under a wrong label.
	if cmd == "" || !equalFold(args[0], cmd) || isSecretBearing(cmd) {
		return nil, false
	}
	if len(cmd) == len("migrate") && strings.EqualFold(cmd, "migrate") {
		for i := 1; i <= keyPos; i++ {
			if equalFold(args[i], "auth") || equalFold(args[i], "auth2") {
				return nil, false
			}
		}
	}
	return args[keyPos], true
}

// secretBearing lists the commands SafeFirstKey never takes a key from:
// those that carry credentials or have no trustworthy key spec.
var secretBearing = [...]string{"auth", "hello", "config", "acl", "client", "sentinel", "other"}

// isSecretBearing reports whether cmd, case-insensitively, is in
// secretBearing.
func isSecretBearing(cmd string) bool {
	// The proxy passes the command table's lower-case labels: one switch
	// settles those (this runs for every request); any other spelling
	// goes through the case-insensitive loop.
	switch cmd {
	case "auth", "hello", "config", "acl", "client", "sentinel", "other":
		return true
	}
	if !hasUpper(cmd) {
		return false
	}
	for _, s := range secretBearing {
		if strings.EqualFold(cmd, s) {
			return true
		}
	}
	return false
}

// KeyBuf holds a copy of up to MaxKeyBytes bytes of a key in place, so the
// proxy can capture the first key of every in-flight request without
// allocating (the request's buffer dies before the reply tells whether it
// was slow) and turn it into an Entry only for slow ones. The zero KeyBuf is
// empty. A KeyBuf is not safe for concurrent use; it belongs to the event
// loop of its request.
type KeyBuf struct {
	buf       [MaxKeyBytes]byte
	n         uint8
	truncated bool
	set       bool
}

// Set copies up to MaxKeyBytes bytes of key, remembering whether it was cut.
// It is meant for the key SafeFirstKey returned:
//
//	if k, ok := slowlog.SafeFirstKey(label, args, pos); ok { kb.Set(k) } else { kb.Reset() }
func (k *KeyBuf) Set(key []byte) {
	k.truncated = len(key) > MaxKeyBytes
	k.n = uint8(copy(k.buf[:], key))
	k.set = true
}

// Reset empties k.
func (k *KeyBuf) Reset() { *k = KeyBuf{} }

// Bytes returns the bytes held, aliasing k; nil if k is empty.
func (k *KeyBuf) Bytes() []byte {
	if !k.set {
		return nil
	}
	return k.buf[:k.n]
}

// Truncated reports whether the key given to Set was longer than
// MaxKeyBytes.
func (k *KeyBuf) Truncated() bool { return k.truncated }

// Fill sets e.FirstKey to the raw bytes held and e.KeyTruncated, ready for
// Log.Add, which escapes them. It allocates the string.
func (k *KeyBuf) Fill(e *Entry) {
	e.FirstKey = string(k.Bytes())
	e.KeyTruncated = k.truncated
}

// equalFold reports whether b equals s under ASCII case folding, as Redis
// compares command names and keywords (strcasecmp). It does not allocate.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// hasUpper reports whether s has an ASCII upper-case letter.
func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}
