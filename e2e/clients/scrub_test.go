//go:build e2e

package clients_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// scrubEnv: a native sandbox, the proxy with a credential ("canary", a random value) that
// e2etest.ReflectPolicy attaches, and a Reflector echoing it back as "echo.test", over
// HTTPS (HTTP/2 offered, so airlock's upstream leg speaks it) and plain HTTP.
type scrubEnv struct {
	sb               *sandbox.Sandbox
	rf               *e2etest.Reflector
	audit            *e2etest.Recorder
	canary           string
	https, plainHTTP string
}

func newScrubEnv(t *testing.T) *scrubEnv {
	t.Helper()
	se := &scrubEnv{rf: &e2etest.Reflector{}, audit: &e2etest.Recorder{}}
	upCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(se.rf)
	up.EnableHTTP2 = true
	up.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.Leaf(h.ServerName) }}
	up.StartTLS()
	t.Cleanup(up.Close)
	plain := httptest.NewServer(se.rf)
	t.Cleanup(plain.Close)
	u, _ := url.Parse(up.URL)
	se.https = "https://echo.test:" + u.Port()
	u, _ = url.Parse(plain.URL)
	se.plainHTTP = "http://echo.test:" + u.Port()

	eng := e2etest.Engine(t, e2etest.ReflectPolicy)
	broker, canary := e2etest.CanaryBroker(t, nil)
	se.canary = canary
	airlockCA, _ := ca.New()
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Certificate())
	p, err := proxy.New(proxy.Options{Decider: eng, CA: airlockCA, Credentials: broker, Auditor: se.audit,
		UpstreamCAs: roots, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver: e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")},
		Limits:   proxy.Limits{MaxRedactionsPerCredential: 1 << 30}}) // the upstream echoes on purpose
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	sys, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Skip("no system CA bundle")
	}
	se.sb = newSandbox(t, sandbox.Options{ID: "sbx-scrub", Proxy: p, CABundle: append(append(sys, '\n'), airlockCA.CertPEM()...),
		Timeout: 2 * time.Minute})
	return se
}

func (se *scrubEnv) run(t *testing.T, script string) string {
	t.Helper()
	res, err := se.sb.Run(context.Background(), sandbox.Command{Args: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	return string(res.Stdout) + string(res.Stderr)
}

// TestScrubRealClients: curl and Python inside a native sandbox ask an upstream that echoes
// the injected credential in every way a response can carry it (headers, trailers, 1xx,
// encodings, HTTP/2, ranges, compressed payloads, a WebSocket upgrade refused). Everything they
// receive (curl's --trace-ascii shows every byte after TLS) holds no form of it; what airlock
// cannot check is a 502 telling the agent about "reflects"; the audit events hold none.
func TestScrubRealClients(t *testing.T) {
	se := newScrubEnv(t)
	tests := append(e2etest.ScrubCurlCases(se.https, se.plainHTTP), []e2etest.ScrubCase{
		{Name: "python urllib", Script: `python3 -c "import urllib.request as u; print(u.urlopen('` + se.https + `/echo/json').read().decode())"`, Want: []string{"[airlock:redacted]"}},
		{Name: "python requests, gzip file", Script: `python3 -c "
import requests
r = requests.get('` + se.https + `/echo/gzip-file')
print(r.status_code, r.headers.get('X-Airlock-Rule'), r.text)"`, Want: []string{"502 scrub.echo"}},
		{Name: "python WebSocket on a rule that may reflect", Script: `python3 -c "
import os, socket, urllib.parse
p = urllib.parse.urlparse(os.environ['HTTP_PROXY'])
s = socket.create_connection((p.hostname, p.port))
s.sendall(b'GET ` + se.plainHTTP + `/ws/upgrade-h1 HTTP/1.1\r\nHost: echo.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n')
s.settimeout(3)
got = b''
try:
    while True:
        b = s.recv(4096)
        if not b:
            break
        got += b
except socket.timeout:
    pass
print(got.decode())"`, Want: []string{"403", "malformed", "reflects"}},
	}...)
	for _, tc := range tests {
		t.Run(tc.Name, func(t *testing.T) { tc.Check(t, se.run(t, tc.Shell()), se.canary) })
	}
	if len(se.rf.Seen()) == 0 || se.rf.Seen()[0].Token != se.canary {
		t.Fatal("the upstream never received the credential: the test would prove nothing")
	}
	for _, r := range se.rf.Seen() {
		if r.Range != "" {
			t.Errorf("the upstream received Range %q for %s on a credentialed request", r.Range, r.Path)
		}
	}
	evs, _ := json.Marshal(se.audit.Events())
	if l := e2etest.Leak(evs, se.canary); l != "" {
		t.Errorf("the audit events hold the credential (%s)", l)
	}
}
