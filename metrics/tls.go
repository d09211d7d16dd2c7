package metrics

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TLS sides, the side label of the TLS metrics: the client-facing listener
// and the connections to the engines.
const (
	TLSSideClient   = "client"
	TLSSideUpstream = "upstream"
)

// TLS counts and times the TLS handshakes of both sides:
//
//	respmeter_tls_handshake_duration_seconds{side}   histogram, seconds
//	respmeter_tls_handshakes_total{side,version,cipher}  completed handshakes
//	respmeter_tls_handshake_errors_total{side,reason}    failed handshakes
//
// The rate of respmeter_tls_handshakes_total is the handshakes per second.
// Its methods may be called from any goroutine; a nil *TLS records
// nothing.
type TLS struct {
	duration *prometheus.HistogramVec
	done     *prometheus.CounterVec
	failed   *prometheus.CounterVec
}

// NewTLS returns the TLS handshake metrics, unregistered.
func NewTLS() *TLS {
	bounds := classicBoundsMicros()
	secs := make([]float64, len(bounds))
	for i, b := range bounds {
		secs[i] = float64(b) / 1e6
	}
	return &TLS{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:                        "respmeter_tls_handshake_duration_seconds",
			Help:                        "Time of completed TLS handshakes, from the first byte read or written to the handshake's end, by side (client: respmeter's TLS listener; upstream: respmeter to the engines).",
			Buckets:                     secs,
			NativeHistogramBucketFactor: math.Pow(2, 1.0/(1<<nativeSchema)),
		}, []string{"side"}),
		done: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "respmeter_tls_handshakes_total",
			Help: "Completed TLS handshakes by side, negotiated version and cipher suite.",
		}, []string{"side", "version", "cipher"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "respmeter_tls_handshake_errors_total",
			Help: "Failed TLS handshakes by side and reason (plaintext, timeout, unknown_ca, expired, bad_certificate, no_certificate, protocol_version, cipher, handshake_failure, eof, shutdown, other).",
		}, []string{"side", "reason"}),
	}
}

// Register registers the TLS metrics with reg.
func (t *TLS) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{t.duration, t.done, t.failed} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Handshake records a completed handshake of side that took d and
// negotiated version and cipher (crypto/tls's VersionName and
// CipherSuiteName).
func (t *TLS) Handshake(side string, d time.Duration, version, cipher string) {
	if t == nil {
		return
	}
	t.duration.WithLabelValues(side).Observe(d.Seconds())
	t.done.WithLabelValues(side, version, cipher).Inc()
}

// HandshakeFailed counts a failed handshake of side, for reason.
func (t *TLS) HandshakeFailed(side, reason string) {
	if t == nil {
		return
	}
	t.failed.WithLabelValues(side, reason).Inc()
}

// HandshakeErrors returns the failed handshakes of side counted for reason.
func (t *TLS) HandshakeErrors(side, reason string) uint64 {
	if t == nil {
		return 0
	}
	return uint64(counterValue(t.failed.WithLabelValues(side, reason)))
}

// Handshakes returns the completed handshakes of side, all versions and
// ciphers together.
func (t *TLS) Handshakes(side string) uint64 { return t.Side(side).Handshakes }

// TLSSide is what one side's handshakes came to since start.
type TLSSide struct {
	// Handshakes is the number completed; Mean their mean time.
	Handshakes uint64
	Mean       time.Duration
	// Negotiated counts the completed handshakes by "version cipher"
	// ("TLS 1.3 TLS_AES_128_GCM_SHA256"); Errors the failed ones by
	// reason.
	Negotiated map[string]uint64
	Errors     map[string]uint64
}

// Side returns the handshake figures of side.
func (t *TLS) Side(side string) TLSSide {
	s := TLSSide{Negotiated: map[string]uint64{}, Errors: map[string]uint64{}}
	if t == nil {
		return s
	}
	var sum float64
	for _, c := range []prometheus.Collector{t.duration, t.done, t.failed} {
		ch := make(chan prometheus.Metric, 64)
		go func() { c.Collect(ch); close(ch) }()
		for m := range ch {
			var d dto.Metric
			if m.Write(&d) != nil {
				continue
			}
			labels := map[string]string{}
			for _, l := range d.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["side"] != side {
				continue
			}
			switch {
			case d.GetHistogram() != nil:
				sum += d.GetHistogram().GetSampleSum()
			case labels["reason"] != "":
				s.Errors[labels["reason"]] += uint64(d.GetCounter().GetValue())
			default:
				n := uint64(d.GetCounter().GetValue())
				s.Handshakes += n
				s.Negotiated[labels["version"]+" "+labels["cipher"]] += n
			}
		}
	}
	if s.Handshakes > 0 {
		s.Mean = time.Duration(sum / float64(s.Handshakes) * float64(time.Second))
	}
	return s
}

func counterValue(c prometheus.Counter) float64 {
	var d dto.Metric
	if c.Write(&d) != nil {
		return 0
	}
	return d.GetCounter().GetValue()
}
