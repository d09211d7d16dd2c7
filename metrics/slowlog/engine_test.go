package slowlog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/metrics/slowlog"
)

// TestEngineReader reads a real engine's own command log (run it with
// RESPMETER_TEST_ENGINE set to a Valkey 8.1 or later server for
// COMMANDLOG, to redis-server for SLOWLOG): whether COMMANDLOG is there is
// asked of the engine directly. Every command is logged (threshold 0) and
// requests and replies above 1,000 bytes too: a SET of a 4,000-byte value
// is a large request, its GET a large reply; a key the engine cuts (over
// 128 bytes) is flagged; an MSET of 40 arguments, of which the engine
// keeps 31, counts 41; no value ever reaches the JSON.
func TestEngineReader(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	hasCommandLog := s.Client().Do(ctx, "COMMANDLOG", "LEN", "slow").Err() == nil
	if hasCommandLog {
		s.DoT(t, "CONFIG", "SET", "commandlog-execution-slower-than", "0")
		s.DoT(t, "CONFIG", "SET", "commandlog-request-larger-than", "1000")
		s.DoT(t, "CONFIG", "SET", "commandlog-reply-larger-than", "1000")
	} else {
		s.DoT(t, "CONFIG", "SET", "slowlog-log-slower-than", "0")
	}
	secret := "value-" + strings.Repeat("s", 4000)
	longKey := strings.Repeat("k", 200)
	s.DoT(t, "SET", "big", secret)
	s.DoT(t, "GET", "big")
	s.DoT(t, "SET", longKey, "value-short")
	mset := []any{"MSET"}
	for i := range 20 {
		mset = append(mset, fmt.Sprintf("m%d", i), "value-m")
	}
	s.DoT(t, mset...)
	r := slowlog.EngineReader{Count: 10, Label: func(args [][]byte) (string, int) {
		return strings.ToLower(string(args[0])), 1
	}}
	got := r.Read(ctx, s.Addr())
	if got.Error != "" {
		t.Fatal(got.Error)
	}
	t.Logf("%s of %s: %d entries", got.Source, s.Addr(), len(got.Entries))
	want := map[bool]string{true: "commandlog", false: "slowlog"}[hasCommandLog]
	if got.Source != want {
		t.Errorf("source %q, the engine has COMMANDLOG: %v", got.Source, hasCommandLog)
	}
	find := func(kind, cmd, key string) *slowlog.EngineEntry {
		for i, e := range got.Entries {
			if e.Kind == kind && e.Command == cmd && strings.HasPrefix(e.FirstKey, key) {
				return &got.Entries[i]
			}
		}
		t.Errorf("no %s entry of %s %s in %+v", kind, cmd, key, got.Entries)
		return nil
	}
	if e := find(slowlog.KindSlow, "set", "big"); e != nil && (e.Args != 3 || e.Seconds <= 0 || e.Client == "") {
		t.Errorf("SET big: %+v", *e)
	}
	if e := find(slowlog.KindSlow, "set", "kkk"); e != nil && (!e.KeyTruncated || len(e.FirstKey) != slowlog.MaxKeyBytes) {
		t.Errorf("SET of a 200-byte key: %+v", *e)
	}
	if e := find(slowlog.KindSlow, "mset", "m0"); e != nil && e.Args != 41 {
		t.Errorf("MSET of 41 arguments: %d", e.Args)
	}
	if hasCommandLog {
		if e := find(slowlog.KindLargeRequest, "set", "big"); e != nil && (e.Bytes < 4000 || e.Seconds != 0) {
			t.Errorf("large request: %+v", *e)
		}
		if e := find(slowlog.KindLargeReply, "get", "big"); e != nil && e.Bytes < 4000 {
			t.Errorf("large reply: %+v", *e)
		}
	}
	// Through the handler, with the reader's own connection's entries.
	l := slowlog.New(0, 0)
	l.SetEngine(func(ctx context.Context) []slowlog.EngineLog { return []slowlog.EngineLog{r.Read(ctx, s.Addr())} })
	for _, q := range []string{"", "?engine=1"} {
		w := httptest.NewRecorder()
		l.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/slowlog"+q, nil))
		var doc struct {
			Engine []slowlog.EngineLog `json:"engine"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(w.Body.Bytes(), []byte("value-")) {
			t.Errorf("/slowlog%s holds a value: %s", q, w.Body.Bytes())
		}
		if q == "" && doc.Engine != nil || q != "" && (len(doc.Engine) != 1 || doc.Engine[0].Addr != s.Addr()) {
			t.Errorf("/slowlog%s: engine %+v", q, doc.Engine)
		}
		if q == "" {
			continue
		}
		own := 0
		for _, e := range doc.Engine[0].Entries {
			if e.Respmeter {
				own++
				if e.ClientName != "respmeter-slowlog" {
					t.Errorf("an entry of %q marked respmeter's", e.ClientName)
				}
			}
		}
		if own == 0 {
			t.Errorf("the reader's own COMMANDLOG/SLOWLOG GET is not marked respmeter's: %+v", doc.Engine[0].Entries)
		}
	}
}

// TestEngineReaderDown: an engine that cannot be reached gives an error
// in the log, no entries.
func TestEngineReaderDown(t *testing.T) {
	got := slowlog.EngineReader{}.Read(context.Background(), "127.0.0.1:1")
	if got.Error == "" || got.Source != "" || len(got.Entries) != 0 {
		t.Errorf("%+v", got)
	}
}
