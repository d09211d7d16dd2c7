package routing

import (
	"context"
	"slices"
	"testing"

	"github.com/respmeter/respmeter/internal/redistest"
)

// TestMatchGlob: MatchGlob matches what the engine's own KEYS
// matches (Redis's stringmatchlen), pattern by pattern, over the same keys.
func TestMatchGlob(t *testing.T) {
	srv := redistest.Start(t)
	keys := []string{"user:1", "user:12", "user:", "usera", "User:1", "hot:a1", "hot:b2", "hot:c", "hot:-",
		"a*b", "a?b", "axb", "[x]", "x", "", "h\\llo", "hello", "hallo", "hxllo", "hillo", "heeeello", "hllo", "h]llo"}
	for _, k := range keys {
		if k != "" {
			srv.DoT(t, "SET", k, "v")
		}
	}
	for _, pat := range []string{"*", "user:*", "user:?", "user:??", "*:*", "hot:[ab]*", "hot:[^ab]*", "hot:[a-b]?",
		"hot:[b-a]?", "a\\*b", "a?b", "h?llo", "h*llo", "h[ae]llo", "h[^e]llo", "h[a-b]llo", "h\\\\llo", "h[\\]]llo",
		"*llo", "**", "?", "[x]", "\\[x\\]", "x*", "*x", "user:[0-9]*", "h*l*o"} {
		got, err := srv.Client().Keys(context.Background(), pat).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		var ours []string
		for _, k := range keys {
			if k != "" && MatchGlob([]byte(pat), []byte(k)) {
				ours = append(ours, k)
			}
		}
		slices.Sort(ours)
		if !slices.Equal(got, ours) {
			t.Errorf("pattern %q: engine's KEYS %q, MatchGlob %q", pat, got, ours)
		}
	}
}
