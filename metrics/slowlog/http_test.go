package slowlog_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/respmeter/respmeter/metrics/slowlog"
)

// serve runs one request against l's handler.
func serve(l *slowlog.Log, method, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	l.Handler().ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

// getDoc GETs target and decodes the document generically, so the test sees
// the exact JSON shape.
func getDoc(t *testing.T, l *slowlog.Log, target string) map[string]any {
	t.Helper()
	rec := serve(l, http.MethodGet, target)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s = %d %q: %s", target, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("GET %s: %v\n%s", target, err, rec.Body)
	}
	return doc
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestHandlerJSON(t *testing.T) {
	l := slowlog.New(3, 10*time.Millisecond)
	at := time.Date(2024, 1, 2, 3, 4, 5, 678e6, time.UTC)
	for i, cmd := range []string{"set", "get", "hgetall", "get"} {
		e := slowlog.Entry{
			Time:    at.Add(time.Duration(i) * time.Second),
			Command: cmd,
			Args:    2,
			Client:  "10.0.0.1:5000",
			Phases: map[string]float64{
				"total":    (20 * time.Millisecond).Seconds() * float64(i+1),
				"upstream": (15 * time.Millisecond).Seconds(),
				"proxy":    (5 * time.Millisecond).Seconds(),
			},
		}
		if i == 3 {
			e.FirstKey = "a\x00" + strings.Repeat("b", 70)
			e.ClientName = "worker-1"
		}
		l.Add(e)
	}

	doc := getDoc(t, l, "/slowlog")
	if got := keys(doc); !slices.Equal(got, []string{"capacity", "entries", "len", "threshold_seconds"}) {
		t.Fatalf("document keys = %v", got)
	}
	if doc["threshold_seconds"] != 0.01 || doc["capacity"] != 3.0 || doc["len"] != 3.0 {
		t.Errorf("threshold_seconds, capacity, len = %v, %v, %v; want 0.01, 3, 3", doc["threshold_seconds"], doc["capacity"], doc["len"])
	}
	entries := doc["entries"].([]any)
	if len(entries) != 3 {
		t.Fatalf("%d entries, want 3", len(entries))
	}
	newest := entries[0].(map[string]any)
	if got := keys(newest); !slices.Equal(got, []string{"args", "client", "client_name", "command", "first_key", "id", "key_truncated", "phases_seconds", "time"}) {
		t.Errorf("newest entry keys = %v", got)
	}
	if got := keys(entries[1].(map[string]any)); !slices.Equal(got, []string{"args", "client", "command", "first_key", "id", "phases_seconds", "time"}) {
		t.Errorf("entry keys without the optional ones = %v", got)
	}
	wantFirst := `a\x00` + strings.Repeat("b", 62)
	if newest["id"] != 3.0 || newest["command"] != "get" || newest["first_key"] != wantFirst ||
		newest["key_truncated"] != true || newest["client"] != "10.0.0.1:5000" ||
		newest["client_name"] != "worker-1" || newest["args"] != 2.0 ||
		newest["time"] != "2024-01-02T03:04:08.678Z" {
		t.Errorf("newest entry = %v", newest)
	}
	phases := newest["phases_seconds"].(map[string]any)
	if phases["total"] != 0.08 || phases["upstream"] != 0.015 || phases["proxy"] != 0.005 {
		t.Errorf("phases_seconds = %v, want seconds", phases)
	}
	var gotIDs []float64
	for _, e := range entries {
		gotIDs = append(gotIDs, e.(map[string]any)["id"].(float64))
	}
	if !slices.Equal(gotIDs, []float64{3, 2, 1}) {
		t.Errorf("ids = %v, want newest first [3 2 1]", gotIDs)
	}

	for _, tc := range []struct {
		query string
		want  []float64
	}{
		{"?count=2", []float64{3, 2}},
		{"?count=1", []float64{3}},
		{"?count=0", nil},
		{"?count=10", []float64{3, 2, 1}},
		{"?count=-1", []float64{3, 2, 1}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			doc := getDoc(t, l, "/slowlog"+tc.query)
			entries, ok := doc["entries"].([]any)
			if !ok {
				t.Fatalf("entries = %#v, want an array", doc["entries"])
			}
			var got []float64
			for _, e := range entries {
				got = append(got, e.(map[string]any)["id"].(float64))
			}
			if !slices.Equal(got, tc.want) || doc["len"] != 3.0 {
				t.Errorf("ids = %v, len = %v; want %v, 3", got, doc["len"], tc.want)
			}
		})
	}
	if rec := serve(l, http.MethodGet, "/slowlog?count=x"); rec.Code != http.StatusBadRequest {
		t.Errorf("count=x: %d, want 400", rec.Code)
	}
}

func TestHandlerEmptyAndDisabled(t *testing.T) {
	rec := serve(slowlog.New(0, 0), http.MethodGet, "/slowlog")
	if !strings.Contains(rec.Body.String(), `"entries": []`) {
		t.Errorf("empty log: entries not []:\n%s", rec.Body)
	}
	doc := getDoc(t, slowlog.New(0, -1), "/slowlog")
	if doc["threshold_seconds"] != -1.0 || doc["capacity"] != 128.0 {
		t.Errorf("disabled: threshold_seconds, capacity = %v, %v; want -1, 128", doc["threshold_seconds"], doc["capacity"])
	}
}

func TestHandlerMethods(t *testing.T) {
	full := func() *slowlog.Log {
		l := slowlog.New(4, 0)
		l.Add(entry("get", 1))
		return l
	}
	for _, tc := range []struct {
		method, target string
		wantCode       int
		wantLen        int
	}{
		{http.MethodHead, "/slowlog", http.StatusOK, 1},
		{http.MethodDelete, "/slowlog", http.StatusNoContent, 0},
		{http.MethodPost, "/slowlog?reset=1", http.StatusNoContent, 0},
		{http.MethodPost, "/slowlog", http.StatusBadRequest, 1},
		{http.MethodPut, "/slowlog", http.StatusMethodNotAllowed, 1},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			l := full()
			rec := serve(l, tc.method, tc.target)
			if rec.Code != tc.wantCode || l.Len() != tc.wantLen {
				t.Fatalf("%d, Len %d; want %d, %d", rec.Code, l.Len(), tc.wantCode, tc.wantLen)
			}
			if tc.method == http.MethodHead && rec.Body.Len() != 0 {
				t.Errorf("HEAD has a body")
			}
			if tc.wantCode == http.StatusMethodNotAllowed && rec.Header().Get("Allow") == "" {
				t.Errorf("405 without Allow")
			}
		})
	}
}
