package proxy

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/respmeter/respmeter/internal/capture"
)

// CaptureConfig configures a capture of the clients' commands (see
// internal/capture for the file format).
type CaptureConfig struct {
	// File is created (mode 0600); it must not exist.
	File string
	// Duration stops the capture after that long; 0 runs it until
	// StopCapture or Stop.
	Duration time.Duration
	// Sample is the fraction (0, 1] of client connections captured; 0
	// means 1.
	Sample float64
	// RedactValues replaces request values by filler of the same length
	// (keys, command names, option keywords and sizes stay).
	RedactValues bool
	// BufferBytes bounds each event loop's buffer of records the writer
	// has not written yet; past it records are dropped and counted. 0
	// means 4 MiB.
	BufferBytes int
}

// captureState is the Proxy's capture: cur is loaded by the loops, the
// rest is under mu.
type captureState struct {
	cur     atomic.Pointer[capture.Capture]
	mu      sync.Mutex
	last    *capture.Capture // the running or last capture
	dropped uint64           // drops of the captures before last
}

// ErrNoCapture: StopCapture with no capture running.
var ErrNoCapture = errors.New("proxy: no capture running")

// StartCapture starts capturing the commands of client connections
// (connections already open included, from their next request) into
// cc.File, in every upstream shape. It fails with capture.ErrRunning when a
// capture runs already.
func (p *Proxy) StartCapture(cc CaptureConfig) error {
	st := &p.capture
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cur.Load() != nil {
		return capture.ErrRunning
	}
	n := p.cfg.Loops
	if n <= 0 {
		n = runtime.NumCPU()
	}
	c, err := capture.Start(cc.File, capture.Options{Loops: n, Base: p.now(), Sample: cc.Sample,
		RedactValues: cc.RedactValues, BufferBytes: cc.BufferBytes})
	if err != nil {
		return err
	}
	if st.last != nil {
		st.dropped += st.last.Stats().Dropped
	}
	st.last = c
	st.cur.Store(c)
	p.log.Info("capture started", "file", cc.File, "duration", cc.Duration, "sample", cc.Sample, "redact_values", cc.RedactValues)
	if cc.Duration > 0 {
		go func() {
			t := time.NewTimer(cc.Duration)
			defer t.Stop()
			select {
			case <-t.C:
				_, _ = p.stopCapture(c)
			case <-c.Done():
			}
		}()
	}
	return nil
}

// StopCapture stops the running capture, writes what it buffered and
// closes its file; it returns its final stats.
func (p *Proxy) StopCapture() (capture.Stats, error) {
	c := p.capture.cur.Load()
	if c == nil {
		return capture.Stats{}, ErrNoCapture
	}
	return p.stopCapture(c)
}

func (p *Proxy) stopCapture(c *capture.Capture) (capture.Stats, error) {
	if !p.capture.cur.CompareAndSwap(c, nil) {
		return c.Stats(), ErrNoCapture
	}
	err := c.Stop()
	s := c.Stats()
	p.log.Info("capture stopped", "file", s.File, "bytes", s.Bytes, "records", s.Records, "dropped", s.Dropped)
	return s, err
}

// CaptureStats returns the stats of the running or last capture; false
// when there was none.
func (p *Proxy) CaptureStats() (capture.Stats, bool) {
	st := &p.capture
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.last == nil {
		return capture.Stats{}, false
	}
	return st.last.Stats(), true
}

// CaptureDropped returns the records dropped by all captures so far.
func (p *Proxy) CaptureDropped() uint64 {
	st := &p.capture
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.last == nil {
		return st.dropped
	}
	return st.dropped + st.last.Stats().Dropped
}
