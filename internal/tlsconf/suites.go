package tlsconf

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
)

// Suites is one side's TLS protocol versions and TLS 1.2 cipher suites,
// as redis.conf's tls-protocols and tls-ciphers give them (ParseSuites).
// The zero value is respmeter's default: TLS 1.2 and 1.3, Go's default
// cipher suites.
//
// What Go's crypto/tls lets a program restrict, and so what Suites can
// say: the lowest and highest version, and the TLS 1.2 suites. Not the
// TLS 1.3 suites (redis.conf's tls-ciphersuites: Go always offers
// TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384 and
// TLS_CHACHA20_POLY1305_SHA256), nor their order (Go orders the suites by
// its own preference since Go 1.17, and ignores PreferServerCipherSuites
// since Go 1.18).
type Suites struct {
	// MinVersion and MaxVersion bound the versions, tls.VersionTLS12 or
	// tls.VersionTLS13; 0 is the default (1.2 and 1.3).
	MinVersion, MaxVersion uint16
	// CipherSuites are the TLS 1.2 suites allowed (Go's IDs); nil is Go's
	// default list.
	CipherSuites []uint16
	// Insecure names (Go's names) the suites of CipherSuites that Go
	// lists as insecure (tls.InsecureCipherSuites), which the caller
	// warns about.
	Insecure []string
}

// openSSLNames gives each TLS 1.2 suite Go implements its OpenSSL name
// (openssl ciphers -V; RFC names in Go's tls.CipherSuite.Name). A test
// compares it with the openssl binary's list.
var openSSLNames = map[uint16]string{
	tls.TLS_RSA_WITH_RC4_128_SHA:                      "RC4-SHA",
	tls.TLS_RSA_WITH_3DES_EDE_CBC_SHA:                 "DES-CBC3-SHA",
	tls.TLS_RSA_WITH_AES_128_CBC_SHA:                  "AES128-SHA",
	tls.TLS_RSA_WITH_AES_256_CBC_SHA:                  "AES256-SHA",
	tls.TLS_RSA_WITH_AES_128_CBC_SHA256:               "AES128-SHA256",
	tls.TLS_RSA_WITH_AES_128_GCM_SHA256:               "AES128-GCM-SHA256",
	tls.TLS_RSA_WITH_AES_256_GCM_SHA384:               "AES256-GCM-SHA384",
	tls.TLS_ECDHE_ECDSA_WITH_RC4_128_SHA:              "ECDHE-ECDSA-RC4-SHA",
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA:          "ECDHE-ECDSA-AES128-SHA",
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA:          "ECDHE-ECDSA-AES256-SHA",
	tls.TLS_ECDHE_RSA_WITH_RC4_128_SHA:                "ECDHE-RSA-RC4-SHA",
	tls.TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA:           "ECDHE-RSA-DES-CBC3-SHA",
	tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA:            "ECDHE-RSA-AES128-SHA",
	tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA:            "ECDHE-RSA-AES256-SHA",
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256:       "ECDHE-ECDSA-AES128-SHA256",
	tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256:         "ECDHE-RSA-AES128-SHA256",
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256:         "ECDHE-RSA-AES128-GCM-SHA256",
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256:       "ECDHE-ECDSA-AES128-GCM-SHA256",
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384:         "ECDHE-RSA-AES256-GCM-SHA384",
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384:       "ECDHE-ECDSA-AES256-GCM-SHA384",
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256:   "ECDHE-RSA-CHACHA20-POLY1305",
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256: "ECDHE-ECDSA-CHACHA20-POLY1305",
}

// cipherSuite is one suite Go implements, as ParseSuites finds it.
type cipherSuite struct {
	s        *tls.CipherSuite
	insecure bool
}

// lookupSuite finds name, an OpenSSL or IANA suite name (exact, as
// OpenSSL's own matching is), among the suites Go implements.
func lookupSuite(name string) (cipherSuite, bool) {
	for i, list := range [][]*tls.CipherSuite{tls.CipherSuites(), tls.InsecureCipherSuites()} {
		for _, s := range list {
			if s.Name == name || openSSLNames[s.ID] == name {
				return cipherSuite{s: s, insecure: i == 1}, true
			}
		}
	}
	return cipherSuite{}, false
}

// Protocol names of redis.conf's tls-protocols that respmeter takes.
var protocolVersions = map[string]uint16{"tlsv1.2": tls.VersionTLS12, "tlsv1.3": tls.VersionTLS13}

// ParseSuites reads one side's settings with redis.conf's syntax and
// meaning: protocols is tls-protocols, versions separated by spaces,
// case-insensitive ("TLSv1.2 TLSv1.3"; "" for both); ciphers is
// tls-ciphers, TLS 1.2 suite names separated by ':' ("AES128-SHA256:
// ECDHE-RSA-AES128-GCM-SHA256"; OpenSSL's names or Go's IANA ones; ""
// for Go's default list). A name Go cannot do, TLSv1 and TLSv1.1 (below
// respmeter's TLS 1.2 floor), a TLS 1.3 suite, OpenSSL's cipher-string
// keywords ("HIGH", "!aNULL") and a cipher list with no TLS 1.2 version
// left to use it are errors that name the value at fault. Suites Go lists
// as insecure are allowed when named, and returned in Insecure.
func ParseSuites(protocols, ciphers string) (Suites, error) {
	var s Suites
	if p := strings.Fields(protocols); len(p) > 0 {
		for _, name := range p {
			v, ok := protocolVersions[strings.ToLower(name)]
			switch {
			case !ok && (strings.EqualFold(name, "TLSv1") || strings.EqualFold(name, "TLSv1.1")):
				return s, fmt.Errorf("tls: protocol %s: respmeter speaks TLS 1.2 and 1.3 only (TLSv1.2, TLSv1.3)", name)
			case !ok:
				return s, fmt.Errorf("tls: protocol %q: want TLSv1.2 or TLSv1.3, separated by spaces", name)
			}
			if s.MinVersion == 0 || v < s.MinVersion {
				s.MinVersion = v
			}
			s.MaxVersion = max(s.MaxVersion, v)
		}
	}
	if ciphers == "" {
		return s, nil
	}
	for _, name := range strings.Split(ciphers, ":") {
		name = strings.TrimSpace(name)
		if name == "" {
			return s, fmt.Errorf("tls: cipher list %q: an empty name", ciphers)
		}
		cs, ok := lookupSuite(name)
		switch {
		case !ok:
			return s, fmt.Errorf("tls: cipher %q: not a TLS 1.2 cipher suite Go's crypto/tls implements (give suite names, OpenSSL's or IANA's, separated by ':'; OpenSSL's keywords such as HIGH or !aNULL are not taken)", name)
		case !slices.Contains(cs.s.SupportedVersions, tls.VersionTLS12):
			return s, fmt.Errorf("tls: cipher %q is a TLS 1.3 suite (redis.conf's tls-ciphersuites), which Go's crypto/tls cannot restrict", name)
		}
		if !slices.Contains(s.CipherSuites, cs.s.ID) {
			s.CipherSuites = append(s.CipherSuites, cs.s.ID)
			if cs.insecure {
				s.Insecure = append(s.Insecure, cs.s.Name)
			}
		}
	}
	if s.MinVersion == tls.VersionTLS13 {
		return s, fmt.Errorf("tls: cipher list %q with protocols %q: TLS 1.2 suites are not used by TLS 1.3, the only version allowed", ciphers, protocols)
	}
	return s, nil
}

// ErrCipherSuites13 refuses redis.conf's tls-ciphersuites (redis-cli's
// --tls-ciphersuites): Go's crypto/tls always offers its three TLS 1.3
// suites and lets no program restrict them.
var ErrCipherSuites13 = fmt.Errorf("tls: TLS 1.3 cipher suites cannot be restricted: Go's crypto/tls always offers %s; to keep TLS 1.3 away, allow TLSv1.2 only and name its suites",
	strings.Join(tls13Names(), ", "))

// tls13Names returns Go's TLS 1.3 suites' names.
func tls13Names() []string {
	var out []string
	for _, s := range tls.CipherSuites() {
		if slices.Equal(s.SupportedVersions, []uint16{tls.VersionTLS13}) {
			out = append(out, s.Name)
		}
	}
	return out
}

// apply sets s's versions and suites in c, leaving MinVersion at least
// respmeter's floor.
func (s Suites) apply(c *tls.Config) {
	c.MinVersion = max(MinVersion, s.MinVersion)
	c.MaxVersion = s.MaxVersion
	c.CipherSuites = s.CipherSuites
}
