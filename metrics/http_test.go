package metrics_test

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/respmeter/respmeter/metrics"
)

// statsDoc mirrors the /stats document.
type statsDoc struct {
	Commands    map[string]commandDoc   `json:"commands"`
	Totals      commandDoc              `json:"totals"`
	Think       durationsDoc            `json:"think"`
	TCPRTT      map[string]durationsDoc `json:"tcp_rtt"`
	Connections map[string]int64        `json:"connections"`
	Bytes       map[string]int64        `json:"bytes"`
	Shards      []shardDoc              `json:"shards"`
	Routing     routingDoc              `json:"routing"`
}

type shardDoc struct {
	Shard    string        `json:"shard"`
	Commands int64         `json:"commands"`
	Errors   int64         `json:"errors"`
	Total    percentileDoc `json:"total"`
	Upstream percentileDoc `json:"upstream"`
	Batch    struct {
		Count int64   `json:"count"`
		Mean  float64 `json:"mean"`
		P50   int64   `json:"p50"`
		P99   int64   `json:"p99"`
	} `json:"batch"`
}

type percentileDoc struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99.9"`
}

type routingDoc struct {
	RedirectsMoved   int64            `json:"redirects_moved"`
	RedirectsAsk     int64            `json:"redirects_ask"`
	TryAgainRetries  int64            `json:"tryagain_retries"`
	PinnedMisroutes  int64            `json:"pinned_misroutes"`
	CrossSlotReplies int64            `json:"crossslot_replies"`
	SharedStalls     int64            `json:"shared_stalls"`
	RedirectPenalty  durationsDoc     `json:"redirect_penalty"`
	ReorderWait      durationsDoc     `json:"reorder_wait"`
	Handoffs         map[string]int64 `json:"handoffs"`
	TopologyEvents   map[string]int64 `json:"topology_events"`
}

type commandDoc struct {
	Count  int64                   `json:"count"`
	Errors int64                   `json:"errors"`
	Phases map[string]durationsDoc `json:"phases"`
}

type durationsDoc struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99.9"`
	P9999 float64 `json:"p99.99"`
	Max   float64 `json:"max"`
}

func TestStatsHandler(t *testing.T) {
	s := metrics.NewSet(2, testNames)
	// get: 1..100 µs total on two loops, upstream 1/4 of total, one error.
	for v := 1; v <= 100; v++ {
		record(s, op{loop: v % 2, cmd: cmdGet, total: time.Duration(4*v) * us, upstream: time.Duration(v) * us, isErr: v == 50})
	}
	record(s, op{loop: 1, cmd: cmdPing, untimed: true})
	l := s.Loop(0)
	l.Lock()
	l.ThinkLocked(2 * time.Millisecond)
	l.Unlock()
	s.ClientOpened()
	s.Loop(0).AddUpstreamBytes(7, 9)

	rec := httptest.NewRecorder()
	s.StatsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	body := rec.Body.String()
	var doc statsDoc
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("decode: %v\n%s", err, body)
	}

	sec := func(us float64) float64 { return us / 1e6 }
	get := doc.Commands["get"]
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"get count", float64(get.Count), 100},
		{"get errors", float64(get.Errors), 1},
		{"get phases", float64(len(get.Phases)), 5},
		{"get total count", float64(get.Phases["total"].Count), 100},
		{"get total mean", get.Phases["total"].Mean, sec(202)},
		{"get total p50", get.Phases["total"].P50, sec(200)},
		{"get total p90", get.Phases["total"].P90, sec(360)},
		{"get total p99", get.Phases["total"].P99, sec(396)},
		{"get total p99.9", get.Phases["total"].P999, sec(400)},
		{"get total max", get.Phases["total"].Max, sec(400)},
		{"get upstream p50", get.Phases["upstream"].P50, sec(50)},
		{"get proxy p99.99", get.Phases["proxy"].P9999, sec(300)},
		{"ping count", float64(doc.Commands["ping"].Count), 1},
		{"ping phases", float64(len(doc.Commands["ping"].Phases)), 0},
		{"commands", float64(len(doc.Commands)), 2},
		{"totals count", float64(doc.Totals.Count), 101},
		{"totals total max", doc.Totals.Phases["total"].Max, sec(400)},
		{"think count", float64(doc.Think.Count), 1},
		{"think p50", doc.Think.P50, 0.002},   // exact below 2048 µs
		{"think mean", doc.Think.Mean, 0.002}, // exact
		{"clients", float64(doc.Connections["clients"]), 1},
		{"clients_total", float64(doc.Connections["clients_total"]), 1},
		{"upstream_lost", float64(doc.Connections["upstream_lost"]), 0},
		{"upstream_read", float64(doc.Bytes["upstream_read"]), 7},
		{"upstream_written", float64(doc.Bytes["upstream_written"]), 9},
	} {
		if math.Abs(tc.got-tc.want) > 1e-12 {
			t.Errorf("%s = %g, want %g", tc.name, tc.got, tc.want)
		}
	}
	if !strings.Contains(body, `"p99.9":`) || !strings.Contains(body, `"upstream_dial_errors": 0`) {
		t.Errorf("body lacks expected keys:\n%s", body)
	}
	// No shard registered: an empty array, not null; routing all zero.
	if !strings.Contains(body, `"shards": []`) || len(doc.Routing.Handoffs) != 6 || doc.Routing.RedirectsMoved != 0 {
		t.Errorf("shards/routing without shards: %+v %+v", doc.Shards, doc.Routing)
	}
}

func TestStatsHandlerMethods(t *testing.T) {
	h := metrics.NewSet(1, testNames).StatsHandler()
	for _, tc := range []struct {
		method   string
		code     int
		wantBody bool
	}{
		{http.MethodGet, http.StatusOK, true},
		{http.MethodHead, http.StatusOK, false},
		{http.MethodPost, http.StatusMethodNotAllowed, true},
	} {
		t.Run(tc.method, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, "/stats", nil))
			if rec.Code != tc.code || (rec.Body.Len() > 0) != tc.wantBody {
				t.Errorf("status %d, %d body bytes; want %d, body %v", rec.Code, rec.Body.Len(), tc.code, tc.wantBody)
			}
		})
	}
}

func TestAdminMux(t *testing.T) {
	s := populated()
	reg := prometheus.NewRegistry()
	if err := s.Register(reg); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(metrics.NewAdminMux(s, reg))
	defer srv.Close()

	for _, tc := range []struct {
		method, path string
		code         int
		contains     string
	}{
		{http.MethodGet, "/metrics", http.StatusOK, `respmeter_commands_total{command="get"} 3`},
		{http.MethodGet, "/stats", http.StatusOK, `"commands": {`},
		{http.MethodPost, "/stats", http.StatusMethodNotAllowed, ""},
		{http.MethodGet, "/nope", http.StatusNotFound, ""},
		{http.MethodGet, "/", http.StatusOK, `<script src="live/live.js">`},
		{http.MethodGet, "/live/live.js", http.StatusOK, `fetch("stats?window="`},
		{http.MethodGet, "/live/live.css", http.StatusOK, `.bar {`},
		{http.MethodPost, "/", http.StatusMethodNotAllowed, ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.contains) {
				t.Errorf("status %d, want %d; body contains %q: %v", resp.StatusCode, tc.code, tc.contains, strings.Contains(string(body), tc.contains))
			}
		})
	}
}
