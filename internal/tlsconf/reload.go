package tlsconf

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// WatchInterval is how often respmeter proxy reads the certificate files
// for a change (Reloader.Watch): reading a few small files every 5 seconds
// costs nothing measurable, and picks up a rotation (cert-manager, a
// Kubernetes Secret's symlink swap, a plain copy) within that time.
const WatchInterval = 5 * time.Second

// Reloader keeps one side's TLS configuration up with its certificate
// files: Config returns a *tls.Config that stays the same value for the
// process's life, while each new handshake uses the certificates read
// last. Reload reads the files again (on SIGHUP); Watch does whenever
// their content changes. A handshake already done keeps its keys: a
// connection open across a reload is not touched. A reload that fails (a
// file missing, unreadable, not PEM, a key that does not match its
// certificate) keeps the certificates in use and logs why, naming the
// files, never their content.
//
// What reloads: on the client-facing side (NewServerReloader) the
// certificate, its key and the CA certificates client certificates are
// verified against; towards the engines (NewClientReloader) the CA
// certificates the engines' certificates are verified against, the
// client certificate and its key. Each dial to an engine takes the
// configuration read last whole (Dialer.Config), so crypto/tls verifies
// the engine against the CA pool of that moment, for the host dialed.
// The versions and cipher suites (Suites) stay those given at start.
type Reloader struct {
	side  string   // "client" or "upstream", for logs
	files []string // what Watch reads for a change
	load  func() (*tls.Config, error)
	log   *slog.Logger

	cur atomic.Pointer[tls.Config] // the certificates read last
	cfg *tls.Config                // what Config returns (the server side); reads cur

	mu  sync.Mutex        // one reload at a time
	sum [sha256.Size]byte // the files' content at the last reload tried
}

// NewServerReloader reads the client-facing side's files as Server does
// and returns its Reloader; the first read's error is returned, as
// Server's. log receives the reloads' outcomes.
func NewServerReloader(certFile, keyFile, caFile, authClients string, s Suites, log *slog.Logger) (*Reloader, error) {
	r := &Reloader{side: "client", files: nonEmpty(certFile, keyFile, caFile), log: log,
		load: func() (*tls.Config, error) { return Server(certFile, keyFile, caFile, authClients, s) }}
	r.cfg = &tls.Config{
		MinVersion: MinVersion,
		// Every handshake gets the configuration read last, whole: its
		// certificate, ClientAuth and ClientCAs. Session tickets stay
		// those of r.cfg (crypto/tls uses the outer Config's keys when
		// the returned one sets none), so a client resumes across a
		// reload as it would without one.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.cur.Load(), nil },
	}
	return r, r.first()
}

// NewClientReloader builds the engines' side as Client does and returns
// its Reloader, whose Dialer dials with what was read last: the CA
// certificates the engines' certificates are verified against (caFile,
// when given) and the client certificate (certFile and keyFile, when
// given). The first read's error is returned, as Client's. log receives
// the reloads' outcomes.
func NewClientReloader(caFile, certFile, keyFile, serverName string, insecure bool, s Suites, log *slog.Logger) (*Reloader, error) {
	r := &Reloader{side: "upstream", files: nonEmpty(caFile, certFile, keyFile), log: log,
		load: func() (*tls.Config, error) { return Client(caFile, certFile, keyFile, serverName, insecure, s) }}
	return r, r.first()
}

// Config returns the configuration to serve with (NewServerReloader's;
// nil for NewClientReloader's, which dials with Dialer): the same value on
// every call, reading the certificates of the last successful reload at
// each handshake.
func (r *Reloader) Config() *tls.Config { return r.cfg }

// Dialer returns the Dialer of NewClientReloader's side: each handshake
// dials with the CA certificates and client certificate of the last
// successful reload.
func (r *Reloader) Dialer() *Dialer { return &Dialer{cur: r.cur.Load} }

// Files returns the files the Reloader reads, "" left out: none when
// there is nothing to reload.
func (r *Reloader) Files() []string { return r.files }

// first reads the files at start.
func (r *Reloader) first() error {
	r.sum = r.contentSum()
	c, err := r.load()
	if err != nil {
		return err
	}
	r.cur.Store(c)
	return nil
}

// Reload reads the files again and, when they hold a good certificate and
// key (and CA certificates), makes them the ones new handshakes use; on
// error the certificates in use stay, and the error (naming the files) is
// logged and returned.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reload(r.contentSum())
}

// reload loads the files, whose content sums to sum; r.mu is held.
func (r *Reloader) reload(sum [sha256.Size]byte) error {
	r.sum = sum
	c, err := r.load()
	if err != nil {
		r.log.Warn("TLS certificates not reloaded: the ones in use are kept", "side", r.side, "err", err)
		return err
	}
	r.cur.Store(c)
	args := []any{"side", r.side}
	if len(c.Certificates) > 0 {
		if leaf := c.Certificates[0].Leaf; leaf != nil {
			args = append(args, "subject", leaf.Subject.String(), "serial", fmt.Sprintf("%x", leaf.SerialNumber),
				"not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	r.log.Info("TLS certificates reloaded", args...)
	return nil
}

// Watch reads the files every interval until ctx ends and reloads them
// when their content has changed since the last reload tried (so a broken
// file is reported once, not at every look).
func (r *Reloader) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sum := r.contentSum()
		r.mu.Lock()
		if sum != r.sum {
			_ = r.reload(sum)
		}
		r.mu.Unlock()
	}
}

// contentSum is a hash of the files' content, each file's read error
// standing in for a file that cannot be read.
func (r *Reloader) contentSum() [sha256.Size]byte {
	h := sha256.New()
	for _, f := range r.files {
		b, err := os.ReadFile(f)
		if err != nil {
			b = []byte(err.Error())
		}
		_ = binary.Write(h, binary.LittleEndian, int64(len(b)))
		h.Write(b)
	}
	var s [sha256.Size]byte
	h.Sum(s[:0])
	return s
}

// Leaf returns the certificate new handshakes present (the server's, or
// the client certificate towards the engines), nil when there is none.
func (r *Reloader) Leaf() *x509.Certificate {
	c := r.cur.Load()
	if len(c.Certificates) == 0 {
		return nil
	}
	return c.Certificates[0].Leaf
}

func nonEmpty(files ...string) []string {
	var out []string
	for _, f := range files {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}
