package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/internal/bearer"
	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
)

const issuerToken = "issuer-token-0123456789abcdef"

type denyAll struct{}

func (denyAll) Decide(context.Context, *rego.Input) (rego.Decision, error) {
	return rego.Decision{}, nil
}

// tokenServer is the admin API of a real proxy with signed credentials on an SQLite
// revocation list; store is returned so a test can make it fail.
func tokenServer(t *testing.T, issuers *bearer.Set) (*httptest.Server, approval.Store) {
	t.Helper()
	st, err := approval.OpenStore(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{Decider: denyAll{}, CA: c, Tokens: proxy.TokenOptions{
		Keys: [][]byte{[]byte("0123456789abcdef0123456789abcdef")}, Revocations: st}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Credentials: p, Issuers: issuers}))
	t.Cleanup(srv.Close)
	return srv, st
}

func issuers() *bearer.Set {
	s := &bearer.Set{}
	s.Add("orchestrator", issuerToken)
	return s
}

func call(t *testing.T, method, u, auth, ctype, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestTokenAPIRefuses: every refusal has its status and a reason.
func TestTokenAPIRefuses(t *testing.T) {
	srv, _ := tokenServer(t, issuers())
	none, _ := tokenServer(t, nil)
	bearerOK := "Bearer " + issuerToken
	u := srv.URL + "/v1/sandboxes/sbx-1/token"
	tests := []struct {
		name, method, url, auth, ctype, body string
		status                               int
		reason                               string
	}{
		{"no token", "POST", u, "", "", "", 401, "issuer token"},
		{"basic auth", "POST", u, "Basic eDp5", "", "", 401, "Bearer"},
		{"wrong token", "POST", u, "Bearer not-the-issuer-token-at-all", "", "", 403, "proxy.issuers"},
		{"wrong token on revoke", "DELETE", u, "Bearer not-the-issuer-token-at-all", "", "", 403, "proxy.issuers"},
		{"no issuers configured", "POST", none.URL + "/v1/sandboxes/sbx-1/token", bearerOK, "", "", 403, "no credential issuers"},
		{"id with a colon", "POST", srv.URL + "/v1/sandboxes/a:b/token", bearerOK, "", "", 400, "sandbox id"},
		{"id default", "POST", srv.URL + "/v1/sandboxes/default/token", bearerOK, "", "", 400, "without a credential"},
		{"upper-case id", "POST", srv.URL + "/v1/sandboxes/SBX-1/token", bearerOK, "", "", 400, "lower-case"},
		{"upper-case id on revoke", "DELETE", srv.URL + "/v1/sandboxes/SBX-1/token", bearerOK, "", "", 400, "lower-case"},
		{"escaped id", "POST", srv.URL + "/v1/sandboxes/sbx%2D1/token", bearerOK, "", "", 400, "sandbox id"},
		{"id with '_'", "DELETE", srv.URL + "/v1/sandboxes/sbx_1/token", bearerOK, "", "", 400, "lower-case"},
		{"bad label key", "POST", u, bearerOK, "application/json", `{"labels": {"a b": "c"}}`, 400, "label key"},
		{"label not a string", "POST", u, bearerOK, "application/json", `{"labels": {"a": 1}}`, 400, "request body"},
		{"unknown field", "POST", u, bearerOK, "application/json", `{"label": {"a": "b"}}`, 400, "unknown field"},
		{"bad ttl", "POST", u, bearerOK, "application/json", `{"ttl": "soon"}`, 400, "ttl"},
		{"negative ttl", "POST", u, bearerOK, "application/json", `{"ttl": "-1h"}`, 400, "ttl"},
		{"not json", "POST", u, bearerOK, "text/plain", `labels=a`, 415, "application/json"},
		{"too large", "POST", u, bearerOK, "application/json", `{"labels": {"a": "` + strings.Repeat("x", 70<<10) + `"}}`, 413, "bytes"},
		{"proxied", "POST", u, "", "", "", 401, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := call(t, tt.method, tt.url, tt.auth, tt.ctype, tt.body)
			if tt.name == "proxied" {
				req, _ := http.NewRequest("POST", u, nil)
				req.Header.Set("Proxy-Authorization", "Basic eDp5")
				req.Header.Set("Authorization", bearerOK)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 403 {
					t.Errorf("a request carrying Proxy-Authorization: %d, want 403", resp.StatusCode)
				}
				return
			}
			if code != tt.status || !strings.Contains(body, tt.reason) {
				t.Errorf("%s %s: %d %s, want %d mentioning %q", tt.method, tt.url, code, body, tt.status, tt.reason)
			}
		})
	}
}

// TestClientIssueRevoke: the client gets a credential with its labels and lifetime,
// revokes it, cannot reissue the revoked id (409), and reports an unreachable API and a
// failing store as errors that say so.
func TestClientIssueRevoke(t *testing.T) {
	srv, st := tokenServer(t, issuers())
	ctx := context.Background()
	c := &Client{BaseURL: srv.URL, Token: issuerToken, TTL: time.Hour}
	tok, err := c.IssueToken(ctx, proxyIdentity("sbx-1", map[string]string{"task": "t"}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "v1.") {
		t.Errorf("token %q..., want a signed credential", tok[:min(len(tok), 8)])
	}
	// The answer, seen raw: expiry within the asked lifetime.
	code, body := call(t, "POST", srv.URL+"/v1/sandboxes/sbx-2/token", "Bearer "+issuerToken, "application/json", `{"ttl": "10m"}`)
	var ir IssueResponse
	if code != 201 || json.Unmarshal([]byte(body), &ir) != nil || ir.Sandbox != "sbx-2" || time.Until(ir.Expires) > 10*time.Minute {
		t.Errorf("issue with ttl 10m: %d %+v, want 201 expiring within 10m", code, ir)
	}
	if err := c.RevokeToken(ctx, "sbx-1"); err != nil {
		t.Fatal(err)
	}
	_, err = c.IssueToken(ctx, proxyIdentity("sbx-1", nil))
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 409 || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("reissue of a revoked id: %v, want a 409 saying it was revoked", err)
	}
	// Nor under another spelling: ids have one.
	for _, id := range []string{"SBX-1", "Sbx-1", "sbx-1 "} {
		if _, err = c.IssueToken(ctx, proxyIdentity(id, nil)); !errors.As(err, &ae) || ae.Status != 400 {
			t.Errorf("issue %q after revoking sbx-1: %v, want 400", id, err)
		}
	}
	bad := &Client{BaseURL: srv.URL, Token: "not-the-issuer-token-at-all"}
	if _, err := bad.IssueToken(ctx, proxyIdentity("sbx-3", nil)); !errors.As(err, &ae) || ae.Status != 403 {
		t.Errorf("wrong issuer token: %v, want 403", err)
	}
	if strings.Contains(bad.String(), "not-the-issuer") || strings.Contains(c.String(), issuerToken) {
		t.Errorf("String shows the token: %s", bad)
	}
	st.Close()
	_, err = c.IssueToken(ctx, proxyIdentity("sbx-4", nil))
	if !errors.As(err, &ae) || ae.Status != 503 || !strings.Contains(err.Error(), "unavailable") {
		t.Errorf("store down: %v, want 503 saying the revocation list is unavailable", err)
	}
	if err := c.RevokeToken(ctx, "sbx-2"); !errors.As(err, &ae) || ae.Status != 503 {
		t.Errorf("revoke with the store down: %v, want 503", err)
	}
	srv.Close()
	down := &Client{BaseURL: srv.URL, Token: issuerToken}
	if _, err := down.IssueToken(ctx, proxyIdentity("sbx-5", nil)); err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), srv.URL) {
		t.Errorf("admin API down: %v, want an error naming the address as unreachable", err)
	}
}

func proxyIdentity(id string, labels map[string]string) identity.Identity {
	return identity.Identity{ID: id, Labels: labels}
}
