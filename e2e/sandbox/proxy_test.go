//go:build e2e

package sandbox_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/testkit/e2etest"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/sandbox"
)

// realProxy is the airlock proxy with real OPA and an HTTPS upstream "upstream.test" whose
// certificate comes from its own CA; the sandbox trusts airlock's CA only through the
// environment the sandbox module builds.
type realProxy struct {
	p        *proxy.Proxy
	ca       *ca.CA
	audit    *e2etest.Recorder
	upstream *httptest.Server
	port     string
}

func startRealProxy(t *testing.T) *realProxy {
	t.Helper()
	eng := e2etest.Engine(t, e2etest.UpstreamPolicy)
	up, pool := e2etest.TLSUpstream(t, "upstream.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
	}))
	airlockCA, _ := ca.New()
	rp := &realProxy{ca: airlockCA, audit: &e2etest.Recorder{}, upstream: up}
	var err error
	rp.p, err = proxy.New(proxy.Options{
		Decider: eng, CA: airlockCA, Auditor: rp.audit, UpstreamCAs: pool,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:     e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rp.p.Shutdown(context.Background()) })
	u, _ := url.Parse(up.URL)
	rp.port = u.Port()
	return rp
}

func systemBundle(t *testing.T, caPEM []byte) []byte {
	b, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Skip("no system CA bundle")
	}
	return append(append(b, '\n'), caPEM...)
}

func runIn(t *testing.T, sb *sandbox.Sandbox, script string) (string, int) {
	t.Helper()
	res, err := sb.Run(context.Background(), sandbox.Command{Args: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	return string(res.Stdout) + string(res.Stderr), res.ExitCode
}

// TestRealClientsThroughAirlock: curl and python inside a native sandbox reach an allowed
// HTTPS upstream through the real proxy (intercepted with airlock's CA, trusted through the
// CA variables), are refused elsewhere with a readable reason, and every request is
// attributed to the sandbox that made it.
func TestRealClientsThroughAirlock(t *testing.T) {
	rp := startRealProxy(t)
	bundle := systemBundle(t, rp.ca.CertPEM())
	sb, err := sandbox.New(context.Background(), sandbox.Options{Backend: &native.Native{}, ID: "sbx-clients", Labels: map[string]string{"task": "e2e"},
		Proxy: rp.p, CABundle: bundle})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	base := "https://upstream.test:" + rp.port
	tests := []struct {
		name, script, want string
	}{
		{"curl allowed", "curl -sS " + base + "/allowed/curl", "hello GET /allowed/curl"},
		{"curl denied", "curl -sS -w '%{http_code}' " + "http://upstream.test:" + rp.port + "/secret", "403"},
		{"curl denied names rule", "curl -sS http://upstream.test:" + rp.port + "/secret", "rule: e2e.default"},
		{"python urllib allowed", `python3 -c "import urllib.request as u; print(u.urlopen('` + base + `/allowed/py').read().decode())"`, "hello GET /allowed/py"},
		{"python urllib denied", `python3 -c "
import urllib.request as u, urllib.error as e
try:
    u.urlopen('` + base + `/secret')
except e.HTTPError as x:
    print(x.code, x.headers.get('X-Airlock-Rule'))
"`, "403 e2e.default"},
		{"python requests allowed", `python3 -c "import requests; print(requests.get('` + base + `/allowed/requests').text)"`, "hello GET /allowed/requests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _ := runIn(t, sb, tt.script)
			if !strings.Contains(out, tt.want) {
				t.Errorf("%s: output %q, want %q", tt.script, out, tt.want)
			}
		})
	}
	// Without the CA variables, curl does not trust the interception: the trust comes from
	// the environment the sandbox module builds, nothing else.
	if out, code := runIn(t, sb, "unset CURL_CA_BUNDLE SSL_CERT_FILE; curl -sS --cacert /dev/null "+base+"/allowed"); code == 0 {
		t.Errorf("curl trusted the interception without airlock's CA: %q", out)
	}
	n := 0
	for _, ev := range rp.audit.Events() {
		if ev.SandboxID != "sbx-clients" || ev.Labels["task"] != "e2e" {
			t.Errorf("event attributed to %q %v, want sbx-clients task=e2e", ev.SandboxID, ev.Labels)
		}
		n++
	}
	if n < len(tests) {
		t.Errorf("%d audit events, want at least %d", n, len(tests))
	}
}

// TestTwoSandboxesAreAttributedApart: each sandbox's listener is its identity.
func TestTwoSandboxesAreAttributedApart(t *testing.T) {
	rp := startRealProxy(t)
	bundle := systemBundle(t, rp.ca.CertPEM())
	var sbs []*sandbox.Sandbox
	for _, id := range []string{"sbx-a", "sbx-b"} {
		sb, err := sandbox.New(context.Background(), sandbox.Options{Backend: &native.Native{}, ID: id, Proxy: rp.p, CABundle: bundle})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close(context.Background())
		sbs = append(sbs, sb)
	}
	for i, sb := range sbs {
		out, _ := runIn(t, sb, fmt.Sprintf("curl -sS https://upstream.test:%s/allowed/%d", rp.port, i))
		if !strings.Contains(out, fmt.Sprintf("/allowed/%d", i)) {
			t.Fatalf("sandbox %s: %q", sb.ID(), out)
		}
	}
	for _, ev := range rp.audit.Events() {
		if ev.Kind != "request" {
			continue
		}
		want := map[string]string{"/allowed/0": "sbx-a", "/allowed/1": "sbx-b"}[ev.Path]
		if ev.SandboxID != want {
			t.Errorf("request %s attributed to %s, want %s", ev.Path, ev.SandboxID, want)
		}
	}
}
