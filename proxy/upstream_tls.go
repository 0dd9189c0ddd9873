package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// The upstream side of the proxy's connections: net/http's Transport, and the TLS every
// upstream connection is made with (the Transport's and h1Transport's alike).

func newTransport(g *Guard, ut *upstreamTLS, opts Options) *http.Transport {
	return &http.Transport{
		Proxy:       nil,
		DialContext: g.DialContext,
		// Every HTTPS connection is made by ut, which verifies the certificate for the
		// name that was dialled (TLSClientConfig and TLSHandshakeTimeout are unused).
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			raw, err := g.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if ctx.Value(onlyHTTP1{}) != nil {
				return ut.client(ctx, raw, host, "http/1.1")
			}
			return ut.client(ctx, raw, host, "h2", "http/1.1")
		},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          2048,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: opts.Limits.UpstreamHeaderTimeout,
		ExpectContinueTimeout: time.Second,
	}
}

// onlyHTTP1 marks the context of a request that exists only in HTTP/1.1 (a WebSocket
// upgrade), so that a TLS connection dialled for it offers no h2. The Transport does this
// itself for the TLS it makes (its connections for such requests are a pool of their own,
// and its dials keep the request context's values); for a TLS dial of ours, the dialler
// has only the context to go by.
type onlyHTTP1 struct{}

// requiresHTTP1 is net/http's test for a request its Transport sends only over HTTP/1.1.
func requiresHTTP1(req *http.Request) bool {
	return httpguts.HeaderValuesContainsToken(req.Header["Connection"], "upgrade") &&
		strings.EqualFold(req.Header.Get("Upgrade"), "websocket")
}

// upstreamTLSTimeout bounds a TLS handshake with an upstream (the Transport's own
// TLSHandshakeTimeout, which a custom TLS dial does not get).
const upstreamTLSTimeout = 10 * time.Second

// upstreamTLS makes the TLS client side of every upstream connection, the Transport's and
// the direct path's alike.
type upstreamTLS struct {
	// extra roots beside the system's (--upstream-ca); nil: the system roots only.
	extra *x509.CertPool
}

// client completes a TLS handshake over raw with host (a name or an IP address, as
// dialled) as the name the certificate must be for, offering protos, within
// upstreamTLSTimeout. raw is closed on failure.
//
// The name is bound here, per connection, and not read back from the connection state:
// for an IP address crypto/tls sends no SNI and reports an empty ServerName, and a
// verification keyed on that checked no name at all, so that a certificate for any name
// chaining to a trusted root was taken for an IP upstream's.
func (u *upstreamTLS) client(ctx context.Context, raw net.Conn, host string, protos ...string) (*tls.Conn, error) {
	// RootCAs nil: the system roots, which crypto/x509 loads at the first verification,
	// not at start-up (parsing the system bundle is ~25 ms of a one-shot run, and a run
	// that makes no TLS request never needs it). A host without roots verifies nothing,
	// as an empty pool would.
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host, NextProtos: protos}
	if extra := u.extra; extra != nil {
		// x509.CertPool cannot be merged: the extra roots are tried beside the system's
		// in VerifyConnection (a nil pool there is the system roots).
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyWithPools(cs, host, nil, extra)
		}
	}
	tc := tls.Client(raw, cfg)
	hctx, cancel := context.WithTimeout(ctx, upstreamTLSTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		raw.Close()
		return nil, err
	}
	return tc, nil
}

// verifyWithPools verifies the server chain, for host, against the system roots or the
// extra roots.
func verifyWithPools(cs tls.ConnectionState, host string, pools ...*x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("upstream sent no certificate")
	}
	if host == "" {
		return errors.New("no upstream name to verify its certificate for")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	// The error said is the one of a pool the chain reached (a wrong name, an expired
	// certificate), not "unknown authority" from a pool it has nothing to do with.
	var why error
	for _, pool := range pools {
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: host, Roots: pool, Intermediates: inter})
		if err == nil {
			return nil
		}
		var unknown x509.UnknownAuthorityError
		if why == nil || !errors.As(err, &unknown) {
			why = err
		}
	}
	return why
}

// LoadCAFile reads PEM certificates for --upstream-ca.
func LoadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New(path + ": no PEM certificates found")
	}
	return pool, nil
}
