//go:build e2e

package docker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// queryPolicy reads the query but not the headers, so its decisions are cached: reads of
// /allowed... on upstream.test are allowed unless a parameter is named admin or force.
const queryPolicy = `package airlock

default decision := {"action": "deny", "rule": "q.default", "reason": "not allowed"}

privileged if {
	some name, _ in input.request.query
	name in {"admin", "force"}
}

decision := {"action": "allow", "rule": "q.connect"} if {
	input.phase == "connect"
	input.request.host == "upstream.test"
}

decision := {"action": "allow", "rule": "q.read"} if {
	input.phase == "request"
	input.request.host == "upstream.test"
	input.request.method == "GET"
	startswith(input.request.path, "/allowed")
	not privileged
}

decision := {"action": "deny", "rule": "q.privileged", "reason": "admin and force are not for agents"} if {
	input.phase == "request"
	input.request.method == "GET"
	startswith(input.request.path, "/allowed")
	privileged
}
`

// TestRequestTargetsFromAContainer: curl in a Docker sandbox (its proxy listener in the
// container's own network namespace) sends the ambiguous request targets and
// the decision-cache attack through the real proxy, in plain HTTP and intercepted HTTPS: each
// is refused with 400 from rule protocol, or the upstream receives the canonical target the
// policy decided on, and the audit event agrees.
func TestRequestTargetsFromAContainer(t *testing.T) {
	var mu sync.Mutex
	var received []string
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received = append(received, r.RequestURI)
		mu.Unlock()
		fmt.Fprintf(w, "hello %s", r.RequestURI)
	})
	receivedSince := func(n int) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), received[n:]...)
	}
	tlsUp, pool := e2etest.TLSUpstream(t, "upstream.test", record)
	plainUp := httptest.NewServer(record)
	t.Cleanup(plainUp.Close)
	airlockCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	rec := &e2etest.Recorder{}
	p, err := proxy.New(proxy.Options{
		Decider: e2etest.Engine(t, queryPolicy), CA: airlockCA, Auditor: rec, UpstreamCAs: pool,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:     e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })

	b := newBackend(t, docker.Options{Client: dockerClient(t), Mode: docker.ModeNetNS})
	ws := t.TempDir()
	if err := os.Chown(ws, 1234, 1234); err != nil {
		t.Fatal(err)
	}
	s := newSandbox(t, sandbox.Options{ID: "sbx-docker-targets", Backend: b, Proxy: p,
		CABundle: airlockCA.CertPEM(), Workspace: ws, Memory: 128 << 20, Pids: 64})

	port := func(u string) string { pu, _ := url.Parse(u); return pu.Port() }
	plain := "http://upstream.test:" + port(plainUp.URL)
	tls := "https://upstream.test:" + port(tlsUp.URL)
	curl := func(u string) string {
		return "curl -sS --path-as-is -o /dev/null -w '%{http_code} %header{x-airlock-rule}' '" + u + "'"
	}
	tests := []struct {
		name, url string
		status    int
		rule      string
		sent      string // RequestURI the upstream receives; "" nothing
	}{
		{"';' in the query", plain + "/allowed?x=1;admin=true", 400, "protocol", ""},
		{"';' in the query, https", tls + "/allowed?x=1;admin=true", 400, "protocol", ""},
		{"admin as a real pair", plain + "/allowed?x=1&admin=true", 403, "q.privileged", ""},
		{"force inside a value (allowed, cached)", plain + "/allowed?a=1%03force%04true", 200, "q.read", "/allowed?a=1%03force%04true"},
		{"force as a real pair after the cached one", plain + "/allowed?a=1&force=true", 403, "q.privileged", ""},
		{"force inside a value, https", tls + "/allowed?a=1%03force%04true", 200, "q.read", "/allowed?a=1%03force%04true"},
		{"force as a real pair after it, https", tls + "/allowed?a=1&force=true", 403, "q.privileged", ""},
		{"the canonical query", plain + "/allowed?q=a+b&&c&q=%7e", 200, "q.read", "/allowed?q=a%20b&c=&q=~"},
		{"the canonical query, https", tls + "/allowed/x%2fy?q=%C3%A9,/", 200, "q.read", "/allowed/x%2Fy?q=%C3%A9%2C%2F"},
		{"an encoded name", plain + "/allowed?%61dmin=1", 403, "q.privileged", ""},
		{"an empty name", plain + "/allowed?=admin", 400, "protocol", ""},
		{"a malformed escape", tls + "/allowed?x=%zz", 400, "protocol", ""},
		{"an encoded slash next to a dot segment", plain + "/allowed/..%2Fsecret", 400, "protocol", ""},
		{"';' path parameters, https", tls + "/allowed/..;/secret", 400, "protocol", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nev := rec.Len()
			mu.Lock()
			n := len(received)
			mu.Unlock()
			out, _ := run(t, s, curl(tt.url))
			out = strings.TrimSpace(out)
			if want := fmt.Sprintf("%d %s", tt.status, tt.rule); out != want && !(tt.status == 200 && out == "200") {
				t.Errorf("curl %s: got %q, want %q", tt.url, out, want)
			}
			got := receivedSince(n)
			if tt.sent == "" && len(got) > 0 || tt.sent != "" && (len(got) != 1 || got[0] != tt.sent) {
				t.Errorf("the upstream received %q, want %q", got, tt.sent)
			}
			decision := map[int]string{200: "allow", 400: "error", 403: "deny"}[tt.status]
			// An allowed request's event is written when its response body closes.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				found := false
				for _, ev := range rec.Since(nev) {
					found = found || ev.Kind == "request" && ev.Status == tt.status && ev.Rule == tt.rule && string(ev.Decision) == decision
				}
				if found {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("no audit event %d %s %s in %+v", tt.status, tt.rule, decision, rec.Since(nev))
					break
				}
			}
		})
	}
}
