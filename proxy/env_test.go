package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// env is a proxy serving on a loopback listener, with its CA, the audit records it wrote and,
// for newEnv, plain and TLS upstreams that record what reached them.
type env struct {
	proxy    *Proxy
	ca       *ca.CA
	addr     string // proxy listener
	http     *httptest.Server
	https    *httptest.Server
	audit    *e2etest.Recorder
	upstream chan *http.Request
}

type envOpt func(*Options)

// newEnv is a proxy deciding with testPolicy in front of plain and TLS upstreams that echo
// what they received and queue it on upstream.
func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	e := &env{upstream: make(chan *http.Request, 100)}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r2 := r.Clone(context.Background())
		r2.Body = io.NopCloser(strings.NewReader(string(body)))
		select {
		case e.upstream <- r2:
		default:
		}
		w.Header().Set("X-Upstream", "yes")
		fmt.Fprintf(w, "upstream %s %s host=%s auth=%q body=%q", r.Method, r.URL.Path, r.Host, r.Header.Get("Authorization"), body)
	})
	e.http = httptest.NewServer(handler)
	e.https = httptest.NewTLSServer(handler)
	t.Cleanup(e.http.Close)
	t.Cleanup(e.https.Close)
	upstreamCAs := x509.NewCertPool()
	upstreamCAs.AddCert(e.https.Certificate())
	e.start(t, Options{Decider: e2etest.Engine(t, testPolicy), UpstreamCAs: upstreamCAs}, opts)
	return e
}

// start serves a proxy with options o on a loopback listener until the test ends. The env
// gets a new CA and audit recorder, which o is given, with 127.0.0.0/8 allowed as a
// destination; opts change o last.
func (e *env) start(t *testing.T, o Options, opts []envOpt) {
	t.Helper()
	c, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	e.ca, e.audit = c, &e2etest.Recorder{}
	o.CA, o.Auditor = c, e.audit
	o.AllowPrivate = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	for _, f := range opts {
		f(&o)
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	e.proxy, e.addr = p, ln.Addr().String()
}

// client trusts airlock's CA (as a sandbox does through SSL_CERT_FILE) and the proxy.
func (e *env) client(user *url.Userinfo) *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(e.ca.Certificate())
	return &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: e.addr, User: user}),
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
}

func get(t *testing.T, c *http.Client, method, u, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func mustIssue(t *testing.T, p *Proxy, id identity.Identity) string {
	t.Helper()
	tok, err := p.IssueToken(context.Background(), id)
	if err != nil {
		t.Fatalf("IssueToken(%s): %v", id.ID, err)
	}
	return tok
}
