package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/respmeter/respmeter/configs"
)

// runJSON is the summary's "run" section: what ran, where and when.
type runJSON struct {
	Version string    `json:"version"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	Written time.Time `json:"written"`
	// Seconds is Written − Started.
	Seconds float64 `json:"seconds"`
	// Final is true for the summary written at exit, false for SIGUSR1's.
	Final bool `json:"final"`
	// Listen and Admin are the bound addresses ("" for an admin that is
	// off); the rest are the configuration's settings.
	Listen               string   `json:"listen"`
	Admin                string   `json:"admin"`
	Upstream             string   `json:"upstream,omitempty"`
	Route                string   `json:"route"`
	Shards               []string `json:"shards,omitempty"`
	Cluster              string   `json:"cluster,omitempty"`
	UpstreamMode         string   `json:"upstream_mode"`
	Loops                int      `json:"loops"`
	Measure              bool     `json:"measure"`
	HDRLog               string   `json:"hdr_log,omitempty"`
	HDRIntervalSeconds   float64  `json:"hdr_interval_seconds"`
	ProbeIntervalSeconds float64  `json:"probe_interval_seconds"`
	EnginePollSeconds    float64  `json:"engine_poll_seconds"`
}

// checkSummaryPath fails when a summary could not be written at path: a
// file cannot be created in its directory. Called at start, so that a bad
// path is reported before the run rather than lost at its end.
func checkSummaryPath(path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

// writeSummary writes the run's JSON summary to st.cfg.Summary (nothing
// when it is ""): the /stats document since start, with "verdict" since
// start (as the "verdict:" line after the table), "verdict_latest" (the
// latest interval's, as /stats has it as "verdict"), "engine", "probe",
// "shard_engines", "heat" (heatDoc) and "run". final marks the summary written at exit. The file is written
// beside the target and renamed over it, so a reader never sees half of
// one. It returns the error, naming the file.
func (st *stack) writeSummary(final bool) error {
	path := st.cfg.Summary
	if path == "" {
		return nil
	}
	an := st.analyzer
	rec := an.SinceStart()
	now := time.Now()
	run := runJSON{
		Version: versionString(), PID: os.Getpid(),
		Started: an.Started(), Written: now, Seconds: now.Sub(an.Started()).Seconds(), Final: final,
		Listen: st.proxy.Addr(), Admin: st.adminAddr, Route: st.cfg.Route, Shards: st.cfg.Shards,
		Cluster: st.cfg.Cluster, UpstreamMode: st.cfg.UpstreamMode, Loops: st.loops, Measure: st.cfg.Measure,
		HDRLog: st.cfg.HDRLog, HDRIntervalSeconds: time.Duration(st.cfg.HDRInterval).Seconds(),
		ProbeIntervalSeconds: time.Duration(st.cfg.ProbeInterval).Seconds(),
		EnginePollSeconds:    time.Duration(st.cfg.EnginePoll).Seconds(),
	}
	if st.cfg.Route == configs.RouteNone || st.cfg.Route == "" {
		run.Upstream = st.cfg.Upstream
	}
	var buf bytes.Buffer
	err := st.set.WriteStats(&buf, func() map[string]any {
		return map[string]any{
			"run":            run,
			"verdict":        newVerdictJSON(&rec),
			"verdict_latest": an.verdictDoc(0),
			"engine":         an.engineDoc(an.Engine()),
			"probe":          an.probeDoc(an.Engine()),
			"shard_engines":  an.shardDocs(),
			"heat":           st.heatDoc(),
		}
	})
	if err == nil {
		err = writeFileAtomic(path, buf.Bytes())
	}
	if err != nil {
		return fmt.Errorf("summary %s: %w", path, err)
	}
	return nil
}

// heatDoc is the summary's "heat" section: the top 20 keys of each
// ranking (the /keys document) and the slot heat (/slots), or nil when
// heat is off.
func (st *stack) heatDoc() any {
	h := st.set.Heat()
	if h == nil {
		return nil
	}
	names := st.set.ShardNames()
	return map[string]any{"keys": h.Keys(20, names), "slots": h.Slots(names)}
}

// writeFileAtomic writes data to a new file beside path and renames it
// over path.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}
