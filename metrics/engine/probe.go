package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/internal/tlsconf"
	"github.com/respmeter/respmeter/metrics"
)

// DefaultProbeInterval is the Probe's PING interval when NewProbe is given
// zero or less.
const DefaultProbeInterval = 100 * time.Millisecond

// Histogram geometry of the Probe, the same as package metrics' so that the
// two can be compared (and merged) bucket for bucket.
const (
	histLowestMicros  = 1             // 1 µs; smaller values are recorded as 1
	histHighestMicros = 3_600_000_000 // 1 h; larger values are recorded as 1 h
	histSigFigs       = 3
)

// toMicros converts d to whole microseconds rounded up, clamped to 1 µs .. 1 h
// (as package metrics records).
func toMicros(d time.Duration) int64 {
	us := (int64(d) + int64(time.Microsecond) - 1) / int64(time.Microsecond)
	return min(max(us, histLowestMicros), histHighestMicros)
}

// Probe measures the round trip of PING to the engine on a connection of its
// own: the path between respmeter and the engine plus an engine that does
// next to nothing. Subtracting it from the upstream phase of real commands
// leaves the time they spent in the engine (and queued behind other
// clients' commands).
//
// Create it with NewProbe and start Run on a goroutine of its own; Stats,
// Register and the collector may be used from any goroutine.
type Probe struct {
	addr     string
	interval time.Duration
	logger   *slog.Logger
	login    respconn.Options // see SetLogin

	mu     sync.Mutex
	hist   *hdrhistogram.Histogram // round trips in µs since NewProbe
	win    *hdrhistogram.Histogram // round trips in µs since the last Window call
	sum    time.Duration           // exact sum of the round trips
	health health
}

// NewProbe returns a Probe that PINGs the engine at addr (host:port) every
// interval; zero or less means DefaultProbeInterval (100 ms). A nil logger
// discards. Nothing happens until Run.
func NewProbe(addr string, interval time.Duration, logger *slog.Logger) *Probe {
	if interval <= 0 {
		interval = DefaultProbeInterval
	}
	logger = newLogger(logger, "engine-probe", addr)
	return &Probe{
		addr:     addr,
		interval: interval,
		logger:   logger,
		hist:     hdrhistogram.New(histLowestMicros, histHighestMicros, histSigFigs),
		win:      hdrhistogram.New(histLowestMicros, histHighestMicros, histSigFigs),
		health:   health{logger: logger},
	}
}

// SetLogin makes the probe's connection authenticate (AUTH [user]
// password) before its CLIENT SETNAME, for an engine that requires a
// password. Call it before Run.
func (p *Probe) SetLogin(user, password string) {
	p.login = respconn.Options{User: user, Password: password}
}

// SetTLS makes the probe's connection speak TLS with d (each dial's
// handshake with d's configuration in use, the engine's certificate
// verified as it says); nil speaks plaintext. Call it after SetLogin and
// before Run.
func (p *Probe) SetTLS(d *tlsconf.Dialer) { p.login.TLS = d }

// Run probes until ctx is done, then closes its connection and returns. It
// connects (naming the connection respmeter-probe), sends PING at once and
// then every interval, and records each round trip: from just before writing
// PING to having read +PONG. A round trip slower than the interval delays
// the next PING rather than overlapping it. A failed dial, an error reply or
// a lost connection counts as an error in Stats; Run then reconnects after a
// pause that doubles from 100 ms up to 5 s while the engine stays down. Call
// Run once.
func (p *Probe) Run(ctx context.Context) {
	var bo backoff
	for ctx.Err() == nil {
		c, err := dial(ctx, p.addr, probeName, p.login)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.fail(fmt.Errorf("dial: %w", err))
			if !sleepCtx(ctx, bo.next()) {
				return
			}
			continue
		}
		bo.reset()
		err = p.probe(ctx, c)
		c.Close()
		if ctx.Err() != nil {
			return
		}
		p.fail(err)
		if !sleepCtx(ctx, bo.next()) {
			return
		}
	}
}

// probe PINGs on c until ctx is done or c fails, and returns the failure.
func (p *Probe) probe(ctx context.Context, c *conn) error {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		start := time.Now()
		v, err := c.Do(opTimeout, "PING")
		rtt := time.Since(start)
		if err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		if err := replyErr(v); err != nil {
			p.fail(fmt.Errorf("ping: %w", err)) // the connection is fine
		} else {
			p.record(rtt)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (p *Probe) record(rtt time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// toMicros keeps the value in range, so RecordValue cannot fail.
	_ = p.hist.RecordValue(toMicros(rtt))
	_ = p.win.RecordValue(toMicros(rtt))
	p.sum += rtt
	p.health.ok()
}

func (p *Probe) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.health.fail(err)
}

// Window returns the median round trip (whole µs, highest equivalent value)
// and the number of PINGs answered since the previous call to Window (or
// NewProbe), and starts a new window. One caller should own the windows.
func (p *Probe) Window() (p50 time.Duration, count int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	count = p.win.TotalCount()
	if count > 0 {
		p50 = time.Duration(p.win.ValueAtQuantile(50)) * time.Microsecond // pct 0-100
	}
	p.win.Reset()
	return p50, count
}

// ProbeStats summarizes a Probe's round trips since NewProbe.
type ProbeStats struct {
	// Count is the number of PINGs answered with PONG.
	Count int64
	// Mean is the exact mean round trip; P50, P99 and Max are read from the
	// HdrHistogram (whole µs, 3 significant digits, highest equivalent
	// value). All are 0 when Count is 0.
	Mean, P50, P99, Max time.Duration
	// Errors counts failed dials, error replies and lost connections.
	Errors int64
	// LastErr is the most recent error's message, kept after the engine
	// answers again; "" if there was none.
	LastErr string
}

// Stats returns the Probe's summary so far. It is safe for concurrent use.
func (p *Probe) Stats() ProbeStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := ProbeStats{Count: p.hist.TotalCount(), Errors: p.health.errors, LastErr: p.health.lastErr}
	if s.Count > 0 {
		s.Mean = p.sum / time.Duration(s.Count)
		s.P50 = time.Duration(p.hist.ValueAtQuantile(50)) * time.Microsecond // pct 0-100
		s.P99 = time.Duration(p.hist.ValueAtQuantile(99)) * time.Microsecond
		s.Max = time.Duration(p.hist.Max()) * time.Microsecond
	}
	return s
}

// Register registers a prometheus.Collector for the Probe with reg. At each
// scrape it exports:
//
//   - respmeter_upstream_probe_seconds: histogram of the PING round trips
//     since NewProbe, in seconds, with the classic buckets (1 µs .. 10 s)
//     and native buckets (schema 3) of respmeter_command_duration_seconds
//     (metrics.NewDurationsMetric; each HdrHistogram bucket counts at its
//     highest equivalent value); the sum is exact;
//   - respmeter_upstream_probe_errors_total: failed dials, error replies and
//     lost connections.
//
// The series carry no label naming the engine: register through
// prometheus.WrapRegistererWith(prometheus.Labels{"shard": addr}, reg), as
// respmeter does, so that probes of different engines can share a registry.
// Register returns reg's error, such as prometheus.AlreadyRegisteredError.
func (p *Probe) Register(reg prometheus.Registerer) error {
	return reg.Register(newProbeCollector(p))
}

// probeCollector exports a Probe at scrape time.
type probeCollector struct {
	p           *Probe
	rtt, errors *prometheus.Desc
}

var _ prometheus.Collector = (*probeCollector)(nil)

func newProbeCollector(p *Probe) *probeCollector {
	return &probeCollector{
		p: p,
		rtt: prometheus.NewDesc("respmeter_upstream_probe_seconds",
			"Round trip of PING to the engine on respmeter's probe connection in seconds: "+
				"the path plus an idle engine. Recorded in whole microseconds (1us..1h, 3 significant digits).",
			nil, nil),
		errors: prometheus.NewDesc("respmeter_upstream_probe_errors_total",
			"Failed probe dials, PING error replies and lost probe connections.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *probeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rtt
	ch <- c.errors
}

// Collect implements prometheus.Collector.
func (c *probeCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	p.mu.Lock()
	rtt := metrics.NewDurationsMetric(c.rtt, p.hist, p.sum)
	errs := p.health.errors
	p.mu.Unlock()
	ch <- rtt
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(errs))
}
