package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/spf13/cobra"

	"github.com/respmeter/respmeter/internal/capture"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/proxy"
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
	if err := checkCaptureFile(f.capture); err != nil {
		return cc, err
	}
	return cc, nil
}

// checkCaptureFile checks, before the proxy starts listening, what
// capture.Start checks when it creates path: that path does not exist (a
// capture is never overwritten) and that its directory does. "" passes.
func checkCaptureFile(path string) error {
	if path == "" {
		return nil
	}
	if _, err := os.Lstat(path); err == nil {
		return &fs.PathError{Op: "--capture", Path: path, Err: errCaptureExists}
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || !fi.IsDir() {
		return fmt.Errorf("--capture %s: no directory %s", path, filepath.Dir(path))
	}
	return nil
}

// errCaptureExists is checkCaptureFile's error for a file that exists (a
// conflict on the admin API: 409).
var errCaptureExists = fmt.Errorf("the file exists; a capture never overwrites one (choose another name or remove it): %w", fs.ErrExist)

// startCapture starts cc on p.
func startCapture(p *proxy.Proxy, cc proxy.CaptureConfig) error {
	if err := p.StartCapture(cc); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	return nil
}

// captureHandler serves the admin API of capture:
//
//	GET  /capture        the running or last capture's stats (JSON; 404 when none)
//	POST /capture/start  ?file=NAME[&duration=D][&sample=F][&redact=values]: start one (409 when one runs)
//	POST /capture/stop   stop it; its final stats
//
// NAME is a plain file name created new inside dir (captureFileIn); any
// other NAME, or an empty dir, gets 400 and writes nothing. The stack
// wraps this handler in metrics.MutationGuard: the POSTs need the token.
func captureHandler(p *proxy.Proxy, dir string) http.Handler {
	mux := http.NewServeMux()
	fail := writeJSONError
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
		if f.capture, err = captureFileIn(dir, f.capture); err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		cc, err := captureConfig(&f)
		if errors.Is(err, fs.ErrExist) {
			fail(w, http.StatusConflict, err)
			return
		}
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		if err := p.StartCapture(cc); err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, capture.ErrRunning) || errors.Is(err, fs.ErrExist) {
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

// captureFileIn returns the path of the capture file name inside dir, the
// --capture-dir: name must be a plain file name (no path separator, not
// "." or ".."), so that the file is created in dir itself and nowhere
// else; capture.Start creates it with O_EXCL, which follows no symlink
// (an existing file or symlink of that name fails with fs.ErrExist).
func captureFileIn(dir, name string) (string, error) {
	switch {
	case dir == "":
		return "", errors.New("captures through the admin API are off: start respmeter with --capture-dir")
	case name == "":
		return "", errors.New("file: required, a file name inside --capture-dir")
	case name == "." || name == ".." || strings.ContainsAny(name, `/\`) || strings.ContainsRune(name, 0):
		return "", fmt.Errorf("file %q: want a plain file name inside --capture-dir, no path", name)
	}
	return filepath.Join(dir, name), nil
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
	var monitor, out string
	imp := &cobra.Command{
		Use:   "import --monitor FILE --out CAPTURE",
		Short: "Turn redis-cli MONITOR output into a capture (no replies, no pipelines)",
		Long: `Turn the output of "redis-cli MONITOR" into a capture file that respmeter
replay can send: one connection per client address, every command at its
MONITOR time, a SELECT inserted where a client's db changes. MONITOR shows
neither replies nor pipelines, so the capture has no reply summaries (replay
compares nothing, it only times) and every command is a batch of its own.
Commands of Lua scripts and unix-socket clients are skipped; MONITOR does
not show AUTH or HELLO AUTH credentials either.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if monitor == "" || out == "" {
				return usageError(cmd, errors.New("--monitor and --out are required"))
			}
			f, err := os.Open(monitor)
			if err != nil {
				return failure(err)
			}
			defer f.Close()
			n, skipped, err := importMonitor(f, out)
			if err != nil {
				return failure(err)
			}
			fmt.Fprintf(stdout, "imported %d commands (%d lines skipped) into %s\n", n, skipped, out)
			return nil
		},
	}
	imp.Flags().StringVar(&monitor, "monitor", "", "redis-cli MONITOR output `file`")
	imp.Flags().StringVar(&out, "out", "", "capture `file` to write (must not exist)")
	cmd.AddCommand(info, imp)
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

// importMonitor turns "redis-cli MONITOR" output (lines such as
// `1701234567.123456 [0 127.0.0.1:5555] "SET" "k" "v"`) read from in into
// a capture at out: one connection per client address, each command a
// batch of its own at its MONITOR time, a SELECT first when the line's db
// differs from the connection's. MONITOR shows neither replies nor
// pipelines, so the capture has no reply summaries (replay compares
// nothing) and no batches of more than one command. Lines that are not
// commands (OK, "lua" and "unix" clients' lines included) are skipped and
// counted.
func importMonitor(in io.Reader, out string) (cmds, skipped int, err error) {
	c, err := capture.Start(out, capture.Options{Loops: 1, BufferBytes: 64 << 20, FlushEvery: 100 * time.Millisecond})
	if err != nil {
		return 0, 0, err
	}
	type conn struct {
		id  uint64
		db  string
		seq uint64
	}
	conns := map[string]*conn{}
	var base int64 = -1
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), resp.DefaultMaxBulkLen)
	var req []byte
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "+")
		ts, db, addr, args, ok := parseMonitorLine(line)
		if !ok {
			skipped++
			continue
		}
		if base < 0 {
			base = ts
		}
		cn := conns[addr]
		if cn == nil {
			id, _ := c.NewConn()
			cn = &conn{id: id, db: "0"}
			conns[addr] = cn
			c.Loop(0).Conn(cn.id, ts-base, nil)
		}
		req = req[:0]
		isSelect := len(args) == 2 && strings.EqualFold(string(args[0]), "select")
		// redis-server feeds MONITOR after running the command: a SELECT's
		// line shows the db it selected.
		if db != cn.db && !(isSelect && string(args[1]) == db) {
			req = respconn.AppendCommand(req, "SELECT", db)
			cn.db = db
			cn.seq++
			c.Loop(0).Batch(cn.id, ts-base, cn.seq, req, false)
			req = req[:0]
		}
		req = respconn.AppendCommand(req, args...)
		cn.seq++
		c.Loop(0).Batch(cn.id, ts-base, cn.seq, req, false)
		cmds++
		if isSelect {
			cn.db = string(args[1])
		}
		if st := c.Stats(); st.Dropped > 0 {
			break
		}
	}
	serr := c.Stop()
	if st := c.Stats(); st.Dropped > 0 {
		return cmds, skipped, fmt.Errorf("import: %d records dropped (a command larger than the buffer)", st.Dropped)
	}
	return cmds, skipped, errors.Join(sc.Err(), serr)
}

// parseMonitorLine splits one MONITOR line: time (ns since the epoch),
// db, client address and the arguments (quoted as sdscatrepr quotes them:
// \" \\ \n \r \t \a \b \xHH).
func parseMonitorLine(line string) (ts int64, db, addr string, args [][]byte, ok bool) {
	sp := strings.IndexByte(line, ' ')
	if sp < 0 || !strings.HasPrefix(line[sp:], " [") {
		return 0, "", "", nil, false
	}
	secs, frac, found := strings.Cut(line[:sp], ".")
	s, err1 := strconv.ParseInt(secs, 10, 64)
	us, err2 := strconv.ParseInt(frac, 10, 64)
	if !found || err1 != nil || err2 != nil || len(frac) != 6 {
		return 0, "", "", nil, false
	}
	rest := line[sp+2:]
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return 0, "", "", nil, false
	}
	db, addr, found = strings.Cut(rest[:end], " ")
	if !found || addr == "lua" || strings.HasPrefix(addr, "unix:") {
		return 0, "", "", nil, false
	}
	rest = rest[end+1:]
	for {
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			break
		}
		if rest[0] != '"' {
			return 0, "", "", nil, false
		}
		var a []byte
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			ch := rest[i]
			if ch != '\\' || i+1 >= len(rest) {
				a = append(a, ch)
				continue
			}
			i++
			switch rest[i] {
			case 'n':
				a = append(a, '\n')
			case 'r':
				a = append(a, '\r')
			case 't':
				a = append(a, '\t')
			case 'a':
				a = append(a, '\a')
			case 'b':
				a = append(a, '\b')
			case 'x':
				if i+2 < len(rest) {
					if v, err := strconv.ParseUint(rest[i+1:i+3], 16, 8); err == nil {
						a = append(a, byte(v))
						i += 2
						continue
					}
				}
				a = append(a, 'x')
			default:
				a = append(a, rest[i])
			}
		}
		if i >= len(rest) {
			return 0, "", "", nil, false
		}
		args = append(args, a)
		rest = rest[i+1:]
	}
	if len(args) == 0 {
		return 0, "", "", nil, false
	}
	return s*1e9 + us*1e3, db, addr, args, true
}
