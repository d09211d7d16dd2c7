package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/spf13/cobra"

	"github.com/respmeter/respmeter/configs"
	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/proxy"
	"github.com/respmeter/respmeter/proxy/resp"
	"github.com/respmeter/respmeter/routing"
)

// captureConfig checks the --capture flags.
func captureConfig(f *proxyFlags) (proxy.CaptureConfig, error) {
	cc := proxy.CaptureConfig{File: f.capture, Duration: f.captureDuration, Sample: f.captureSample}
	switch f.captureRedact {
	case "":
	case "values":
		cc.RedactValues = true
	default:
		return cc, fmt.Errorf("--capture-redact %q: only \"values\" (credentials are always redacted)", f.captureRedact)
	}
	if f.captureSample <= 0 || f.captureSample > 1 {
		return cc, fmt.Errorf("--capture-sample %v: a fraction in (0, 1]", f.captureSample)
	}
	if f.captureDuration < 0 {
		return cc, fmt.Errorf("--capture-duration %v: must not be negative", f.captureDuration)
	}
	return cc, nil
}

// startCapture starts cc on p, warning when the proxy's sessions are not
// the routed ones that capture hooks into.
func startCapture(p *proxy.Proxy, cfg configs.Config, cc proxy.CaptureConfig, log *slog.Logger) error {
	if !cfg.Routed() && cfg.UpstreamMode != configs.UpstreamShared {
		log.Warn("capture records routed sessions only: with --route none and --upstream-mode private nothing is captured; use --upstream-mode shared or --route",
			"component", "capture")
	}
	if err := p.StartCapture(cc); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	return nil
}

// captureHandler serves the admin API of capture:
//
//	GET  /capture        the running or last capture's stats (JSON; 404 when none)
//	POST /capture/start  ?file=F[&duration=D][&sample=F][&redact=values]: start one (409 when one runs)
//	POST /capture/stop   stop it; its final stats
func captureHandler(p *proxy.Proxy) http.Handler {
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(w http.ResponseWriter, code int, err error) {
		writeJSON(w, code, map[string]string{"error": err.Error()})
	}
	mux.HandleFunc("GET /capture", func(w http.ResponseWriter, _ *http.Request) {
		st, ok := p.CaptureStats()
		if !ok {
			fail(w, http.StatusNotFound, errors.New("no capture yet"))
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("POST /capture/start", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		f := proxyFlags{capture: q.Get("file"), captureSample: 1, captureRedact: q.Get("redact")}
		var err error
		if s := q.Get("duration"); s != "" {
			if f.captureDuration, err = time.ParseDuration(s); err != nil {
				fail(w, http.StatusBadRequest, fmt.Errorf("duration: %w", err))
				return
			}
		}
		if s := q.Get("sample"); s != "" {
			if f.captureSample, err = strconv.ParseFloat(s, 64); err != nil {
				fail(w, http.StatusBadRequest, fmt.Errorf("sample: %w", err))
				return
			}
		}
		if f.capture == "" {
			fail(w, http.StatusBadRequest, errors.New("file: required"))
			return
		}
		cc, err := captureConfig(&f)
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		if err := p.StartCapture(cc); err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, capture.ErrRunning) {
				code = http.StatusConflict
			}
			fail(w, code, err)
			return
		}
		st, _ := p.CaptureStats()
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("POST /capture/stop", func(w http.ResponseWriter, _ *http.Request) {
		st, err := p.StopCapture()
		switch {
		case errors.Is(err, proxy.ErrNoCapture):
			fail(w, http.StatusConflict, err)
		case err != nil:
			fail(w, http.StatusInternalServerError, err)
		default:
			writeJSON(w, http.StatusOK, st)
		}
	})
	return mux
}

// newCaptureCmd is "respmeter capture": info (and import).
func newCaptureCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "capture",
		Short: "Inspect capture files written by respmeter proxy --capture",
		Args:  noArgs,
	}
	info := &cobra.Command{
		Use:   "info FILE...",
		Short: "Summarize capture files: duration, connections, commands, pipeline depth, inter-arrival times, keys",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := capture.Load(args...)
			if err != nil {
				return failure(err)
			}
			return failure0(writeCaptureInfo(stdout, w))
		},
	}
	cmd.AddCommand(info)
	return cmd
}

// failure0 is failure(err) for a non-nil err, else nil.
func failure0(err error) error {
	if err != nil {
		return failure(err)
	}
	return nil
}

// captureInfo is what "capture info" prints.
type captureInfo struct {
	Duration    time.Duration
	Conns       int
	Commands    int
	Batches     int
	PerCommand  map[string]int
	Depth       []int           // commands per batch, sorted
	Gaps        []time.Duration // between a connection's batches, sorted
	Keys        int             // distinct keys (64-bit hashes)
	ValuesRedac bool
}

func summarizeWorkload(w *capture.Workload) captureInfo {
	ci := captureInfo{Duration: time.Duration(w.Duration), Conns: len(w.Conns), PerCommand: map[string]int{},
		ValuesRedac: w.Flags&capture.FlagValuesRedacted != 0}
	r := routing.NewResolver(nil)
	keys := map[uint64]struct{}{}
	var args, kb [][]byte
	var scan resp.RequestScanner
	for _, c := range w.Conns {
		for i, b := range c.Batches {
			ci.Batches++
			ci.Depth = append(ci.Depth, len(b.Cmds))
			if i > 0 {
				ci.Gaps = append(ci.Gaps, time.Duration(b.T-c.Batches[i-1].T))
			}
			for _, cmd := range b.Cmds {
				ci.Commands++
				ci.PerCommand[cmd.Name]++
				scan.Reset()
				_, kind, _ := scan.Scan(cmd.Req)
				args = resp.Args(cmd.Req, kind, args[:0])
				kb, _ = r.Keys(args, kb[:0])
				for _, k := range kb {
					keys[xxhash.Sum64(k)] = struct{}{}
				}
			}
		}
	}
	ci.Keys = len(keys)
	slices.Sort(ci.Depth)
	slices.Sort(ci.Gaps)
	return ci
}

func pctOf[T any](sorted []T, pct float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	i := int(pct / 100 * float64(len(sorted)-1))
	return sorted[i]
}

func writeCaptureInfo(out io.Writer, w *capture.Workload) error {
	ci := summarizeWorkload(w)
	fmt.Fprintf(out, "start          %s\n", time.Unix(0, w.Start).UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(out, "duration       %s\n", ci.Duration)
	fmt.Fprintf(out, "connections    %d\n", ci.Conns)
	fmt.Fprintf(out, "commands       %d in %d batches\n", ci.Commands, ci.Batches)
	fmt.Fprintf(out, "values         %s\n", map[bool]string{true: "redacted", false: "as sent"}[ci.ValuesRedac])
	fmt.Fprintf(out, "keys           %d distinct (estimate)\n", ci.Keys)
	fmt.Fprintf(out, "pipeline depth p50 %d, p99 %d, max %d commands per batch\n",
		pctOf(ci.Depth, 50), pctOf(ci.Depth, 99), pctOf(ci.Depth, 100))
	fmt.Fprintf(out, "inter-arrival  p50 %s, p99 %s, max %s between a connection's batches\n",
		pctOf(ci.Gaps, 50), pctOf(ci.Gaps, 99), pctOf(ci.Gaps, 100))
	names := make([]string, 0, len(ci.PerCommand))
	for n := range ci.PerCommand {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := ci.PerCommand[names[i]], ci.PerCommand[names[j]]
		return a > b || a == b && names[i] < names[j]
	})
	fmt.Fprintf(out, "\n%-20s %10s\n", "command", "count")
	for _, n := range names {
		fmt.Fprintf(out, "%-20s %10d\n", n, ci.PerCommand[n])
	}
	return nil
}
