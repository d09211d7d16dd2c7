package slowlog_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/respmeter/respmeter/metrics/slowlog"
)

const secret = "s3cr3t"

// argv returns the arguments of a request, as the proxy frames them.
func argv(args ...string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// capture does what the proxy does with a request: take the first key
// through SafeFirstKey into a KeyBuf, and, the reply being slow, Add an
// Entry filled from it.
func capture(l *slowlog.Log, cmd string, args [][]byte, keyPos int) {
	var kb slowlog.KeyBuf
	if k, ok := slowlog.SafeFirstKey(cmd, args, keyPos); ok {
		kb.Set(k)
	}
	e := slowlog.Entry{
		Command:    cmd,
		Args:       len(args),
		Client:     "10.0.0.1:5000",
		ClientName: "app",
		Phases:     map[string]float64{"total": 0.02, "upstream": 0.019, "proxy": 0.001},
	}
	kb.Fill(&e)
	l.Add(e)
}

func TestSafeFirstKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cmd    string
		args   [][]byte
		keyPos int // from the key spec
		want   string
		wantOK bool
	}{
		{"GET k", "get", argv("GET", "k"), 1, "k", true},
		{"SET k v", "set", argv("SET", "k", "v"), 1, "k", true},
		{"lower-case name", "set", argv("set", "k", "v"), 1, "k", true},
		{"MSET keeps the first key only", "mset", argv("MSET", "k1", "v1", "k2", "v2"), 1, "k1", true},
		{"EVAL key after numkeys", "eval", argv("EVAL", "return 1", "1", "k"), 3, "k", true},
		{"no key", "ping", argv("PING"), -1, "", false},
		{"keyPos 0 is the name", "get", argv("GET", "k"), 0, "", false},
		{"keyPos past the end", "get", argv("GET"), 1, "", false},
		{"AUTH pass", "auth", argv("AUTH", secret), -1, "", false},
		{"AUTH user pass", "auth", argv("AUTH", "user", secret), -1, "", false},
		{"HELLO AUTH SETNAME", "hello", argv("HELLO", "3", "AUTH", "user", secret, "SETNAME", "x"), -1, "", false},
		{"MIGRATE empty key, AUTH, KEYS", "migrate", argv("MIGRATE", "host", "6379", "", "0", "5000", "AUTH", secret, "KEYS", "k1"), 3, "", true},
		{"MIGRATE KEYS key after AUTH", "migrate", argv("MIGRATE", "host", "6379", "", "0", "5000", "AUTH", secret, "KEYS", "k1"), 9, "", false},
		{"MIGRATE key before AUTH2", "migrate", argv("MIGRATE", "host", "6379", "k1", "0", "5000", "AUTH2", "user", secret), 3, "k1", true},
		{"MIGRATE key named auth", "migrate", argv("MIGRATE", "host", "6379", "auth", "0", "5000"), 3, "", false},
		{"CONFIG SET requirepass", "config", argv("CONFIG", "SET", "requirepass", secret), -1, "", false},
		{"CONFIG SET masterauth", "config", argv("CONFIG", "SET", "masterauth", secret), -1, "", false},
		{"config|set label", "config|set", argv("CONFIG", "SET", "masterauth", secret), 3, "", false},
		{"ACL SETUSER", "acl", argv("ACL", "SETUSER", "bob", "on", ">"+secret, "~*"), -1, "", false},
		{"CLIENT SETNAME", "client", argv("CLIENT", "SETNAME", "x"), -1, "", false},
		{"other", "other", argv("FOO", "k"), 1, "", false},
		{"empty label", "", argv("GET", "k"), 1, "", false},
		{"label mismatch", "get", argv("AUTH", secret), 1, "", false},
		// Labels in another case than the table's miss the fast switch and
		// take the case-insensitive loop: still fenced.
		{"upper-case AUTH label", "AUTH", argv("AUTH", "user", secret), 1, "", false},
		{"mixed-case Client label", "Client", argv("CLIENT", "SETNAME", secret), 1, "", false},
		{"upper-case GET label", "GET", argv("GET", "k1"), 1, "k1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := slowlog.SafeFirstKey(tc.cmd, tc.args, tc.keyPos)
			if string(got) != tc.want || ok != tc.wantOK {
				t.Fatalf("SafeFirstKey(%q, %q, %d) = %q, %v; want %q, %v", tc.cmd, tc.args, tc.keyPos, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestCredentialsNeverKept feeds requests carrying the password s3cr3t
// through SafeFirstKey, KeyBuf and Add as the proxy does, trying every key
// position (a key spec may be wrong) and labels the proxy could give, and
// checks that s3cr3t appears neither in any Entry nor in the JSON served.
func TestCredentialsNeverKept(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels []string
		args   [][]byte
	}{
		{"AUTH pass", []string{"auth", "other"}, argv("AUTH", secret)},
		{"AUTH user pass", []string{"auth", "other"}, argv("AUTH", "user", secret)},
		{"HELLO 3 AUTH user s3cr3t SETNAME x", []string{"hello", "other"}, argv("HELLO", "3", "AUTH", "user", secret, "SETNAME", "x")},
		{`MIGRATE host 6379 "" 0 5000 AUTH s3cr3t KEYS k1`, []string{"migrate", "other"}, argv("MIGRATE", "host", "6379", "", "0", "5000", "AUTH", secret, "KEYS", "k1")},
		{"MIGRATE host 6379 k1 0 5000 AUTH2 user s3cr3t", []string{"migrate", "other"}, argv("MIGRATE", "host", "6379", "k1", "0", "5000", "AUTH2", "user", secret)},
		{"migrate lower-case auth", []string{"migrate"}, argv("migrate", "host", "6379", "k1", "0", "5000", "auth", secret)},
		{"CONFIG SET requirepass s3cr3t", []string{"config", "config|set", "other"}, argv("CONFIG", "SET", "requirepass", secret)},
		{"CONFIG SET masterauth s3cr3t", []string{"config", "config|set", "other"}, argv("CONFIG", "SET", "masterauth", secret)},
		{"ACL SETUSER bob on >s3cr3t ~*", []string{"acl", "acl|setuser", "other"}, argv("ACL", "SETUSER", "bob", "on", ">"+secret, "~*")},
		{"SENTINEL SET auth-pass", []string{"sentinel", "other"}, argv("SENTINEL", "SET", "mymaster", "auth-pass", secret)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := slowlog.New(256, 0)
			for _, label := range append(tc.labels, "get", "set") { // wrong labels too
				for keyPos := -1; keyPos <= len(tc.args); keyPos++ {
					capture(l, label, tc.args, keyPos)
				}
			}
			for _, e := range l.Entries() {
				if s := fmt.Sprintf("%#v", e); strings.Contains(s, secret) {
					t.Fatalf("entry holds the secret: %s", s)
				}
			}
			rec := httptest.NewRecorder()
			l.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/slowlog", nil))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != http.StatusOK || !json.Valid(body) {
				t.Fatalf("GET /slowlog = %d %s", rec.Code, body)
			}
			if strings.Contains(string(body), secret) {
				t.Fatalf("/slowlog serves the secret:\n%s", body)
			}
		})
	}
}

func TestSafeFirstKeyDoesNotAllocate(t *testing.T) {
	get := argv("GET", strings.Repeat("k", 200))
	mig := argv("MIGRATE", "host", "6379", strings.Repeat("k", 200), "0", "5000", "AUTH2", "user", secret)
	cfg := argv("CONFIG", "SET", "requirepass", secret)
	var kb slowlog.KeyBuf
	allocs := testing.AllocsPerRun(100, func() {
		k, _ := slowlog.SafeFirstKey("get", get, 1)
		kb.Set(k)
		k, _ = slowlog.SafeFirstKey("migrate", mig, 3)
		kb.Set(k)
		_, _ = slowlog.SafeFirstKey("config|set", cfg, 3)
	})
	if allocs != 0 {
		t.Fatalf("SafeFirstKey + KeyBuf.Set: %v allocs per run, want 0", allocs)
	}
}

func TestKeyBuf(t *testing.T) {
	var kb slowlog.KeyBuf
	if kb.Bytes() != nil || kb.Truncated() {
		t.Fatalf("zero KeyBuf = %q, %v", kb.Bytes(), kb.Truncated())
	}
	key := []byte(strings.Repeat("x", 70))
	kb.Set(key)
	key[0] = 'y' // the request buffer is reused
	if got := string(kb.Bytes()); got != strings.Repeat("x", 64) || !kb.Truncated() {
		t.Fatalf("KeyBuf = %q, %v", got, kb.Truncated())
	}
	var e slowlog.Entry
	kb.Fill(&e)
	if e.FirstKey != strings.Repeat("x", 64) || !e.KeyTruncated {
		t.Fatalf("Fill: %q, %v", e.FirstKey, e.KeyTruncated)
	}
	kb.Set([]byte{})
	if b := kb.Bytes(); b == nil || len(b) != 0 || kb.Truncated() {
		t.Fatalf("empty key: %q (nil %v), %v", b, b == nil, kb.Truncated())
	}
	kb.Reset()
	if kb.Bytes() != nil {
		t.Fatalf("after Reset: %q", kb.Bytes())
	}
}
