package slowlog

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/respmeter/respmeter/internal/respconn"
)

// The engine's own logs of costly commands, as EngineReader reads them.
const (
	// KindSlow is an entry of the engine's slow log (SLOWLOG, or COMMANDLOG
	// type slow): Seconds is its execution time.
	KindSlow = "slow"
	// KindLargeRequest is an entry of COMMANDLOG type large-request (Valkey
	// 8.1 and later): Bytes is the request's size.
	KindLargeRequest = "large-request"
	// KindLargeReply is an entry of COMMANDLOG type large-reply: Bytes is
	// the reply's size.
	KindLargeReply = "large-reply"
)

// EngineEntry is one entry of an engine's own command log, kept by the
// rules of Entry: the command's label, the first key (SafeFirstKey, cut to
// MaxKeyBytes and escaped), the argument count and the engine's peer. No
// other argument the engine logged is kept.
type EngineEntry struct {
	// Kind is KindSlow, KindLargeRequest or KindLargeReply.
	Kind string `json:"kind"`
	// ID is the engine's id of the entry (per kind).
	ID int64 `json:"id"`
	// Time is when the engine logged it (whole seconds).
	Time time.Time `json:"time"`
	// Seconds is the execution time of a slow entry (the engine logs
	// microseconds); 0 for the other kinds.
	Seconds float64 `json:"duration_seconds,omitempty"`
	// Bytes is the request's or the reply's size for a large-request or
	// large-reply entry; 0 for a slow one.
	Bytes int64 `json:"bytes,omitempty"`
	// Command is the label of respmeter's command table ("other" for a
	// command it does not know), as in Entry.
	Command string `json:"command"`
	// FirstKey and KeyTruncated are as in Entry. The engine itself cuts
	// an argument after 128 bytes (Redis, Valkey); such a key is flagged.
	FirstKey     string `json:"first_key"`
	KeyTruncated bool   `json:"key_truncated,omitempty"`
	// Args is the argument count the engine saw (including the command
	// name; the engine logs at most 32 and says how many more there were).
	Args int `json:"args"`
	// Client is the engine's peer, ip:port: for a command sent through
	// respmeter, respmeter's upstream connection, not the client.
	Client string `json:"client"`
	// ClientName is the peer's CLIENT SETNAME name, if any.
	ClientName string `json:"client_name,omitempty"`
	// Respmeter marks the commands of respmeter's own side connections
	// (their names start "respmeter-": the engine poll, the probe).
	Respmeter bool `json:"respmeter,omitempty"`
}

// EngineLog is what EngineReader.Read found on one engine.
type EngineLog struct {
	// Addr is the engine's host:port.
	Addr string `json:"addr"`
	// Source is "commandlog" (COMMANDLOG GET, Valkey 8.1 and later: slow,
	// large-request and large-reply entries) or "slowlog" (SLOWLOG GET:
	// slow entries only), or "" when neither could be read.
	Source string `json:"source"`
	// Entries are newest first within each kind, the kinds in the order
	// slow, large-request, large-reply.
	Entries []EngineEntry `json:"entries"`
	// Error says why the log could not be read, "" when it was.
	Error string `json:"error,omitempty"`
}

// EngineReader reads the command logs of engines on connections of its
// own (named respmeter-slowlog, so their own entries are marked).
type EngineReader struct {
	// Login authenticates the connection and may give it TLS.
	Login respconn.Options
	// Count is the entries read of each kind; <= 0 means DefaultCapacity.
	Count int
	// Timeout bounds the dial and each request; <= 0 means 2 s.
	Timeout time.Duration
	// Label gives the command table's label of a logged command and the
	// position of its first key in args (-1 for none), as the proxy finds
	// them for its own entries. args are the engine's logged arguments.
	Label func(args [][]byte) (label string, keyPos int)
	// Show shows a first key as Log.SetKeyShow's function does; nil
	// escapes it.
	Show func(key []byte, truncated bool) (string, bool)
}

// readerName is the CLIENT SETNAME of EngineReader's connections.
const readerName = "respmeter-slowlog"

// Read returns the command log of the engine at addr: COMMANDLOG GET's
// three kinds where the engine has COMMANDLOG, else SLOWLOG GET. A failure
// is reported in EngineLog.Error, never as a partial log.
func (r EngineReader) Read(ctx context.Context, addr string) EngineLog {
	out := EngineLog{Addr: addr, Entries: []EngineEntry{}}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	count := r.Count
	if count <= 0 {
		count = DefaultCapacity
	}
	n := strconv.Itoa(count)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	opts := r.Login
	opts.Name, opts.Timeout = readerName, timeout
	c, err := respconn.Dial(ctx, addr, opts)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer c.Close()
	kinds := []string{KindSlow, KindLargeRequest, KindLargeReply}
	vs, err := c.Pipeline(timeout, []string{"COMMANDLOG", "GET", n, KindSlow},
		[]string{"COMMANDLOG", "GET", n, KindLargeRequest}, []string{"COMMANDLOG", "GET", n, KindLargeReply})
	if err == nil && vs[0].IsError() {
		// No COMMANDLOG (Redis, Valkey before 8.1): the slow log only.
		var v respconn.Value
		v, err = c.Do(timeout, "SLOWLOG", "GET", n)
		vs, kinds, out.Source = []respconn.Value{v}, kinds[:1], "slowlog"
	} else {
		out.Source = "commandlog"
	}
	if err != nil {
		out.Source, out.Error = "", err.Error()
		return out
	}
	for i, v := range vs {
		es, err := r.parse(kinds[i], v)
		if err != nil {
			out.Source, out.Entries, out.Error = "", []EngineEntry{}, err.Error()
			return out
		}
		out.Entries = append(out.Entries, es...)
	}
	return out
}

// parse turns a COMMANDLOG GET or SLOWLOG GET reply into entries of kind.
// An entry is [id, unix time, value, [arg ...], "ip:port", "name"]: value
// is microseconds for slow, bytes for the large kinds.
func (r EngineReader) parse(kind string, v respconn.Value) ([]EngineEntry, error) {
	if err := v.Err(); err != nil {
		return nil, err
	}
	if !v.IsArray() {
		return nil, errors.New("slowlog: the engine's log is not an array")
	}
	out := make([]EngineEntry, 0, len(v.Elems))
	for _, ev := range v.Elems {
		f := ev.Elems
		if len(f) < 4 || !f[3].IsArray() {
			return nil, errors.New("slowlog: an entry of the engine's log has no arguments")
		}
		e := EngineEntry{Kind: kind, ID: f[0].Int, Time: time.Unix(f[1].Int, 0).UTC()}
		if kind == KindSlow {
			e.Seconds = float64(f[2].Int) / 1e6
		} else {
			e.Bytes = f[2].Int
		}
		args := make([][]byte, 0, len(f[3].Elems))
		for _, a := range f[3].Elems {
			args = append(args, []byte(a.Str))
		}
		e.Args = len(args)
		if len(args) > 0 {
			// "... (N more arguments)": the engine kept 31 of them.
			last := string(args[len(args)-1])
			if rest, ok := strings.CutPrefix(last, "... ("); ok {
				if more, ok := strings.CutSuffix(rest, " more arguments)"); ok {
					if m, err := strconv.Atoi(more); err == nil {
						args = args[:len(args)-1]
						e.Args = len(args) + m
					}
				}
			}
		}
		e.Command = "other"
		if len(args) > 0 && r.Label != nil {
			label, pos := r.Label(args)
			e.Command = label
			if k, ok := SafeFirstKey(label, args, pos); ok {
				// The engine's own cut: the first 128 bytes, then
				// "... (N more bytes)".
				cut := false
				if i := strings.LastIndex(string(k), "... ("); i >= 0 && strings.HasSuffix(string(k), " more bytes)") {
					k, cut = k[:i], true
				}
				e.FirstKey, e.KeyTruncated = showKey(r.Show, string(k), cut)
			}
		}
		if len(f) > 4 {
			e.Client = f[4].Str
		}
		if len(f) > 5 {
			e.ClientName = f[5].Str
		}
		e.Respmeter = strings.HasPrefix(e.ClientName, "respmeter-")
		out = append(out, e)
	}
	return out, nil
}

// SetEngine makes the handler's ?engine=1 answer with read's logs, one per
// engine (the upstream, or every shard), e.g. EngineReader.Read of each.
// read is called on the HTTP request's goroutine with its context. Call
// SetEngine before the handler serves.
func (l *Log) SetEngine(read func(ctx context.Context) []EngineLog) { l.engine = read }
