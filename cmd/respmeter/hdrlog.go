package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/respmeter/respmeter/metrics"
	"github.com/respmeter/respmeter/metrics/hdrlog"
)

// thinkTag is the interval-log tag of the clients' think time, which is
// per connection, not per command.
const thinkTag = "think"

// startHDRLog writes set's histograms to an HdrHistogram interval log at
// path (created or truncated), as `respmeter report` and HdrHistogram's
// tools read it (package metrics/hdrlog). It writes the header at once,
// then, every interval, takes set's Interval view and writes one interval
// line per command and phase with observations since the previous one,
// tagged "<command>.<phase>" (get.total, get.upstream, get.proxy,
// get.service, get.queue, get.injected), plus one tagged "think" for think times, each
// holding the microsecond histogram of that interval, encoded from the
// Set's sparse interval histogram (metrics.Set.Interval: set must have no
// other Interval reader). A tag without new observations gets no line for
// that interval. The first interval starts when startHDRLog is called but
// also holds whatever set recorded before, so that the log's intervals
// merged per tag equal set's cumulative histograms. Lines are flushed to
// the file after every interval.
//
// stop ends the log: it waits for the periodic writer to finish, writes a
// last, partial interval, flushes and closes the file, and returns the first
// error met since the header (writing, flushing or closing). It may be
// called more than once, from any goroutine; later calls return the same
// error. Call it after the proxy has stopped (drained) so that the last
// commands are in the log. Cancelling ctx only ends the periodic writing,
// after writing and flushing one interval up to that moment; stop is still
// needed to write the rest and close the file.
//
// A write error is logged once, with the path, at the first failure; the
// log is abandoned then (later intervals are not attempted). interval must
// be positive. logger nil discards. startHDRLog returns an error, and
// leaves no goroutine behind, when path cannot be created or the header
// cannot be written.
func startHDRLog(ctx context.Context, set *metrics.Set, path string, interval time.Duration, logger *slog.Logger) (stop func() error, err error) {
	if interval <= 0 {
		return nil, fmt.Errorf("hdr log %s: interval must be > 0, got %v", path, interval)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("hdr log: %w", err)
	}
	return startHDRLogTo(ctx, set, f, path, interval, logger)
}

// startHDRLogTo is startHDRLog writing to wc, named name in errors and log
// records; it closes wc when stop is called or when it fails. interval
// must be positive.
func startHDRLogTo(ctx context.Context, set *metrics.Set, wc io.WriteCloser, name string, interval time.Duration, logger *slog.Logger) (stop func() error, err error) {
	l, err := newHDRLog(set, wc, name, time.Now(), logger)
	if err != nil {
		_ = wc.Close()
		return nil, err
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		l.loop(ctx, interval, quit)
	}()
	var once sync.Once
	return func() error {
		once.Do(func() {
			close(quit)
			<-done
			l.write(time.Now())
			if cerr := wc.Close(); cerr != nil {
				l.fail(fmt.Errorf("closing: %w", cerr))
			}
		})
		return l.err
	}, nil
}

// newHDRLog writes the log header, with start as the log's start and base
// time, to w and returns the log's state, its first interval starting at
// start; name names it in errors and log records, and logger nil discards.
func newHDRLog(set *metrics.Set, w io.Writer, name string, start time.Time, logger *slog.Logger) (*hdrLog, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	bw := bufio.NewWriter(w)
	hw, err := hdrlog.NewWriter(bw, start)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return nil, fmt.Errorf("hdr log %s: %w", name, err)
	}
	return &hdrLog{
		set:    set,
		name:   name,
		logger: logger.With("component", "hdrlog", "path", name),
		bw:     bw,
		w:      hw,
		last:   start,
	}, nil
}

// hdrLog is the state of one interval log. The periodic goroutine owns it
// until it exits; stop then takes it over, so it needs no lock.
type hdrLog struct {
	set    *metrics.Set
	name   string // the file's path
	logger *slog.Logger
	bw     *bufio.Writer
	w      *hdrlog.Writer
	last   time.Time // end of the last interval written
	err    error     // first failure, wrapped with the path
}

// loop writes an interval every interval until quit is closed or ctx is
// done; in the latter case it writes one more up to that moment.
func (l *hdrLog) loop(ctx context.Context, interval time.Duration, quit <-chan struct{}) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-quit:
			return
		case <-ctx.Done():
			l.write(time.Now())
			return
		case now := <-tick.C:
			l.write(now)
		}
	}
}

// write writes the interval from l.last to now: one line per tag with
// values in it, then flushes. It does nothing once a write has
// failed (a bufio.Writer stays failed).
func (l *hdrLog) write(now time.Time) {
	if l.err != nil {
		return
	}
	// A wall clock stepped back must not give an interval ending before
	// its start (hdrlog.ErrInterval).
	end := now
	if end.Before(l.last) {
		end = l.last
	}
	// The Set's interval view: sparse histograms of what was merged since
	// the previous interval, encoded as they are (no dense copy, nothing
	// kept from one interval to the next).
	emit := func(tag string, d metrics.Durations) error {
		h := d.Sparse()
		if h == nil || h.TotalCount() == 0 {
			return nil // nothing new in this interval
		}
		return l.w.WritePackedInterval(l.last, end, tag, h)
	}
	err := l.set.Interval(func(sn *metrics.Snapshot) error {
		var err error
		for ci := range sn.Commands {
			c := &sn.Commands[ci]
			if !c.Observed() {
				continue
			}
			for p, d := range c.Phases {
				err = errors.Join(err, emit(c.Name+"."+metrics.Phase(p).String(), d))
			}
		}
		return errors.Join(err, emit(thinkTag, sn.Think))
	})
	if err == nil {
		err = l.bw.Flush()
	}
	l.last = end
	if err != nil {
		l.fail(err)
	}
}

// fail records err as the first failure and logs it, once.
func (l *hdrLog) fail(err error) {
	if l.err != nil {
		return
	}
	l.err = fmt.Errorf("hdr log %s: %w", l.name, err)
	l.logger.Error("writing the HdrHistogram log failed; no more intervals will be written", "err", err)
}
