package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/rego"
)

// testPolicy allows GET /allowed* on 127.0.0.1 (and the CONNECT to it), holds POST /write
// for approval, tunnels "localhost", and denies everything else with rule test.default.
const testPolicy = `package airlock

default decision := {"action": "deny", "rule": "test.default", "reason": "not on the test allowlist"}

decision := {"action": "allow", "rule": "test.connect"} if {
	input.phase == "connect"
	input.request.host == "127.0.0.1"
}

decision := {"action": "allow", "rule": "test.tunnel", "tunnel": true} if {
	input.phase == "connect"
	input.request.host == "localhost"
}

decision := {"action": "allow", "rule": "test.read"} if {
	input.phase == "request"
	input.request.host == "127.0.0.1"
	input.request.method == "GET"
	startswith(input.request.path, "/allowed")
}

decision := {"action": "approve", "rule": "test.write", "reason": "writes need a human"} if {
	input.phase == "request"
	input.request.host == "127.0.0.1"
	input.request.method == "POST"
	input.request.path == "/write"
}
`

func TestAllowDenyPlainAndIntercepted(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	for _, base := range []string{e.http.URL, e.https.URL} {
		tests := []struct {
			method, path string
			status       int
			rule         string
		}{
			{"GET", "/allowed/x", 200, ""},
			{"GET", "/denied", 403, "test.default"},
			{"DELETE", "/allowed/x", 403, "test.default"},
			{"GET", "/a/%2e%2e/allowed", 200, ""}, // normalised before the policy sees it
			{"GET", "/allowed/../secret", 403, "test.default"},
		}
		for _, tt := range tests {
			resp, body := get(t, c, tt.method, base+tt.path, "")
			if resp.StatusCode != tt.status {
				t.Errorf("%s %s%s: status %d, want %d (body %q)", tt.method, base, tt.path, resp.StatusCode, tt.status, body)
				continue
			}
			if tt.status == 403 {
				if got := resp.Header.Get("X-Airlock-Rule"); got != tt.rule {
					t.Errorf("%s %s: X-Airlock-Rule = %q, want %q", tt.method, tt.path, got, tt.rule)
				}
				if got := resp.Header.Get("X-Airlock-Decision"); got != "deny" {
					t.Errorf("X-Airlock-Decision = %q, want deny", got)
				}
				if !strings.Contains(body, tt.rule) || !strings.Contains(body, "not on the test allowlist") {
					t.Errorf("refusal body %q does not name the rule and reason", body)
				}
				if resp.Header.Get("X-Upstream") != "" {
					t.Error("a denied request reached the upstream")
				}
			}
		}
	}
	// The intercepted request was served with airlock's certificate.
	resp, _ := get(t, c, "GET", e.https.URL+"/allowed", "")
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != "airlock CA" {
		t.Errorf("HTTPS was not intercepted with airlock's CA")
	}
}

func TestConnectDeniedAtEndpointPhase(t *testing.T) {
	e := newEnv(t)
	// 127.0.0.2 is not allowed at the connect phase: the CONNECT itself gets 403.
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(e.https.URL, "https://"))
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT 127.0.0.2:%s HTTP/1.1\r\nHost: 127.0.0.2:%s\r\n\r\n", port, port)
	// The whole response (it may arrive in several reads), then the body.
	got, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(got), "HTTP/1.1 403") || !strings.Contains(string(got), "test.default") {
		t.Errorf("CONNECT to a denied endpoint answered %q, want 403 naming the rule", got)
	}
	ev := e.audit.Events()
	if len(ev) == 0 || ev[len(ev)-1].Phase != "connect" || ev[len(ev)-1].Decision != "deny" {
		t.Errorf("audit events %+v, want a connect deny", ev)
	}
}

func TestTunnelPassesThroughUninspected(t *testing.T) {
	e := newEnv(t)
	u, _ := url.Parse(e.https.URL)
	tunnelURL := "https://localhost:" + u.Port() + "/anything"
	// The client trusts only the upstream's own certificate: that works only if airlock does
	// not intercept.
	pool := x509.NewCertPool()
	pool.AddCert(e.https.Certificate())
	c := &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: e.addr}),
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
	}}
	resp, body := get(t, c, "GET", tunnelURL, "")
	if resp.StatusCode != 200 || resp.TLS.PeerCertificates[0].Issuer.CommonName == "airlock CA" {
		t.Fatalf("tunnel: status %d body %q; want 200 with the upstream's own certificate", resp.StatusCode, body)
	}
}

func TestHostHeaderMustMatchConnectTarget(t *testing.T) {
	e := newEnv(t)
	u, _ := url.Parse(e.https.URL)
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", u.Host, u.Host)
	br := make([]byte, 1024)
	if n, err := conn.Read(br); err != nil || !strings.Contains(string(br[:n]), "200") {
		t.Fatalf("CONNECT: %q %v", br[:n], err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(e.ca.Certificate())
	tc := tls.Client(conn, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	fmt.Fprintf(tc, "GET /allowed HTTP/1.1\r\nHost: evil.example\r\n\r\n")
	n, _ := io.ReadAtLeast(tc, br, 12)
	if got := string(br[:n]); !strings.HasPrefix(got, "HTTP/1.1 421") {
		t.Errorf("inner request for another host answered %q, want 421", got)
	}
}

func TestAbsoluteFormHostHeaderIsReplaced(t *testing.T) {
	e := newEnv(t)
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s/allowed HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n", e.http.URL)
	b, _ := io.ReadAll(conn)
	u, _ := url.Parse(e.http.URL)
	if !strings.Contains(string(b), "host="+u.Host) {
		t.Errorf("upstream saw %q, want host=%s (the Host header must follow the URL)", b, u.Host)
	}
}

func TestIdentityAndRequireAuth(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RequireAuth = true })
	resp, _ := get(t, e.client(nil), "GET", e.http.URL+"/allowed", "")
	if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") == "" {
		t.Fatalf("no credential: status %d, want 407 with Proxy-Authenticate", resp.StatusCode)
	}
	id := identity.Identity{ID: "sbx-1", Labels: map[string]string{"task": "t"}}
	tok := mustIssue(t, e.proxy, id)
	resp, _ = get(t, e.client(url.UserPassword("sbx-1", tok)), "GET", e.https.URL+"/allowed", "")
	if resp.StatusCode != 200 {
		t.Fatalf("valid credential over CONNECT: status %d, want 200", resp.StatusCode)
	}
	resp, _ = get(t, e.client(url.UserPassword("sbx-1", "wrong")), "GET", e.http.URL+"/allowed", "")
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("bad credential: status %d, want 407", resp.StatusCode)
	}
	if err := e.proxy.RevokeToken(context.Background(), "sbx-1"); err != nil {
		t.Fatal(err)
	}
	resp, _ = get(t, e.client(url.UserPassword("sbx-1", tok)), "GET", e.http.URL+"/allowed", "")
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("revoked credential: status %d, want 407", resp.StatusCode)
	}
	var sawSbx, saw407 bool
	for _, ev := range e.audit.Events() {
		if ev.SandboxID == "sbx-1" && ev.Labels["task"] == "t" {
			sawSbx = true
		}
		if ev.Status == 407 && ev.Rule == "identity" {
			saw407 = true
		}
	}
	if !sawSbx || !saw407 {
		t.Errorf("audit: attributed to sbx-1 %v, 407 recorded %v; want both", sawSbx, saw407)
	}
}

func TestAttachedListenerIsTheIdentity(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RequireAuth = true })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	detach := e.proxy.Attach(ln, identity.Identity{ID: "sbx-bound"})
	c := e.client(nil)
	c.Transport.(*http.Transport).Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: ln.Addr().String()})
	resp, _ := get(t, c, "GET", e.http.URL+"/allowed", "")
	if resp.StatusCode != 200 {
		t.Fatalf("bound listener: status %d, want 200", resp.StatusCode)
	}
	// Another sandbox's credential on this listener is refused.
	tok := mustIssue(t, e.proxy, identity.Identity{ID: "sbx-other"})
	c2 := e.client(url.UserPassword("sbx-other", tok))
	c2.Transport.(*http.Transport).Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: ln.Addr().String(), User: url.UserPassword("sbx-other", tok)})
	resp, _ = get(t, c2, "GET", e.http.URL+"/allowed", "")
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("foreign credential on a bound listener: status %d, want 407", resp.StatusCode)
	}
	detach()
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("listener still accepts after detach")
	}
	found := false
	for _, ev := range e.audit.Events() {
		found = found || ev.SandboxID == "sbx-bound" && ev.Decision == "allow"
	}
	if !found {
		t.Error("request on the bound listener was not attributed to sbx-bound")
	}
}

func TestDialGuardRefusesPrivateDestinations(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.AllowPrivate = nil })
	resp, body := get(t, e.client(nil), "GET", e.http.URL+"/allowed", "")
	if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Rule") != "dial_guard" || !strings.Contains(body, "loopback") {
		t.Errorf("loopback upstream without --allow-private: %d %q, want 403 dial_guard", resp.StatusCode, body)
	}
}

func TestProxyNeverDialsItself(t *testing.T) {
	e := newEnv(t)
	resp, _ := get(t, e.client(nil), "GET", "http://"+e.addr+"/allowed", "")
	if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Rule") != "dial_guard" {
		t.Errorf("request to the proxy's own listener: %d, want 403 dial_guard", resp.StatusCode)
	}
}

type failingDecider struct{}

func (failingDecider) Decide(context.Context, *rego.Input) (rego.Decision, error) {
	return rego.Decision{Action: rego.ActionAllow}, errors.New("policy engine down")
}

func TestPolicyErrorFailsClosed(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Decider = failingDecider{} })
	for _, u := range []string{e.http.URL + "/allowed", e.https.URL + "/allowed"} {
		resp, err := e.client(nil).Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 503 {
				t.Errorf("%s with a failing policy: status %d, want 503", u, resp.StatusCode)
			}
			continue
		}
		// CONNECT refused: Go's client reports the proxy's status as an error.
		if !strings.Contains(err.Error(), "Service Unavailable") {
			t.Errorf("%s with a failing policy: %v, want 503", u, err)
		}
	}
}

func TestReportOnlyLetsDeniedThroughAndRecordsWouldDeny(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ReportOnly = true })
	resp, _ := get(t, e.client(nil), "GET", e.http.URL+"/denied", "")
	if resp.StatusCode != 200 {
		t.Fatalf("report-only: status %d, want 200", resp.StatusCode)
	}
	ev := e.audit.Events()
	if ev[len(ev)-1].Decision != "would_deny" || ev[len(ev)-1].Rule != "test.default" {
		t.Errorf("report-only audit = %+v, want would_deny test.default", ev[len(ev)-1])
	}
}

func TestCurlThroughProxy(t *testing.T) {
	curl, err := lookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	e := newEnv(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, e.ca.CertPEM(), 0o600)
	run := func(u string) (code int, out string) {
		out, _ = runCmd(curl, "-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}", "--proxy", "http://"+e.addr, "--cacert", caFile, u)
		i := strings.LastIndexByte(out, '\n')
		code, _ = strconv.Atoi(strings.TrimSpace(out[i+1:]))
		return code, out[:max(i, 0)]
	}
	if code, out := run(e.https.URL + "/allowed/curl"); code != 200 || !strings.Contains(out, "upstream GET /allowed/curl") {
		t.Errorf("curl allowed HTTPS: %d %q", code, out)
	}
	if code, out := run(e.https.URL + "/nope"); code != 403 || !strings.Contains(out, "test.default") {
		t.Errorf("curl denied HTTPS: %d %q", code, out)
	}
	if code, _ := run(e.http.URL + "/allowed"); code != 200 {
		t.Errorf("curl allowed HTTP: %d", code)
	}
}

func TestHTTP2ToUpstreamWhereOffered(t *testing.T) {
	e := newEnv(t)
	h2 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "proto=%s", r.Proto)
	}))
	h2.EnableHTTP2 = true
	h2.StartTLS()
	defer h2.Close()
	pool := x509.NewCertPool()
	pool.AddCert(h2.Certificate())
	e.proxy.opts.UpstreamCAs = pool
	tr := newTransport(e.proxy.guard, &upstreamTLS{extra: pool}, e.proxy.opts)
	e.proxy.tr, e.proxy.gp.Tr = tr, tr
	resp, body := get(t, e.client(nil), "GET", h2.URL+"/allowed", "")
	if resp.StatusCode != 200 || body != "proto=HTTP/2.0" {
		t.Errorf("upstream offering h2: %d %q, want 200 proto=HTTP/2.0", resp.StatusCode, body)
	}
}

func TestFailingAuditLogRefusesTraffic(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	sink, err := audit.Open(audit.Options{Path: "/dev/full"})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	e := newEnv(t, func(o *Options) { o.Auditor = sink })
	c := e.client(nil)
	// No request's decision record can be written: nothing goes through, the first included.
	for _, u := range []string{e.http.URL + "/allowed/1", e.http.URL + "/allowed/2", e.https.URL + "/allowed/3"} {
		resp, err := c.Get(u)
		if err != nil {
			if !strings.Contains(err.Error(), "Service Unavailable") {
				t.Errorf("%s with a failing audit log: %v, want 503", u, err)
			}
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("X-Airlock-Rule") != "audit.unavailable" {
			t.Errorf("%s with a failing audit log: %d %q, want 503 audit.unavailable", u, resp.StatusCode, body)
		}
	}
	for {
		select {
		case r := <-e.upstream:
			t.Errorf("upstream received %s after the audit log failed", r.URL.Path)
			continue
		default:
		}
		break
	}
}

// execCreds is an in-memory ExecCredentials: one command, exec-1 with secret s3cret, of
// sandbox sbx-bound.
type execCreds struct{}

func (execCreds) ExecOf(sandboxID, user, secret string) (string, bool) {
	if sandboxID == "sbx-bound" && user == "exec-1" && secret == "s3cret" {
		return user, true
	}
	return "", false
}

// TestExecCredentialAttributesRequests: on a sandbox's own listener, a request with a
// command's exec credential is recorded with that exec id; one without is the sandbox's;
// an exec credential of another sandbox, or a wrong secret, is refused as any unknown
// credential is.
func TestExecCredentialAttributesRequests(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Execs = execCreds{} })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer e.proxy.Attach(ln, identity.Identity{ID: "sbx-bound", Labels: map[string]string{"task": "t"}})()
	via := func(user *url.Userinfo) int {
		c := e.client(nil)
		c.Transport.(*http.Transport).Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: ln.Addr().String(), User: user})
		resp, _ := get(t, c, "GET", e.http.URL+"/allowed", "")
		return resp.StatusCode
	}
	if got := via(url.UserPassword("exec-1", "s3cret")); got != 200 {
		t.Fatalf("exec credential: status %d, want 200", got)
	}
	if got := via(nil); got != 200 {
		t.Fatalf("no credential: status %d, want 200", got)
	}
	if got := via(url.UserPassword("exec-1", "wrong")); got != http.StatusProxyAuthRequired {
		t.Errorf("wrong secret: status %d, want 407", got)
	}
	var withExec, without int
	for _, ev := range e.audit.Events() {
		if ev.SandboxID != "sbx-bound" || ev.Decision != "allow" {
			continue
		}
		if ev.ExecID == "exec-1" && ev.Labels["task"] == "t" {
			withExec++
		} else if ev.ExecID == "" {
			without++
		}
	}
	if withExec == 0 || without == 0 {
		t.Errorf("audit: %d records attributed to exec-1, %d to the sandbox alone; want both", withExec, without)
	}
}
