package engine

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/internal/tlsconf"
	"github.com/respmeter/respmeter/metrics"
)

// DefaultPollInterval is the Poller's interval when NewPoller is given zero
// or less: the verdict's default interval (metrics/verdict), so that each
// interval has a poll of its own.
const DefaultPollInterval = time.Second

// Sources of engine statistics, as listed by Poller.Sources.
const (
	// SourceLatencyHistogram is LATENCY HISTOGRAM (Redis and Valkey >= 7):
	// per-command histograms with power-of-two microsecond buckets.
	SourceLatencyHistogram = "latency_histogram"
	// SourceLatencyStats is INFO latencystats (Dragonfly, and Redis >= 7 when
	// LATENCY HISTOGRAM is empty): per-command percentiles since the engine
	// started, no buckets. Used only when LATENCY HISTOGRAM is empty or fails.
	SourceLatencyStats = "latencystats"
	// SourceCommandStats is INFO commandstats: per-command calls and
	// microseconds of execution.
	SourceCommandStats = "commandstats"
)

// otherLabel is the command label of engine commands not in the names set.
const otherLabel = "other"

// Poller polls the engine's own per-command statistics on a connection of
// its own and turns the engine's cumulative counters into deltas since the
// Poller's first poll and over the last poll interval. Its engine time is
// execution only: it leaves out reading and parsing the request, queueing
// behind other clients and writing the reply, which the upstream phase
// measured by the proxy includes.
//
// Create it with NewPoller and start Run on a goroutine of its own; all other
// methods are safe for concurrent use.
type Poller struct {
	addr   string
	every  time.Duration
	logger *slog.Logger
	login  respconn.Options // see SetLogin
	labels []string         // command labels; index = ID, plus "other" if absent
	index  map[string]int   // lower-case label -> index in labels
	other  int              // index of "other"

	now    chan chan struct{} // PollNow's requests
	mu     sync.Mutex
	health health
	polls  int64
	runID  string // of the engine last connected to; "" if unknown
	zone   string // its availability_zone (INFO server, Valkey 9.1 on); "" if none

	// Atomic slot migrations (migrations.go): slotJobs is whether this
	// session's engine answers CLUSTER GETSLOTMIGRATIONS, migPolled whether
	// a poll has read them yet, migSkip the names of the jobs the engine
	// lists that are not in migrations: those that had ended by then, and
	// those dropped past maxMigrations (the engine keeps up to
	// cluster-slot-migration-log-max-len); migStarted and migEnded count
	// the jobs' starts and ends (MigrationCounts).
	slotJobs             bool
	migPolled            bool
	migrations           []Migration
	migSkip              map[string]bool
	migStarted, migEnded int64

	lastPoll     time.Time // when the last successful poll was sent
	lastInterval time.Duration
	sources      []string // of the last successful poll

	// Previous cumulative samples, by engine command name. statBase and
	// histBase report whether there is one to subtract from; an empty map
	// with the flag set means "everything counted now is new" (a restarted
	// engine).
	prevStat map[string]cmdStat
	statBase bool
	prevHist map[string]cmdHist
	histBase bool

	cmds   []labelStats // indexed like labels
	bounds []int64      // ascending union of the histogram bounds seen, µs

	// Witnesses of the command thread (witness.go): procRoot is "/proc";
	// pid is the engine's process on this host, 0 when it is elsewhere or
	// unknown; prevWit the last poll's cumulative readings (hasPrevWit);
	// wit the deltas of the last poll interval (hasWit).
	procRoot          string
	pid               int
	prevWit           witnessSample
	hasPrevWit        bool
	wit               Witness
	hasWit            bool
	witTotal          Witness       // the sum of every interval's wit
	witCPU, witRunQ   time.Duration // sums of HostMainCPU|MainCPU and RunQueue since the first poll
	witHasCPU, witHRQ bool
}

// labelStats is what the Poller has accumulated for one command label.
type labelStats struct {
	calls, usec         int64 // commandstats deltas since the first poll
	lastCalls, lastUsec int64 // commandstats deltas of the last poll interval
	hist                map[int64]int64
	histCount           int64           // sum of hist
	lastHist            map[int64]int64 // LATENCY HISTOGRAM deltas of the last poll interval
	lat                 latencyPct      // from latencystats, the last poll only
	hasLat              bool
}

// NewPoller returns a Poller of the engine at addr (host:port) that polls
// every every; zero or less means DefaultPollInterval (1 s). names[i] is the
// command label of ID i, as given to metrics.NewSet: engine commands are
// counted under their lower-cased name (subcommands under their container:
// client|setname under "client") when that is in names, and under "other"
// otherwise, so labels never come from the engine. "other" is added if
// names lacks it. NewPoller panics if a name is empty or repeated
// (case-insensitively), since that would make clashing series. A nil logger
// discards. Nothing happens until Run.
func NewPoller(addr string, every time.Duration, names []string, logger *slog.Logger) *Poller {
	if every <= 0 {
		every = DefaultPollInterval
	}
	logger = newLogger(logger, "engine-poller", addr)
	p := &Poller{
		addr:   addr,
		every:  every,
		logger: logger,
		index:  make(map[string]int, len(names)+1),
		health: health{logger: logger},
		now:    make(chan chan struct{}),

		procRoot: "/proc",
	}
	for i, n := range names {
		l := strings.ToLower(n)
		if _, dup := p.index[l]; dup || l == "" {
			panic(fmt.Sprintf("engine: command name %d (%q) is empty or repeated", i, n))
		}
		p.index[l] = i
		p.labels = append(p.labels, l)
	}
	if _, ok := p.index[otherLabel]; !ok {
		p.index[otherLabel] = len(p.labels)
		p.labels = append(p.labels, otherLabel)
	}
	p.other = p.index[otherLabel]
	p.cmds = make([]labelStats, len(p.labels))
	return p
}

// SetLogin makes the poller's connection authenticate (AUTH [user]
// password) before its CLIENT SETNAME, for an engine that requires a
// password. Call it before Run.
func (p *Poller) SetLogin(user, password string) {
	p.login = respconn.Options{User: user, Password: password}
}

// SetTLS makes the poller's connection speak TLS with d (each dial's
// handshake with d's configuration in use, the engine's certificate
// verified as it says); nil speaks plaintext. Call it after SetLogin and
// before Run.
func (p *Poller) SetTLS(d *tlsconf.Dialer) { p.login.TLS = d }

// label returns the index of the label an engine command name counts under.
func (p *Poller) label(engineName string) int {
	if i, ok := p.index[containerName(engineName)]; ok {
		return i
	}
	return p.other
}

// Run polls until ctx is done, then closes its connection and returns. It
// connects (naming the connection respmeter-poll), notes the engine's run_id
// (INFO server) to tell a restarted engine from CONFIG RESETSTAT, polls at
// once and then every interval. The first poll after NewPoller is the
// baseline that later deltas are taken from. A failed dial, a lost
// connection or a failed INFO commandstats counts as an error; after a
// connection failure Run reconnects after a pause that doubles from 100 ms up
// to 5 s while the engine stays down. Call Run once.
func (p *Poller) Run(ctx context.Context) {
	var bo backoff
	for ctx.Err() == nil {
		c, err := dial(ctx, p.addr, pollName, p.login)
		if err == nil {
			bo.reset()
			err = p.session(ctx, c)
			c.Close()
		} else {
			err = fmt.Errorf("dial: %w", err)
		}
		if ctx.Err() != nil {
			return
		}
		p.fail(err)
		if !sleepCtx(ctx, bo.next()) {
			return
		}
	}
}

// session polls on c until ctx is done or c fails, and returns the failure.
func (p *Poller) session(ctx context.Context, c *conn) error {
	v, err := c.Do(opTimeout, "INFO", "server")
	if err != nil {
		return fmt.Errorf("info server: %w", err)
	}
	if text, err := infoText(v); err == nil {
		p.noteRunID(runID(text))
		vals := infoValues(text)
		pid, _ := strconv.Atoi(vals["process_id"])
		pid, err := localPID(p.procRoot, p.addr, pid)
		p.mu.Lock()
		p.pid, p.zone = pid, vals["availability_zone"]
		p.mu.Unlock()
		p.logger.Debug("engine process", "pid", pid, "on_this_host", err == nil)
	}
	// An engine in cluster mode with atomic slot migration (Valkey 9.0 on)
	// lists its jobs; others answer an error (no such subcommand, or
	// cluster support disabled), and are not asked again this session.
	v, err = c.Do(opTimeout, "CLUSTER", "GETSLOTMIGRATIONS")
	if err != nil {
		return fmt.Errorf("cluster getslotmigrations: %w", err)
	}
	p.mu.Lock()
	p.slotJobs = !v.IsError()
	p.mu.Unlock()
	tick := time.NewTicker(p.every)
	defer tick.Stop()
	var asked chan struct{} // a PollNow waiting for this poll
	for {
		err := p.poll(c)
		if asked != nil {
			close(asked)
			asked = nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case asked = <-p.now:
			// The next regular poll half an interval after the next
			// request is due: a caller asking every interval gets every
			// poll, none a moment before its own.
			tick.Reset(p.every + p.every/2)
		}
	}
}

// PollNow makes Run poll at once and waits for that poll to end, at most
// timeout in all; it reports whether the poll ended in time (a failed poll
// counts as ended). The regular polls then wait 1.5 poll intervals, so
// that a caller asking every poll interval gets one poll per interval,
// taken when it asks, and none just before. Safe for concurrent use; false while
// Run is not connected.
func (p *Poller) PollNow(timeout time.Duration) bool {
	done := make(chan struct{})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case p.now <- done:
	case <-t.C:
		return false
	}
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// Interval returns the poll interval.
func (p *Poller) Interval() time.Duration { return p.every }

// Engine returns the value of the engine label of p's series: the run_id
// of the engine last polled (INFO server), or the address p was given
// while none is known.
func (p *Poller) Engine() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.engineLocked()
}

func (p *Poller) engineLocked() string {
	if p.runID == "" {
		return p.addr
	}
	return p.runID
}

// Zone returns the engine's availability zone (INFO server's
// availability_zone, the availability-zone setting of Valkey 9.1 and
// later) as it was when Run last connected; "" when the engine has none
// or Run has not connected.
func (p *Poller) Zone() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.zone
}

// runID returns the run_id field of INFO server's text, or "".
func runID(text string) string {
	for line := range strings.Lines(text) {
		if id, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "run_id:"); ok {
			return id
		}
	}
	return ""
}

// noteRunID records the run_id of the engine just connected to. A different
// run_id than before means the engine restarted and its counters began
// again: everything it reports next is new since the last poll.
func (p *Poller) noteRunID(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id != "" && p.runID != "" && id != p.runID {
		p.prevStat = map[string]cmdStat{}
		p.prevHist = map[string]cmdHist{}
	}
	if id != "" {
		p.runID = id
	}
}

// poll takes one sample of the engine's statistics and applies it. It
// returns an error only when the connection must be dropped; a failed source
// is counted (commandstats) or replaced by another (LATENCY HISTOGRAM).
func (p *Poller) poll(c *conn) error {
	now := time.Now()
	// Pipelined: a single-threaded engine answers both from the same state.
	cmds := [][]string{{"LATENCY", "HISTOGRAM"}, {"INFO", "commandstats"}, {"INFO", "cpu"}, {"INFO", "stats"}}
	p.mu.Lock()
	slotJobs := p.slotJobs
	p.mu.Unlock()
	if slotJobs {
		cmds = append(cmds, []string{"CLUSTER", "GETSLOTMIGRATIONS"})
	}
	vs, err := c.Pipeline(opTimeout, cmds...)
	if err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	if slotJobs {
		if jobs, err := parseMigrations(vs[4]); err == nil {
			p.applyMigrations(now, jobs)
		} else {
			p.logger.Debug("cluster getslotmigrations", "err", err)
		}
	}
	cpuText, _ := infoText(vs[2]) // "" when the engine refuses: no CPU witness
	statsText, _ := infoText(vs[3])
	wit := parseWitness(cpuText, statsText)
	wit.at = now
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	if pid > 0 {
		if h, err := readHost(p.procRoot, pid); err == nil {
			wit.host, wit.hasHost = h, true
		}
	}
	hist, herr := parseLatencyHistogram(vs[0])
	if herr != nil {
		hist = nil
	}
	var lat map[string]latencyPct
	if len(hist) == 0 {
		v, err := c.Do(opTimeout, "INFO", "latencystats")
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		if text, err := infoText(v); err == nil {
			lat, _ = parseLatencyStats(text) // a bad section is just not used
		}
	}
	var stat map[string]cmdStat
	text, serr := infoText(vs[1])
	if serr == nil {
		stat, serr = parseCommandStats(text)
	}
	if serr != nil {
		stat = nil
	}
	p.apply(now, hist, herr == nil, stat, lat)
	p.applyWitness(wit, stat != nil)
	if serr != nil {
		p.fail(fmt.Errorf("info commandstats: %w", serr))
	}
	return nil
}

func (p *Poller) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.health.fail(err)
}

// apply folds one poll's samples into the Poller's state. hist is the LATENCY
// HISTOGRAM sample and histOK reports whether it was a valid reply (an empty
// one included); stat is nil when INFO commandstats failed; lat is non-nil
// only when LATENCY HISTOGRAM was empty or failed. Counters that went
// backwards (CONFIG RESETSTAT, or a restart not caught by run_id) are taken
// as restarted from zero: the delta is the new value. A reset followed by more
// calls than before within one interval is undercounted; nothing tells it
// apart.
func (p *Poller) apply(now time.Time, hist map[string]cmdHist, histOK bool, stat map[string]cmdStat, lat map[string]latencyPct) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.cmds {
		c := &p.cmds[i]
		c.lastCalls, c.lastUsec, c.hasLat = 0, 0, false
		clear(c.lastHist)
	}
	var sources []string
	if histOK && len(hist) > 0 {
		sources = append(sources, SourceLatencyHistogram)
	}
	if len(lat) > 0 {
		sources = append(sources, SourceLatencyStats)
	}
	if stat != nil {
		sources = append(sources, SourceCommandStats)
	}

	if histOK {
		if p.histBase {
			for name, cur := range hist {
				p.addHist(p.label(name), cur, p.prevHist[name])
			}
		}
		p.prevHist, p.histBase = hist, true
	}
	if stat != nil {
		if p.statBase {
			for name, cur := range stat {
				d := cur
				if prev, ok := p.prevStat[name]; ok && cur.calls >= prev.calls && cur.usec >= prev.usec {
					d = cmdStat{calls: cur.calls - prev.calls, usec: cur.usec - prev.usec}
				}
				c := &p.cmds[p.label(name)]
				c.calls += d.calls
				c.usec += d.usec
				c.lastCalls += d.calls
				c.lastUsec += d.usec
			}
		}
		p.prevStat, p.statBase = stat, true
	}
	for name, l := range lat {
		c := &p.cmds[p.label(name)]
		// Percentiles of several engine commands (subcommands of one
		// container) cannot be merged; keep the largest of each.
		c.lat.p50 = max(c.lat.p50, l.p50)
		c.lat.p99 = max(c.lat.p99, l.p99)
		c.lat.p999 = max(c.lat.p999, l.p999)
		c.hasLat = true
	}
	for i := range p.cmds {
		if !p.cmds[i].hasLat {
			p.cmds[i].lat = latencyPct{}
		}
	}

	if !p.lastPoll.IsZero() {
		p.lastInterval = now.Sub(p.lastPoll)
	}
	p.lastPoll = now
	p.sources = sources
	p.polls++
	if stat != nil {
		p.health.ok()
	}
}

// applyWitness folds one poll's cumulative witness readings into the
// Poller: the deltas since the previous poll become the last interval's
// Witness, its Exec the commandstats time of that interval (execOK: INFO
// commandstats answered).
func (p *Poller) applyWitness(cur witnessSample, execOK bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hasPrevWit {
		w := cur.delta(p.prevWit)
		if execOK {
			w.Work = make([]Work, len(p.cmds))
			for i := range p.cmds {
				c := &p.cmds[i]
				t := time.Duration(c.lastUsec) * time.Microsecond
				w.Exec += t
				w.Work[i] = Work{Calls: c.lastCalls, Time: t, Square: square(t, c.lastCalls, c.lastHist)}
			}
		}
		p.wit, p.hasWit = w, true
		p.witTotal.add(w)
		switch {
		case w.HasHost:
			p.witCPU += w.HostMainCPU
			p.witRunQ += w.RunQueue
			p.witHasCPU, p.witHRQ = true, true
		case w.HasMainCPU:
			p.witCPU += w.MainCPU
			p.witHasCPU = true
		}
	}
	p.prevWit, p.hasPrevWit = cur, true
}

// Witness returns the command thread's witnesses over the last poll
// interval (see Witness); ok is false before the second successful poll.
func (p *Poller) Witness() (w Witness, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wit, p.hasWit
}

// WitnessTotal returns the sum of the witnesses of every poll interval
// since the first poll (the Has flags: the latest interval's); take two and
// subtract them (Witness.Since) for the witnesses over a stretch of one's
// own, to the nearest polls. ok is false before the second successful
// poll.
func (p *Poller) WitnessTotal() (w Witness, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.witTotal, p.hasWit
}

// Labels returns the command labels, indexed like Witness.Work: the names
// given to NewPoller, lower-cased, then "other" when they lack it.
func (p *Poller) Labels() []string { return slices.Clone(p.labels) }

// Host returns the PID of the engine's process when it runs on this host
// and respmeter reads its /proc entries (the run-queue witness), else 0.
func (p *Poller) Host() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// addHist adds the calls of cur that are not in prev to the histogram of
// label i. A bucket or the call count going down means the engine's
// histogram restarted: then all of cur is new.
func (p *Poller) addHist(i int, cur, prev cmdHist) {
	reset := cur.calls < prev.calls
	for b, n := range prev.buckets {
		if cur.buckets[b] < n {
			reset = true
		}
	}
	c := &p.cmds[i]
	for b, n := range cur.buckets {
		if !reset {
			n -= prev.buckets[b]
		}
		if n <= 0 {
			continue
		}
		if c.hist == nil {
			c.hist = make(map[int64]int64)
			c.lastHist = make(map[int64]int64)
		}
		c.hist[b] += n
		c.lastHist[b] += n
		c.histCount += n
		if j, found := slices.BinarySearch(p.bounds, b); !found {
			p.bounds = slices.Insert(p.bounds, j, b)
		}
	}
}

// Sources returns the statistics the last successful poll used, a subset of
// SourceLatencyHistogram, SourceLatencyStats and SourceCommandStats in that
// order: ["latency_histogram", "commandstats"] on Redis 7, ["latencystats",
// "commandstats"] on Dragonfly, nil before the first poll.
func (p *Poller) Sources() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sources)
}

// LastInterval returns the time between the last two successful polls (the
// interval EngineMean is over), or 0 before the second poll.
func (p *Poller) LastInterval() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastInterval
}

// EngineMean returns the engine's mean execution time of command cmd and its
// calls over the last poll interval, from INFO commandstats (usec delta /
// calls delta; engine µs, so the mean is exact to ~1 µs per call). cmd is a
// label from the names given to NewPoller, or "other", in any case. ok is
// false when cmd is not a label or had no calls in the last interval (or
// fewer than two polls have succeeded).
func (p *Poller) EngineMean(cmd string) (mean time.Duration, calls int64, ok bool) {
	i, found := p.index[strings.ToLower(cmd)]
	if !found {
		return 0, 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := &p.cmds[i]
	if c.lastCalls <= 0 {
		return 0, 0, false
	}
	return usecMean(c.lastUsec, c.lastCalls), c.lastCalls, true
}

func usecMean(usec, calls int64) time.Duration {
	return time.Duration(usec) * time.Microsecond / time.Duration(calls)
}

// Totals is the engine's work over all commands, from INFO commandstats.
type Totals struct {
	// Calls and Time are the calls and execution time since the Poller's
	// first poll.
	Calls int64
	Time  time.Duration
	// LastCalls and LastTime are those of the last poll interval
	// (LastInterval).
	LastCalls int64
	LastTime  time.Duration
}

// Totals returns the engine's calls and execution time summed over all
// commands, since the first poll and over the last interval.
func (p *Poller) Totals() Totals {
	p.mu.Lock()
	defer p.mu.Unlock()
	var t Totals
	for i := range p.cmds {
		c := &p.cmds[i]
		t.Calls += c.calls
		t.Time += time.Duration(c.usec) * time.Microsecond
		t.LastCalls += c.lastCalls
		t.LastTime += time.Duration(c.lastUsec) * time.Microsecond
	}
	return t
}

// PollerStats summarizes a Poller for /stats.
type PollerStats struct {
	// Sources are those of the last successful poll (see Poller.Sources).
	Sources []string
	// LastPoll is when the last successful poll was sent; zero before the
	// first.
	LastPoll time.Time
	// Interval is the configured poll interval; LastInterval the time between
	// the last two successful polls.
	Interval, LastInterval time.Duration
	// Polls counts successful polls.
	Polls int64
	// Errors counts failed dials, lost connections and failed INFO
	// commandstats; LastErr is the latest one's message ("" if none).
	Errors  int64
	LastErr string
	// Commands has one entry per command label with engine calls since the
	// first poll or percentiles from latencystats, in names order.
	Commands []CommandStats
}

// CommandStats is the engine's view of one command label.
type CommandStats struct {
	Command string
	// Calls and Time are the calls and execution time since the first poll
	// (INFO commandstats deltas).
	Calls int64
	Time  time.Duration
	// LastCalls and LastMean are the calls and mean execution time of the
	// last poll interval (see Poller.EngineMean); LastMean is 0 without
	// calls.
	LastCalls int64
	LastMean  time.Duration
	// P50 and P99 come from PctSource: with SourceLatencyHistogram they are
	// the upper bound of the engine's power-of-two bucket holding that
	// percentile of the calls since the first poll (so up to 2x high); with
	// SourceLatencyStats they are the engine's own percentiles since it
	// started or was reset. Both 0 and PctSource "" when neither has data.
	P50, P99  time.Duration
	PctSource string
}

// Stats returns the Poller's summary. It is safe for concurrent use.
func (p *Poller) Stats() PollerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := PollerStats{
		Sources:      slices.Clone(p.sources),
		LastPoll:     p.lastPoll,
		Interval:     p.every,
		LastInterval: p.lastInterval,
		Polls:        p.polls,
		Errors:       p.health.errors,
		LastErr:      p.health.lastErr,
	}
	for i := range p.cmds {
		c := &p.cmds[i]
		if c.calls == 0 && c.histCount == 0 && !c.hasLat {
			continue
		}
		cs := CommandStats{
			Command:   p.labels[i],
			Calls:     c.calls,
			Time:      time.Duration(c.usec) * time.Microsecond,
			LastCalls: c.lastCalls,
		}
		if c.lastCalls > 0 {
			cs.LastMean = usecMean(c.lastUsec, c.lastCalls)
		}
		switch {
		case c.histCount > 0:
			cs.P50 = p.bucketPct(c, 50)
			cs.P99 = p.bucketPct(c, 99)
			cs.PctSource = SourceLatencyHistogram
		case c.hasLat:
			cs.P50, cs.P99 = c.lat.p50, c.lat.p99
			cs.PctSource = SourceLatencyStats
		}
		s.Commands = append(s.Commands, cs)
	}
	return s
}

// bucketPct returns the upper bound of the bucket holding percentile pct
// (0-100) of c's histogram. c.histCount must be > 0.
func (p *Poller) bucketPct(c *labelStats, pct float64) time.Duration {
	rank := int64(math.Ceil(pct / 100 * float64(c.histCount)))
	rank = max(rank, 1)
	var cum int64
	for _, b := range p.bounds {
		cum += c.hist[b]
		if cum >= rank {
			return time.Duration(b) * time.Microsecond
		}
	}
	return 0 // unreachable: the bounds hold every bucket of c
}

// Register registers a prometheus.Collector for the Poller with reg. At each
// scrape it exports, for every command label with calls since the first poll:
//
//   - respmeter_engine_command_duration_seconds{command}: histogram of the
//     engine's execution time from LATENCY HISTOGRAM deltas since the first
//     poll; classic bucket bounds are the engine's power-of-two microsecond
//     bounds in seconds (the union of those seen for any command, so every
//     command has the same buckets), native buckets (schema 3) count each
//     engine bucket at its bound (metrics.NewBucketsMetric); the sum is the
//     commandstats time of the same label. Only while LATENCY HISTOGRAM is
//     available.
//   - respmeter_engine_command_seconds_total{command} and
//     respmeter_engine_commands_total{command}: execution time and calls
//     from INFO commandstats deltas since the first poll, on every engine.
//
// and respmeter_engine_poll_errors_total; once two polls have answered,
// respmeter_engine_main_thread_cpu_seconds_total (the command thread's CPU)
// and, when the engine runs on this host,
// respmeter_engine_runqueue_wait_seconds_total (see Witness); on an engine
// that answers CLUSTER GETSLOTMIGRATIONS (Valkey 9.0 on, cluster mode),
// respmeter_topology_events_total{kind} with kinds slot_migration_started
// and slot_migration_ended (MigrationCounts), even at 0, without engine:
// a job's source and target each count theirs.
//
// Every series but the poll errors (this Poller's own) also carries
// engine: the run_id of INFO server (40 hex digits, one per engine process;
// the address given to NewPoller when the engine has none), the same in
// every proxy polling that engine however each names its address, so that
// max by (engine, command) (rate(...)) counts an engine once across
// proxies and a restarted engine is a new series. Register returns reg's
// error, such as prometheus.AlreadyRegisteredError: one Poller per
// registry, unless each registers through
// prometheus.WrapRegistererWith(prometheus.Labels{"shard": addr}, reg), as
// respmeter does: the engine's address in the label shard.
func (p *Poller) Register(reg prometheus.Registerer) error {
	return reg.Register(newPollerCollector(p))
}

// pollerCollector exports a Poller at scrape time.
type pollerCollector struct {
	p                               *Poller
	duration, seconds, calls, pollE *prometheus.Desc
	mainCPU, runQueue               *prometheus.Desc
	topology                        *prometheus.Desc
}

var _ prometheus.Collector = (*pollerCollector)(nil)

func newPollerCollector(p *Poller) *pollerCollector {
	return &pollerCollector{
		p: p,
		duration: prometheus.NewDesc("respmeter_engine_command_duration_seconds",
			"Execution time of commands inside the engine in seconds, from the engine's LATENCY HISTOGRAM "+
				"(power-of-two microsecond buckets), accumulated since respmeter started.",
			[]string{"command", "engine"}, nil),
		seconds: prometheus.NewDesc("respmeter_engine_command_seconds_total",
			"Execution time of commands inside the engine in seconds, from INFO commandstats usec, since respmeter started.",
			[]string{"command", "engine"}, nil),
		calls: prometheus.NewDesc("respmeter_engine_commands_total",
			"Commands executed by the engine, from INFO commandstats calls, since respmeter started.",
			[]string{"command", "engine"}, nil),
		pollE: prometheus.NewDesc("respmeter_engine_poll_errors_total",
			"Failed engine statistics polls: dial errors, lost connections, failed INFO commandstats.", nil, nil),
		mainCPU: prometheus.NewDesc("respmeter_engine_main_thread_cpu_seconds_total",
			"CPU time of the engine's command thread in seconds since respmeter started: /proc/PID/task/PID/schedstat "+
				"when the engine runs on this host, else INFO cpu used_cpu_*_main_thread (Redis >= 7, Valkey).", []string{"engine"}, nil),
		runQueue: prometheus.NewDesc("respmeter_engine_runqueue_wait_seconds_total",
			"Time the engine's command thread was runnable but waiting for a CPU, in seconds since respmeter started "+
				"(/proc/PID/task/PID/schedstat; only when the engine runs on this host).", []string{"engine"}, nil),
		topology: metrics.NewTopologyEventsDesc(nil),
	}
}

// Describe implements prometheus.Collector.
func (c *pollerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.duration
	ch <- c.seconds
	ch <- c.calls
	ch <- c.pollE
	ch <- c.mainCPU
	ch <- c.runQueue
	ch <- c.topology
}

// Collect implements prometheus.Collector.
func (c *pollerCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	engine := p.engineLocked()
	for i := range p.cmds {
		s := &p.cmds[i]
		name := p.labels[i]
		if s.calls > 0 {
			ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(s.calls), name, engine)
			ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, float64(s.usec)/1e6, name, engine)
		}
		if s.histCount > 0 {
			counts := make([]int64, len(p.bounds))
			for j, b := range p.bounds {
				counts[j] = s.hist[b]
			}
			ch <- metrics.NewBucketsMetric(c.duration, p.bounds, counts, float64(s.usec)/1e6, name, engine)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.pollE, prometheus.CounterValue, float64(p.health.errors))
	if p.witHasCPU {
		ch <- prometheus.MustNewConstMetric(c.mainCPU, prometheus.CounterValue, p.witCPU.Seconds(), engine)
	}
	if p.witHRQ {
		ch <- prometheus.MustNewConstMetric(c.runQueue, prometheus.CounterValue, p.witRunQ.Seconds(), engine)
	}
	if p.slotJobs {
		ch <- prometheus.MustNewConstMetric(c.topology, prometheus.CounterValue, float64(p.migStarted), "slot_migration_started")
		ch <- prometheus.MustNewConstMetric(c.topology, prometheus.CounterValue, float64(p.migEnded), "slot_migration_ended")
	}
}
