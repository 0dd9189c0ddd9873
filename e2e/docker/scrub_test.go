//go:build e2e

package docker_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// TestScrubInContainer: curl in a Docker sandbox (netns mode) asks an upstream that echoes
// the injected credential in every way a response can carry it; nothing it receives holds
// any form of it, and what airlock cannot check is refused — the same cases as the native
// suite (e2e/clients TestScrubRealClients), the same proxy, another backend.
func TestScrubInContainer(t *testing.T) {
	rf := &e2etest.Reflector{}
	upCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(rf)
	up.EnableHTTP2 = true
	up.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.Leaf(h.ServerName) }}
	up.StartTLS()
	t.Cleanup(up.Close)
	plain := httptest.NewServer(rf)
	t.Cleanup(plain.Close)
	u, _ := url.Parse(up.URL)
	https := "https://echo.test:" + u.Port()
	u, _ = url.Parse(plain.URL)
	plainURL := "http://echo.test:" + u.Port()

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(e2etest.ReflectPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	eng, err := rego.New(context.Background(), rego.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	broker, canary := e2etest.CanaryBroker(t, nil)
	airlockCA, _ := ca.New()
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Certificate())
	rec := &e2etest.Recorder{}
	p, err := proxy.New(proxy.Options{Decider: eng, CA: airlockCA, Credentials: broker, Auditor: rec, UpstreamCAs: roots,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:     e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")},
		Limits:       proxy.Limits{MaxRedactionsPerCredential: 1 << 30}}) // the upstream echoes on purpose
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })

	b := newBackend(t, docker.Options{Client: dockerClient(t), Mode: docker.ModeNetNS})
	s := newSandbox(t, sandbox.Options{ID: "sbx-docker-scrub", Backend: b, Proxy: p, CABundle: airlockCA.CertPEM(),
		Memory: 128 << 20, Pids: 64, CPUs: 1})
	for _, tc := range e2etest.ScrubCurlCases(https, plainURL) {
		t.Run(tc.Name, func(t *testing.T) {
			out, _ := run(t, s, tc.Shell())
			tc.Check(t, out, canary)
		})
	}
	if seen := rf.Seen(); len(seen) == 0 || seen[0].Token != canary {
		t.Fatal("the upstream never received the credential: the test would prove nothing")
	}
	evs, _ := json.Marshal(rec.Events())
	if l := e2etest.Leak(evs, canary); l != "" {
		t.Errorf("the audit events hold the credential (%s)", l)
	}
}
