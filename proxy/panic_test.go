package proxy

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/secrets"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// tunnelUpstream is an HTTPS upstream the proxy trusts, for requests inside an
// intercepted CONNECT, which goproxy serves in a goroutine of its own.
func tunnelUpstream(t *testing.T) (*httptest.Server, *x509.CertPool) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "upstream got it")
	}))
	t.Cleanup(up.Close)
	pool := x509.NewCertPool()
	pool.AddCert(up.Certificate())
	return up, pool
}

func postJSON(t *testing.T, c *http.Client, url, body string) (int, string) {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", body, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Red team: a body number past math/big's exponent limit, sent inside an intercepted
// tunnel to a body-aware path of a policy with a numeric limit, made OPA panic and the
// panic ended the airlock process (goproxy's interception goroutine recovers nothing).
// Now the body is refused with a reason, and the proxy serves on.
func TestHugeNumberInTunnelIsRefused(t *testing.T) {
	up, pool := tunnelUpstream(t)
	const limitPolicy = `package airlock

decision := {"action": "allow", "rule": "t.connect"} if input.phase == "connect"
else := {"action": "deny", "rule": "amount.limit"} if input.request.body.amount > 100
else := {"action": "allow", "rule": "amount.ok"}
`
	e := &env{}
	e.start(t, Options{Decider: e2etest.EngineWith(t, rego.Options{}, limitPolicy, `{"body_aware": {"127.0.0.1": ["/"]}}`),
		UpstreamCAs: pool}, nil)
	c := e.client(nil)
	c.Timeout = 10 * time.Second
	for _, amount := range []string{"1e9999999", "-1e9999999", "1e-9999999"} {
		status, body := postJSON(t, c, up.URL+"/pay", `{"amount":`+amount+`}`)
		if status != http.StatusBadRequest || !strings.Contains(body, "out of range") {
			t.Errorf("amount %s: %d %s, want 400 saying the number is out of range", amount, status, body)
		}
	}
	if status, body := postJSON(t, c, up.URL+"/pay", `{"amount":1e400}`); status != http.StatusForbidden || !strings.Contains(body, "amount.limit") {
		t.Errorf("amount 1e400: %d %s, want 403 amount.limit", status, body)
	}
	if status, body := postJSON(t, c, up.URL+"/pay", `{"amount":7}`); status != http.StatusOK {
		t.Errorf("amount 7 after the refusals: %d %s, want 200", status, body)
	}
}

// wantInternalRecord wants an audit record of path refused with 500 `internal`.
func wantInternalRecord(t *testing.T, e *env, path string) {
	t.Helper()
	for _, ev := range e.audit.Events() {
		if ev.Path == path && ev.Rule == "internal" && ev.Status == 500 {
			return
		}
	}
	t.Errorf("the refused request to %s has no audit record with rule internal", path)
}

// panicky panics deciding requests (not CONNECTs): whatever panics while a request is
// handled inside a tunnel.
type panicky struct{ rego.Decision }

func (p panicky) Decide(_ context.Context, in *rego.Input) (rego.Decision, error) {
	if in.Phase == rego.PhaseRequest && in.Request.Path == "/boom" {
		panic("boom")
	}
	return p.Decision, nil
}

// A panic while a request inside an intercepted tunnel is handled refuses that request
// (500, recorded, nothing sent) instead of ending the process.
func TestPanicInTunnelRefusesTheRequest(t *testing.T) {
	up, pool := tunnelUpstream(t)
	e := &env{}
	e.start(t, Options{Decider: panicky{rego.Decision{Action: rego.ActionAllow, Rule: "t.allow"}}, UpstreamCAs: pool}, nil)
	c := e.client(nil)
	c.Timeout = 10 * time.Second
	status, body := postJSON(t, c, up.URL+"/boom", `{}`)
	if status != http.StatusInternalServerError || !strings.Contains(body, "nothing was sent") {
		t.Errorf("request that panics: %d %s, want 500 saying nothing was sent", status, body)
	}
	if status, body := postJSON(t, c, up.URL+"/fine", `{}`); status != http.StatusOK {
		t.Errorf("next request: %d %s, want 200", status, body)
	}
	wantInternalRecord(t, e, "/boom")
}

// panickyCreds panics attaching: a panic on the way upstream, after the decision record.
type panickyCreds struct{}

func (panickyCreds) Attach(context.Context, secrets.AttachRequest) (secrets.Scrubber, error) {
	panic("attach boom")
}

// The same once the request is on its way upstream (its round trip, also in goproxy's
// goroutine inside a tunnel): refused with 500, recorded, and the proxy serves on.
func TestPanicForwardingInTunnelRefusesTheRequest(t *testing.T) {
	up, pool := tunnelUpstream(t)
	e := &env{}
	e.start(t, Options{Decider: panicky{rego.Decision{Action: rego.ActionAllow, Rule: "t.allow", Credentials: []string{"tok"}}},
		Credentials: panickyCreds{}, UpstreamCAs: pool}, nil)
	c := e.client(nil)
	c.Timeout = 10 * time.Second
	status, body := postJSON(t, c, up.URL+"/pay", `{}`)
	if status != http.StatusInternalServerError || !strings.Contains(body, "airlock failed while forwarding") {
		t.Errorf("request whose credential attach panics: %d %s, want 500", status, body)
	}
	wantInternalRecord(t, e, "/pay")
}

// panicBody panics on its first Read: a fault in the streamed response path (scrubber,
// recordingBody), which runs after upstream.RoundTrip returned, outside its recover.
type panicBody struct{}

func (panicBody) Read([]byte) (int, error) { panic("body boom") }
func (panicBody) Close() error             { return nil }

type panicScrubber struct{}

func (panicScrubber) ScrubResponse(resp *http.Response) error { resp.Body = panicBody{}; return nil }
func (panicScrubber) ScrubHead(*http.Response)                {}
func (panicScrubber) ScrubString(s string) string             { return s }
func (panicScrubber) Reader(io.ReadCloser) io.ReadCloser      { return panicBody{} }
func (panicScrubber) Redactions() int64                       { return 0 }

type panicScrubCreds struct{}

func (panicScrubCreds) Attach(context.Context, secrets.AttachRequest) (secrets.Scrubber, error) {
	return panicScrubber{}, nil
}

// Red team: a panic while the response body streams to the sandbox inside an intercepted
// tunnel (goproxy's goroutine, after RoundTrip returned) ended the whole process. Now that
// response fails and the proxy serves on. (When broken, this test crashes the test binary.)
func TestPanicStreamingResponseInTunnel(t *testing.T) {
	up, pool := tunnelUpstream(t)
	e := &env{}
	e.start(t, Options{Decider: panicky{rego.Decision{Action: rego.ActionAllow, Rule: "t.allow", Credentials: []string{"tok"}}},
		Credentials: panicScrubCreds{}, UpstreamCAs: pool}, nil)
	c := e.client(nil)
	c.Timeout = 5 * time.Second
	resp, err := c.Get(up.URL + "/x")
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err = c.Get(up.URL + "/y")
	if err != nil {
		t.Fatalf("the proxy no longer serves after a panic streaming a response: %v", err)
	}
	resp.Body.Close()
}
