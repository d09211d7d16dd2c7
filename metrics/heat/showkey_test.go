package heat

import (
	"strings"
	"testing"
)

// TestShowKey: the slow log's form of a key (ShowKey) is the summaries'
// form of the same key (show) under each Names, so a key hashed in
// /slowlog is the same 16 hex digits as in /keys; a hashed key keeps none
// of its bytes.
func TestShowKey(t *testing.T) {
	const seed = 0x5eed
	for _, n := range []Names{NamesPlain, NamesPattern, NamesHash} {
		for _, key := range []string{"user:1001:cart", "secret\x00\xff", "a"} {
			var id keyID
			id.n = uint8(copy(id.bytes[:], key))
			n.identify(&id)
			want, wantCut := n.show(&id, seed)
			got, cut := n.ShowKey([]byte(key), false, seed)
			if got != want || cut != wantCut {
				t.Errorf("%v %q: ShowKey %q %v, summaries %q %v", n, key, got, cut, want, wantCut)
			}
			if n == NamesHash && (strings.Contains(got, "user") || strings.Contains(got, "secret") || len(got) != 16) {
				t.Errorf("hash %q of %q", got, key)
			}
		}
	}
}
