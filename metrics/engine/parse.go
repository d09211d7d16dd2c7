package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
)

// Errors. None of them reaches a caller of the exported API: they end up,
// wrapped, in the LastErr of ProbeStats and PollerStats (with the
// connection's own: I/O errors and respconn.ErrProtocol).
var (
	// errReply reports an error reply (-ERR ...) from the engine.
	errReply = errors.New("engine: error reply")
	// errShape reports a well-formed reply whose shape is not the one
	// documented for the command (for example a LATENCY HISTOGRAM entry
	// without histogram_usec).
	errShape = errors.New("engine: unexpected reply shape")
)

// replyErr returns the engine's error message as an error wrapping errReply
// if v is an error reply, and nil otherwise.
func replyErr(v respconn.Value) error {
	if v.IsError() {
		return fmt.Errorf("%w: %s", errReply, v.Str)
	}
	return nil
}

// cmdHist is one command's entry of LATENCY HISTOGRAM: the engine's
// cumulative call count and its latency histogram, both since the engine
// started or since CONFIG RESETSTAT.
type cmdHist struct {
	calls int64
	// buckets maps a bucket's upper bound in µs to the number of calls in
	// that bucket alone (not cumulative). The engine lists only non-empty
	// buckets, so a bound missing here had no calls.
	buckets map[int64]int64
}

// parseLatencyHistogram decodes the reply to LATENCY HISTOGRAM (Redis and
// Valkey >= 7.0, https://redis.io/docs/latest/commands/latency-histogram/).
// In RESP2 the reply is a flat array of name/entry pairs:
//
//	*2k  $name  *4  $5 calls  :<calls>  $14 histogram_usec  *2m  :<bound µs> :<cumulative count> ...
//
// Names are lower-case and subcommands are spelled container|sub
// ("client|setname"). Bounds are the engine's power-of-two buckets, as its
// HdrHistogram reports them in whole µs (1, 2, 4, 8, 16, 33, 66, ...,
// 4227, 8454, ...): a bound is listed only when its bucket holds calls, with
// the count of calls at or below it. The keys of each entry are matched by
// name, not position. An empty array (Dragonfly, or latency-tracking off
// since the last reset) decodes to an empty map. An error reply returns an
// error wrapping errReply; any other deviation returns errShape.
func parseLatencyHistogram(v respconn.Value) (map[string]cmdHist, error) {
	if err := replyErr(v); err != nil {
		return nil, err
	}
	if v.Type != resp.TypeArray || v.Null || len(v.Elems)%2 != 0 {
		return nil, fmt.Errorf("%w: latency histogram: not an array of name/entry pairs", errShape)
	}
	out := make(map[string]cmdHist, len(v.Elems)/2)
	for i := 0; i < len(v.Elems); i += 2 {
		name, entry := v.Elems[i], v.Elems[i+1]
		if !name.IsString() || entry.Type != resp.TypeArray || len(entry.Elems)%2 != 0 {
			return nil, fmt.Errorf("%w: latency histogram: entry %d", errShape, i/2)
		}
		h := cmdHist{calls: -1}
		var cum []respconn.Value
		for j := 0; j < len(entry.Elems); j += 2 {
			k, val := entry.Elems[j], entry.Elems[j+1]
			switch {
			case !k.IsString():
			case k.Str == "calls" && val.Type == resp.TypeInteger:
				h.calls = val.Int
			case k.Str == "histogram_usec" && val.Type == resp.TypeArray:
				cum = val.Elems
			}
		}
		if h.calls < 0 || cum == nil || len(cum)%2 != 0 {
			return nil, fmt.Errorf("%w: latency histogram: %q lacks calls or histogram_usec", errShape, name.Str)
		}
		h.buckets = make(map[int64]int64, len(cum)/2)
		var lastBound, lastCount int64 = 0, 0
		for j := 0; j < len(cum); j += 2 {
			b, c := cum[j], cum[j+1]
			if b.Type != resp.TypeInteger || c.Type != resp.TypeInteger || b.Int <= lastBound || c.Int < lastCount {
				return nil, fmt.Errorf("%w: latency histogram: %q: buckets not ascending", errShape, name.Str)
			}
			h.buckets[b.Int] = c.Int - lastCount
			lastBound, lastCount = b.Int, c.Int
		}
		out[name.Str] = h
	}
	return out, nil
}

// cmdStat is one command's line of INFO commandstats: cumulative calls and
// microseconds spent executing them (the engine's own time, without I/O or
// queueing), since the engine started or since CONFIG RESETSTAT.
type cmdStat struct {
	calls, usec int64
}

// infoText returns the text of an INFO reply (a bulk string).
func infoText(v respconn.Value) (string, error) {
	if err := replyErr(v); err != nil {
		return "", err
	}
	if v.Type != resp.TypeBlobString || v.Null {
		return "", fmt.Errorf("%w: INFO reply is not a bulk string", errShape)
	}
	return v.Str, nil
}

// infoFields calls fn for each "prefix<name>:<fields>" line of an INFO
// section's text (https://redis.io/docs/latest/commands/info/), with the
// <name> and the comma-separated key=value fields split into a map.
// Comment (#) and blank lines are skipped; both CRLF and LF line ends are
// accepted.
func infoFields(text, prefix string, fn func(name string, fields map[string]string) error) error {
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		name, list, ok := strings.Cut(rest, ":")
		if !ok || name == "" {
			return fmt.Errorf("%w: INFO line %q", errShape, line)
		}
		fields := make(map[string]string, 5)
		for kv := range strings.SplitSeq(list, ",") {
			k, v, _ := strings.Cut(kv, "=")
			fields[k] = v
		}
		if err := fn(name, fields); err != nil {
			return err
		}
	}
	return nil
}

// parseCommandStats decodes the text of INFO commandstats:
//
//	cmdstat_get:calls=3,usec=26,usec_per_call=8.67,rejected_calls=0,failed_calls=0
//
// into cumulative calls and usec by command name as the engine spells it
// ("get", "client|setname"; Dragonfly may use upper case). Fields other than
// calls and usec are ignored; a line without them returns errShape.
func parseCommandStats(text string) (map[string]cmdStat, error) {
	out := make(map[string]cmdStat)
	err := infoFields(text, "cmdstat_", func(name string, f map[string]string) error {
		calls, err1 := strconv.ParseInt(f["calls"], 10, 64)
		usec, err2 := strconv.ParseInt(f["usec"], 10, 64)
		if err1 != nil || err2 != nil || calls < 0 || usec < 0 {
			return fmt.Errorf("%w: commandstats: %q: calls=%q usec=%q", errShape, name, f["calls"], f["usec"])
		}
		out[name] = cmdStat{calls: calls, usec: usec}
		return nil
	})
	return out, err
}

// latencyPct holds the engine's own latency percentiles of one command, as
// INFO latencystats reports them (Redis >= 7 and Dragonfly): since the
// engine started or since CONFIG RESETSTAT, not since respmeter started.
type latencyPct struct {
	p50, p99, p999 time.Duration // 0 where the engine did not report it
}

// parseLatencyStats decodes the text of INFO latencystats:
//
//	latency_percentiles_usec_get:p50=1.003,p99=2.007,p99.9=2.007
//
// (fractional microseconds) by command name. The percentiles listed are
// configurable in Redis (latency-tracking-info-percentiles); p50, p99 and
// p99.9 are kept where present, others ignored.
func parseLatencyStats(text string) (map[string]latencyPct, error) {
	out := make(map[string]latencyPct)
	err := infoFields(text, "latency_percentiles_usec_", func(name string, f map[string]string) error {
		var l latencyPct
		for key, dst := range map[string]*time.Duration{"p50": &l.p50, "p99": &l.p99, "p99.9": &l.p999} {
			s, ok := f[key]
			if !ok {
				continue
			}
			us, err := strconv.ParseFloat(s, 64)
			if err != nil || us < 0 || us > float64(histHighestMicros) {
				return fmt.Errorf("%w: latencystats: %q: %s=%q", errShape, name, key, s)
			}
			*dst = time.Duration(us * float64(time.Microsecond))
		}
		out[name] = l
		return nil
	})
	return out, err
}

// containerName returns the command an engine-spelled name counts under:
// lower-cased, with a subcommand ("client|setname") cut to its container
// ("client").
func containerName(name string) string {
	name = strings.ToLower(name)
	if i := strings.IndexByte(name, '|'); i >= 0 {
		name = name[:i]
	}
	return name
}
