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

// HeldWritePolicy lets sandboxes reach upstream.test and holds a request to /write there for
// approval (rule e2e.write); everything else is denied (e2e.default).
const HeldWritePolicy = `package airlock

default decision := {"action": "deny", "rule": "e2e.default", "reason": "not allowed"}

decision := {"action": "allow", "rule": "e2e.connect"} if {
	input.phase == "connect"
	input.request.host == "upstream.test"
}

decision := {"action": "approve", "rule": "e2e.write", "reason": "writes need a human"} if {
	input.phase == "request"
	input.request.host == "upstream.test"
	input.request.path == "/write"
}
`

// Engine compiles policy (real OPA) from a temporary directory.
func Engine(t testing.TB, policy string) *rego.Engine {
	t.Helper()
	return EngineWith(t, rego.Options{}, policy, "")
}

// EngineWith is Engine with the engine options o (its Dir is the temporary directory) and,
// unless data is empty, data.json holding data.
func EngineWith(t testing.TB, o rego.Options, policy, data string) *rego.Engine {
	t.Helper()
	o.Dir = t.TempDir()
	files := map[string]string{"policy.rego": policy}
	if data != "" {
		files["data.json"] = data
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(o.Dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	eng, err := rego.New(context.Background(), o)
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
