package tlsconf

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"sync"
	"time"
)

// CA is a certificate authority made on the spot, for throwaway
// certificates on loopback: respmeter demo --tls's, and the tests'. Its key
// lives in memory only; ECDSA P-256 throughout, but for IssueRSA's
// certificates.
type CA struct {
	// Cert is the CA's certificate; CertPEM the same, PEM-encoded.
	Cert    *x509.Certificate
	CertPEM []byte

	key    *ecdsa.PrivateKey
	mu     sync.Mutex
	serial int64
}

// NewCA makes a CA named name (its CommonName), valid from notBefore to
// notAfter.
func NewCA(name string, notBefore, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tls: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("tls: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), key: key, serial: 1}, nil
}

// Issue issues a certificate for name (its CommonName) that servers and
// clients can present, valid for 127.0.0.1, ::1 and localhost from
// notBefore to notAfter, each with the next serial number. It returns the
// certificate and its PKCS#8 private key, PEM-encoded.
func (ca *CA) Issue(name string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: key: %w", err)
	}
	return ca.issue(name, notBefore, notAfter, key, x509.KeyUsageDigitalSignature)
}

// IssueRSA is Issue with an RSA 2048-bit key, which the TLS 1.2 suites
// of RSA key exchange and RSA signatures need (OpenSSL's AES128-SHA256,
// ECDHE-RSA-AES128-GCM-SHA256).
func (ca *CA) IssueRSA(name string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: key: %w", err)
	}
	return ca.issue(name, notBefore, notAfter, key, x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment)
}

// issue issues the certificate of Issue and IssueRSA for key.
func (ca *CA) issue(name string, notBefore, notAfter time.Time, key crypto.Signer, usage x509.KeyUsage) (certPEM, keyPEM []byte, err error) {
	ca.mu.Lock()
	ca.serial++
	serial := ca.serial
	ca.mu.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     usage,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: key: %w", err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder), nil
}

// IssueFiles issues a certificate for name as Issue does and writes it
// and its key to certFile and keyFile (mode 0600).
func (ca *CA) IssueFiles(name string, notBefore, notAfter time.Time, certFile, keyFile string) error {
	return writeIssued(certFile, keyFile)(ca.Issue(name, notBefore, notAfter))
}

// IssueRSAFiles is IssueFiles with IssueRSA's key.
func (ca *CA) IssueRSAFiles(name string, notBefore, notAfter time.Time, certFile, keyFile string) error {
	return writeIssued(certFile, keyFile)(ca.IssueRSA(name, notBefore, notAfter))
}

// writeIssued returns a function writing an issued certificate and key
// to certFile and keyFile (mode 0600).
func writeIssued(certFile, keyFile string) func(c, k []byte, err error) error {
	return func(c, k []byte, err error) error {
		if err != nil {
			return err
		}
		if err := os.WriteFile(certFile, c, 0o600); err != nil {
			return err
		}
		return os.WriteFile(keyFile, k, 0o600)
	}
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
