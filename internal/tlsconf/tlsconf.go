// Package tlsconf builds the crypto/tls configurations of respmeter's two
// sides from certificate files: the server side that clients connect to
// (Redis's tls-cert-file, tls-key-file, tls-ca-cert-file and
// tls-auth-clients) and the client side that connects to the engines,
// each with the versions and TLS 1.2 cipher suites of Redis's
// tls-protocols and tls-ciphers (Suites). Errors name the files, never
// their content.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// MinVersion is the lowest TLS version either side accepts: TLS 1.2.
const MinVersion = tls.VersionTLS12

// Client certificate policies of Server, with Redis's names and meanings
// (redis.conf tls-auth-clients): "yes" requires a certificate signed by
// the CA, "optional" verifies one when the client sends it, "no" asks for
// none.
const (
	AuthClientsNo       = "no"
	AuthClientsOptional = "optional"
	AuthClientsYes      = "yes"
)

// Server returns the configuration of the client-facing TLS listener:
// the certificate and key of certFile and keyFile (PEM), client
// certificates verified against caFile (PEM; needed unless authClients is
// "no") as authClients says, the versions and TLS 1.2 cipher suites of s
// (its zero value: TLS 1.2 and 1.3, Go's default suites).
func Server(certFile, keyFile, caFile, authClients string, s Suites) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tls: a certificate file and a key file are needed")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load certificate %s and key %s: %w", certFile, keyFile, err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}}
	s.apply(c)
	switch authClients {
	case AuthClientsNo, "":
		c.ClientAuth = tls.NoClientCert
	case AuthClientsOptional:
		c.ClientAuth = tls.VerifyClientCertIfGiven
	case AuthClientsYes:
		c.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("tls: auth-clients %q: want no, optional or yes", authClients)
	}
	if c.ClientAuth != tls.NoClientCert {
		if caFile == "" {
			return nil, fmt.Errorf("tls: auth-clients %s needs a CA certificate file", authClients)
		}
		if c.ClientCAs, err = pool(caFile); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Client returns the configuration of the connections to the engines:
// their certificates verified against caFile (PEM; "" uses the system's
// roots) and serverName (""; each engine's host name as dialed), a client
// certificate from certFile and keyFile when given, the versions and TLS
// 1.2 cipher suites of s (its zero value: TLS 1.2 and 1.3, Go's default
// suites). insecure skips verifying the engine's certificate (the caller
// warns).
func Client(caFile, certFile, keyFile, serverName string, insecure bool, s Suites) (*tls.Config, error) {
	c := &tls.Config{ServerName: serverName, InsecureSkipVerify: insecure}
	s.apply(c)
	if caFile != "" {
		var err error
		if c.RootCAs, err = pool(caFile); err != nil {
			return nil, err
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("tls: give both a client certificate file and a key file, or neither")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: load certificate %s and key %s: %w", certFile, keyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// pool reads the PEM certificates of file.
func pool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: CA certificates: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls: CA certificates: no PEM certificate in %s", file)
	}
	return p, nil
}
