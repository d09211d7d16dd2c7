package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/respmeter/respmeter/configs"
	"github.com/respmeter/respmeter/internal/tlsconf"
	"github.com/respmeter/respmeter/metrics"
)

// tlsSides is the proxy's TLS: the client-facing listener's configuration
// (nil without tls_listen and facade_tls), the engines' Dialer (nil
// without upstream_tls), the Reloaders that keep them up with their
// certificate files, and the handshake metrics of both.
type tlsSides struct {
	server    *tls.Config
	upstream  *tlsconf.Dialer
	reloaders []*tlsconf.Reloader
	metrics   *metrics.TLS
}

// newTLSSides reads the certificate files cfg names (the errors name the
// files, never their content) and warns when the engines' certificates go
// unverified, and of each cipher suite named that Go lists as insecure.
func newTLSSides(cfg configs.Config, log *slog.Logger) (tlsSides, error) {
	ts := tlsSides{metrics: metrics.NewTLS()}
	rlog := log.With("component", "tls")
	if cfg.TLSListen != "" || cfg.FacadeTLS {
		suites, err := sideSuites("tls", cfg.TLSProtocols, cfg.TLSCiphers, rlog)
		if err != nil {
			return ts, err
		}
		r, err := tlsconf.NewServerReloader(cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCACertFile, cfg.TLSAuthClients, suites, rlog)
		if err != nil {
			return ts, err
		}
		ts.server, ts.reloaders = r.Config(), append(ts.reloaders, r)
	}
	if cfg.UpstreamTLS {
		suites, err := sideSuites("upstream_tls", cfg.UpstreamTLSProtocols, cfg.UpstreamTLSCiphers, rlog)
		if err != nil {
			return ts, err
		}
		r, err := tlsconf.NewClientReloader(cfg.UpstreamTLSCACertFile, cfg.UpstreamTLSCertFile, cfg.UpstreamTLSKeyFile,
			cfg.UpstreamTLSServerName, cfg.UpstreamTLSInsecureSkipVerify, suites, rlog)
		if err != nil {
			return ts, err
		}
		ts.upstream = r.Dialer()
		if len(r.Files()) > 0 { // else (the system's roots, no client certificate) nothing to reload
			ts.reloaders = append(ts.reloaders, r)
		}
		if cfg.UpstreamTLSInsecureSkipVerify {
			log.Warn("upstream TLS certificates are not verified (upstream_tls_insecure_skip_verify): anyone on the path can read and change the traffic",
				"component", "proxy")
		}
	}
	return ts, nil
}

// sideSuites reads one side's protocols and ciphers (configs.Validate
// has checked them) and warns of each suite named that Go lists as
// insecure; prefix is the side's keys' ("tls", "upstream_tls").
func sideSuites(prefix, protocols, ciphers string, log *slog.Logger) (tlsconf.Suites, error) {
	s, err := tlsconf.ParseSuites(protocols, ciphers)
	if err != nil {
		return s, fmt.Errorf("%s_ciphers: %w", prefix, err)
	}
	for _, name := range s.Insecure {
		log.Warn("a TLS cipher suite Go lists as insecure is allowed, as "+prefix+"_ciphers names it", "cipher", name)
	}
	return s, nil
}

// watch reloads each side's certificates when their files change, every
// tlsconf.WatchInterval, until ctx ends.
func (ts tlsSides) watch(ctx context.Context, wg *sync.WaitGroup) {
	for _, r := range ts.reloaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Watch(ctx, tlsconf.WatchInterval)
		}()
	}
}

// reload reads each side's certificate files again (SIGHUP); each
// Reloader logs its outcome.
func (ts tlsSides) reload(log *slog.Logger) {
	if len(ts.reloaders) == 0 {
		log.Info("SIGHUP: no TLS certificates to reload")
	}
	for _, r := range ts.reloaders {
		_ = r.Reload()
	}
}

// clientTLSFlags are the TLS flags of the subcommands that connect to an
// engine or a proxy as a client (check, replay): redis-cli's names and
// meanings, as those commands already take redis-cli's --user, --auth and
// $REDISCLI_AUTH.
type clientTLSFlags struct {
	on                bool
	caCert, cert, key string
	sni               string
	insecure          bool
	ciphers           string
}

// register adds the flags to fs.
func (f *clientTLSFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&f.on, "tls", false, "connect over TLS (TLS 1.2 at least), the target's certificate verified")
	fs.StringVar(&f.caCert, "cacert", "", "PEM CA certificate `file` to verify the target's certificate with (default: the system's roots)")
	fs.StringVar(&f.cert, "cert", "", "PEM client certificate `file` to authenticate with (needs --key)")
	fs.StringVar(&f.key, "key", "", "PEM private key `file` of --cert")
	fs.StringVar(&f.sni, "sni", "", "server `name` sent and verified (default: the host of --target)")
	fs.BoolVar(&f.insecure, "insecure", false, "accept any certificate of the target (warned; for tests)")
	fs.StringVar(&f.ciphers, "tls-ciphers", "", "TLS 1.2 cipher `suites` offered, OpenSSL names joined by ':' (default: Go's)")
}

// config returns the TLS the flags ask for, nil without --tls
// (internal/tlsconf builds it). A TLS flag without --tls, or --cert
// without --key, is a usage error; a file that cannot be read is a
// failure, named (never its content), as is a --tls-ciphers name Go
// cannot do. --insecure, and each suite Go lists as insecure that
// --tls-ciphers names, are warned about on stderr.
func (f *clientTLSFlags) config(cmd *cobra.Command, stderr io.Writer) (*tlsconf.Dialer, error) {
	if !f.on {
		for _, name := range []string{"cacert", "cert", "key", "sni", "insecure", "tls-ciphers"} {
			if cmd.Flags().Changed(name) {
				return nil, usageError(cmd, fmt.Errorf("--%s needs --tls", name))
			}
		}
		return nil, nil
	}
	if (f.cert == "") != (f.key == "") {
		return nil, usageError(cmd, errors.New("give --cert and --key together"))
	}
	suites, err := tlsconf.ParseSuites("", f.ciphers)
	if err != nil {
		return nil, usageError(cmd, fmt.Errorf("--tls-ciphers: %w", err))
	}
	c, err := tlsconf.Client(f.caCert, f.cert, f.key, f.sni, f.insecure, suites)
	if err != nil {
		return nil, failure(err)
	}
	for _, name := range suites.Insecure {
		fmt.Fprintf(stderr, "respmeter: warning: --tls-ciphers offers %s, which Go lists as insecure\n", name)
	}
	if f.insecure {
		fmt.Fprintln(stderr, "respmeter: warning: --insecure: the target's certificate is not verified; anyone on the path can read and change the traffic")
	}
	return tlsconf.NewDialer(c), nil
}
