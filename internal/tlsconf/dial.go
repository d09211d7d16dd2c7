package tlsconf

import (
	"context"
	"crypto/tls"
	"net"
)

// Dialer runs the client side of TLS connections: respmeter proxy's to
// the engines (every one: the clients' links, private and shared, the
// cluster's shard links and the side connections), and check's and
// replay's to their target. It is the one place such a handshake gets its
// configuration: the one read last (a Reloader's, whose CA certificates
// and client certificate follow their files), naming the server as
// configured or else by the host dialed.
type Dialer struct {
	cur func() *tls.Config
}

// NewDialer returns a Dialer that dials with c (Client builds it), always.
func NewDialer(c *tls.Config) *Dialer { return &Dialer{cur: func() *tls.Config { return c }} }

// Config returns the configuration of one dial to addr ("host:port"): the
// one in use, whole (its CA pool, client certificate and server name),
// and when it names no server, a copy naming addr's host, as tls.Dial
// does: the peer's certificate is then verified for that host, a DNS name
// or an IP address among its IP SANs (crypto/tls sends no SNI for an IP
// address, and verifies nothing at all with no name and no
// InsecureSkipVerify: it refuses to dial).
func (d *Dialer) Config(addr string) *tls.Config {
	c := d.cur()
	if c.ServerName != "" || c.InsecureSkipVerify {
		return c
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	c = c.Clone()
	c.ServerName = host
	return c
}

// Handshake runs the client handshake over nc, a connection to addr, with
// Config(addr), within ctx. On error nc is closed; the error names what
// failed (a certificate not verified: "tls: failed to verify certificate:
// x509: ..."), never a key.
func (d *Dialer) Handshake(ctx context.Context, nc net.Conn, addr string) (*tls.Conn, error) {
	tc := tls.Client(nc, d.Config(addr))
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = nc.Close()
		return nil, err
	}
	return tc, nil
}
