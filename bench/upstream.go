package bench

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-proxy/airlock/ca"
)

// Body sizes the upstream serves.
const (
	SmallBody = 20
	LargeBody = 64 << 10
)

// Upstream is the origin every path ends at: one plain-HTTP and one HTTPS listener on
// loopback, serving /small and /64k, and /cred/small and /cred/64k, which answer 401 unless
// the request carries "Authorization: Bearer <Token>" (proof that a credential was injected).
type Upstream struct {
	HTTPAddr  string
	HTTPSAddr string
	// CA issued the HTTPS listener's certificate (for 127.0.0.1); CAPEM is its certificate.
	CA    *ca.CA
	CAPEM []byte
	Token string

	servers []*http.Server
}

// StartUpstream starts both listeners on 127.0.0.1.
func StartUpstream(token string) (*Upstream, error) {
	c, err := ca.New()
	if err != nil {
		return nil, fmt.Errorf("upstream CA: %w", err)
	}
	leaf, err := c.Leaf("127.0.0.1")
	if err != nil {
		return nil, fmt.Errorf("upstream certificate: %w", err)
	}
	u := &Upstream{CA: c, CAPEM: c.CertPEM(), Token: token}
	h := u.handler()
	for _, tlsOn := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			u.Close()
			return nil, fmt.Errorf("upstream listen: %w", err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
			// HTTP/1.1 only, so that every peer speaks the same protocol to the upstream.
			TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}}
		if tlsOn {
			srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}}
			ln = tls.NewListener(ln, srv.TLSConfig)
			u.HTTPSAddr = ln.Addr().String()
		} else {
			u.HTTPAddr = ln.Addr().String()
		}
		u.servers = append(u.servers, srv)
		go func() { _ = srv.Serve(ln) }()
	}
	return u, nil
}

// RootCAs is a pool holding the upstream's CA.
func (u *Upstream) RootCAs() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(u.CA.Certificate())
	return p
}

// Close stops both listeners.
func (u *Upstream) Close() {
	for _, s := range u.servers {
		_ = s.Close()
	}
}

func (u *Upstream) handler() http.Handler {
	small := bytes.Repeat([]byte("a"), SmallBody-1)
	small = append(small, '\n')
	large := bytes.Repeat([]byte("0123456789abcdef"), LargeBody/16)
	want := "Bearer " + u.Token
	serve := func(b []byte, cred bool) http.HandlerFunc {
		n := strconv.Itoa(len(b))
		return func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if cred && r.Header.Get("Authorization") != want {
				http.Error(w, "no injected credential", http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", n)
			_, _ = w.Write(b)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/small", serve(small, false))
	mux.Handle("/64k", serve(large, false))
	mux.Handle("/cred/small", serve(small, true))
	mux.Handle("/cred/64k", serve(large, true))
	mux.Handle("/mcp", serve(small, false))
	mux.Handle("/post", serve(small, false))
	return mux
}

// errNotReady is returned when a child process never started listening.
var errNotReady = errors.New("not listening")
