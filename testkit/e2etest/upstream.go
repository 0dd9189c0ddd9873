package e2etest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/rego"
)

// UpstreamPolicy allows the CONNECT to "upstream.test" and GET /allowed* on it; everything
// else is denied by rule e2e.default.
const UpstreamPolicy = `package airlock

default decision := {"action": "deny", "rule": "e2e.default", "reason": "not on the e2e allowlist"}

decision := {"action": "allow", "rule": "e2e.connect"} if {
	input.phase == "connect"
	input.request.host == "upstream.test"
}

decision := {"action": "allow", "rule": "e2e.read"} if {
	input.phase == "request"
	input.request.host == "upstream.test"
	input.request.method == "GET"
	startswith(input.request.path, "/allowed")
}
`

// Engine compiles policy (real OPA) from a temporary directory.
func Engine(t testing.TB, policy string) *rego.Engine {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	eng, err := rego.New(context.Background(), rego.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// TLSUpstream starts an HTTPS server for host whose certificate comes from a CA of its own,
// and returns it with a pool holding that CA (the proxy's UpstreamCAs).
func TLSUpstream(t testing.TB, host string, h http.Handler) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	upCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := upCA.Leaf(host)
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(h)
	up.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	up.StartTLS()
	t.Cleanup(up.Close)
	pool := x509.NewCertPool()
	pool.AddCert(upCA.Certificate())
	return up, pool
}
