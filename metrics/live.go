package metrics

import (
	"embed"
	"io/fs"
	"net/http"
)

// liveFiles is the live page: index.html, live.js and live.css, plain
// HTML, CSS and JavaScript with no third-party code, compiled into the
// binary so that the page works without network access.
//
//go:embed live
var liveFiles embed.FS

// LiveHandler returns a handler serving the live page: GET / answers
// live/index.html, which loads live/live.js and live/live.css (served
// under /live/) and, every second, /stats?window=W (W the page's window
// selector, 10s by default; see StatsHandlerWindowed), rendering per
// command the rate and p50/p99/p99.9 of each phase in milliseconds, the
// verdict's shares as a bar, engine vs path and, when routing, per-shard
// rows and each shard engine's atomic slot migrations (running, then the
// latest ended). Mount it at the root of the admin mux (NewAdminMux does), next to
// /stats: the page reads it by a relative URL.
func LiveHandler() http.Handler {
	sub, err := fs.Sub(liveFiles, "live")
	if err != nil {
		panic(err) // the embedded tree always has it
	}
	files := http.StripPrefix("/live/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			w.Header().Set("Cache-Control", "no-store")
			http.ServeFileFS(w, r, sub, "index.html")
			return
		}
		files.ServeHTTP(w, r)
	})
}
