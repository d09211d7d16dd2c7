package slowlog

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Handler returns a handler serving the Log, meant for /slowlog. GET (and
// HEAD) answers 200 with indented JSON, durations in seconds, entries newest
// first:
//
//	{"threshold_seconds": 0.01, "capacity": 128, "len": 2,
//	 "entries": [{"id": 1, "time": "2024-01-02T03:04:05.678Z", "command": "get",
//	              "first_key": "k", "args": 2, "client": "10.0.0.1:5000",
//	              "phases_seconds": {"total": 0.012, "upstream": 0.011, "proxy": 0.001}}, ...]}
//
// threshold_seconds is -1 for a disabled Log; len counts all entries held,
// even those ?count leaves out. The query ?count=N returns at most N entries
// (a negative N means all, as SLOWLOG GET -1 does); a malformed N gets 400.
// With ?engine=1 the document also holds "engine": the engines' own logs
// of costly commands, read as the request comes (see SetEngine), one
// EngineLog per engine:
//
//	"engine": [{"addr": "10.0.0.2:6379", "source": "commandlog",
//	            "entries": [{"kind": "slow", "id": 4, "time": "...", "duration_seconds": 0.012,
//	                         "command": "keys", "first_key": "", "args": 2, "client": "10.0.0.1:41000"},
//	                        {"kind": "large-reply", "id": 0, "bytes": 2097152, "command": "get", ...}]}]
//
// DELETE, and POST with ?reset=1, reset the Log and answer 204; other
// methods get 405. The handler may serve concurrently with Add.
func (l *Log) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			l.serveGet(w, r)
		case http.MethodDelete:
			l.Reset()
			w.WriteHeader(http.StatusNoContent)
		case http.MethodPost:
			if r.URL.Query().Get("reset") != "1" {
				http.Error(w, "slowlog: POST needs ?reset=1", http.StatusBadRequest)
				return
			}
			l.Reset()
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Allow", "GET, HEAD, DELETE, POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	})
}

// logJSON is the /slowlog document.
type logJSON struct {
	ThresholdSeconds float64     `json:"threshold_seconds"`
	Capacity         int         `json:"capacity"`
	Len              int         `json:"len"`
	Entries          []Entry     `json:"entries"`
	Engine           []EngineLog `json:"engine,omitempty"`
}

func (l *Log) serveGet(w http.ResponseWriter, r *http.Request) {
	count := -1
	if s := r.URL.Query().Get("count"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			http.Error(w, "slowlog: count must be an integer", http.StatusBadRequest)
			return
		}
		count = n
	}
	doc := logJSON{ThresholdSeconds: -1, Capacity: l.Capacity()}
	doc.Entries, doc.Len = l.entries(count) // Phases maps shared, only read here
	if l.Enabled() {
		doc.ThresholdSeconds = l.threshold.Seconds()
	}
	if r.URL.Query().Get("engine") == "1" && l.engine != nil {
		doc.Engine = l.engine(r.Context())
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(doc) // only fails when the client has gone
}
