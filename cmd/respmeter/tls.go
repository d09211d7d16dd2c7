package main

import (
	"crypto/tls"
	"log/slog"

	"github.com/respmeter/respmeter/configs"
	"github.com/respmeter/respmeter/internal/tlsconf"
	"github.com/respmeter/respmeter/metrics"
)

// tlsSides is the proxy's TLS: the client-facing listener's configuration
// (nil without tls_listen), the engines' (nil without upstream_tls) and
// the handshake metrics of both.
type tlsSides struct {
	server, upstream *tls.Config
	metrics          *metrics.TLS
}

// newTLSSides reads the certificate files cfg names (the errors name the
// files, never their content) and warns when the engines' certificates go
// unverified.
func newTLSSides(cfg configs.Config, log *slog.Logger) (tlsSides, error) {
	ts := tlsSides{metrics: metrics.NewTLS()}
	var err error
	if cfg.TLSListen != "" {
		if ts.server, err = tlsconf.Server(cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCACertFile, cfg.TLSAuthClients); err != nil {
			return ts, err
		}
	}
	if cfg.UpstreamTLS {
		ts.upstream, err = tlsconf.Client(cfg.UpstreamTLSCACertFile, cfg.UpstreamTLSCertFile, cfg.UpstreamTLSKeyFile,
			cfg.UpstreamTLSServerName, cfg.UpstreamTLSInsecureSkipVerify)
		if err != nil {
			return ts, err
		}
		if cfg.UpstreamTLSInsecureSkipVerify {
			log.Warn("upstream TLS certificates are not verified (upstream_tls_insecure_skip_verify): anyone on the path can read and change the traffic",
				"component", "proxy")
		}
	}
	return ts, nil
}
