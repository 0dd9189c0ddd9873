package vault_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/secrets"
)

const (
	openaiKey  = "sk-canary-openai-0123456789"
	dbPassword = "db-canary-password-42"
)

// credentials used across the tests.
func credentials() map[string]secrets.CredentialConfig {
	hdr := func(v string) secrets.Inject { return secrets.Inject{Header: "Authorization", Value: v} }
	return map[string]secrets.CredentialConfig{
		"openai":    {Vault: &secrets.VaultSource{Path: "kv2/data/openai"}, Inject: hdr("Bearer {{ .data.data.key }}")},
		"db":        {Vault: &secrets.VaultSource{Path: "leased/db"}, Inject: secrets.Inject{Basic: &secrets.BasicInject{Username: "app", Password: "{{ .data.password }}"}}},
		"db-lease":  {Vault: &secrets.VaultSource{Path: "leased/db"}, Inject: secrets.Inject{Header: "X-Lease", Value: "{{ .lease_id }}"}},
		"child":     {Vault: &secrets.VaultSource{Path: "auth/token/create", Method: "POST", Params: map[string]any{"ttl": "1h", "policies": []any{"reader"}}}, Inject: secrets.Inject{Header: "X-Vault-Token", Value: "{{ .auth.client_token }}"}},
		"oidc":      {Vault: &secrets.VaultSource{Path: "identity/oidc/token/internal"}, Inject: hdr("Bearer {{ .data.token }}")},
		"query":     {Vault: &secrets.VaultSource{Path: "kv2/data/openai"}, Inject: secrets.Inject{Query: "api_key", Value: "{{ .data.data.key }}"}},
		"forbidden": {Vault: &secrets.VaultSource{Path: "secret/forbidden"}, Inject: hdr("Bearer {{ .data.key }}")},
	}
}

type brokerOpts struct {
	creds map[string]secrets.CredentialConfig
	auth  secrets.VaultAuth
	mod   func(*secrets.Options)
}

// newBroker starts a broker against v, logging in with AppRole unless o.auth is set.
func newBroker(t *testing.T, v *testVault, o brokerOpts) (*secrets.Broker, *counter) {
	t.Helper()
	if o.creds == nil {
		o.creds = credentials()
	}
	if o.auth.Method == "" {
		roleID, file := v.approle(t)
		o.auth = secrets.VaultAuth{Method: "approle", RoleID: roleID, SecretIDFile: file}
	}
	c := &counter{}
	logs := &testWriter{t: t}
	// Runs after Close (cleanups run last-in first-out): no value in any log line.
	t.Cleanup(func() {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		for _, canary := range []string{openaiKey, dbPassword, "short-lived-password", "sk-not-for-airlock", v.root.Token()} {
			if strings.Contains(logs.buf.String(), canary) {
				t.Errorf("a log line contains the value %q", canary)
			}
		}
	})
	opts := secrets.Options{
		Vault:         secrets.VaultConfig{Address: v.addr, Auth: o.auth, Timeout: secrets.Duration(5 * time.Second)},
		Credentials:   o.creds,
		Logger:        slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		SweepInterval: 100 * time.Millisecond,
		WrapTransport: c.wrap,
	}
	if o.mod != nil {
		o.mod(&opts)
	}
	b, err := secrets.New(context.Background(), opts)
	if err != nil {
		t.Fatalf("secrets.New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b, c
}

// testWriter keeps the broker's log lines and shows them in the test output.
type testWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf strings.Builder
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// attach attaches names for sandbox to a fresh request and returns it.
func attach(t *testing.T, b *secrets.Broker, sandbox string, names ...string) (*http.Request, secrets.Scrubber, error) {
	t.Helper()
	out, err := http.NewRequest(http.MethodGet, "https://api.example/v1/x?q=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	out.Header.Set("Authorization", "Bearer sandbox-supplied")
	s, err := b.Attach(context.Background(), secrets.AttachRequest{SandboxID: sandbox, Names: names, Out: out})
	return out, s, err
}

func mustAttach(t *testing.T, b *secrets.Broker, sandbox string, names ...string) *http.Request {
	t.Helper()
	out, _, err := attach(t, b, sandbox, names...)
	if err != nil {
		t.Fatalf("Attach %v: %v", names, err)
	}
	return out
}

// eventually polls cond until it holds, failing after a generous deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestSources(t *testing.T) {
	v := startVault(t)
	t.Setenv("AIRLOCK_E2E_ENV_KEY", "env-canary-value")
	file := filepath.Join(t.TempDir(), "key")
	must(t, os.WriteFile(file, []byte("file-canary-value\n"), 0o600))
	creds := credentials()
	creds["env"] = secrets.CredentialConfig{Env: "AIRLOCK_E2E_ENV_KEY", Inject: secrets.Inject{Header: "X-Api-Key", Value: "{{ .value }}"}}
	creds["file"] = secrets.CredentialConfig{File: file, Inject: secrets.Inject{Header: "X-Api-Key", Value: "{{ .value }}"}}
	b, _ := newBroker(t, v, brokerOpts{creds: creds})
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("app:"+dbPassword))

	tests := []struct {
		name  string
		check func(t *testing.T, out *http.Request)
	}{
		{"openai", func(t *testing.T, out *http.Request) { wantHeader(t, out, "Authorization", "Bearer "+openaiKey) }},
		{"db", func(t *testing.T, out *http.Request) { wantHeader(t, out, "Authorization", basic) }},
		{"query", func(t *testing.T, out *http.Request) {
			if got, want := out.URL.RawQuery, "q=1&api_key="+openaiKey; got != want {
				t.Errorf("query: got %q, want %q", got, want)
			}
			wantHeader(t, out, "Authorization", "Bearer sandbox-supplied") // a query credential leaves headers alone
		}},
		{"env", func(t *testing.T, out *http.Request) { wantHeader(t, out, "X-Api-Key", "env-canary-value") }},
		{"file", func(t *testing.T, out *http.Request) { wantHeader(t, out, "X-Api-Key", "file-canary-value") }},
		{"child", func(t *testing.T, out *http.Request) {
			tok := out.Header.Get("X-Vault-Token")
			s, err := v.root.Auth().Token().Lookup(tok)
			if err != nil {
				t.Fatalf("child token lookup: %v", err)
			}
			if pol, _ := s.TokenPolicies(); !contains(pol, "reader") {
				t.Errorf("child token policies: got %v, want reader", pol)
			}
			if ttl, _ := s.TokenTTL(); ttl <= 0 || ttl > time.Hour {
				t.Errorf("child token ttl: got %v, want (0, 1h]", ttl)
			}
		}},
		{"oidc", func(t *testing.T, out *http.Request) {
			jwt := strings.TrimPrefix(out.Header.Get("Authorization"), "Bearer ")
			if strings.Count(jwt, ".") != 2 {
				t.Fatalf("oidc token: got %q, want a JWT", jwt)
			}
			s, err := v.root.Logical().Write("identity/oidc/introspect", map[string]any{"token": jwt})
			if err != nil {
				t.Fatalf("introspect: %v", err)
			}
			if s.Data["active"] != true {
				t.Errorf("introspect: got %v, want active", s.Data)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, mustAttach(t, b, "sbx-1", tt.name)) })
	}
}

func wantHeader(t *testing.T, r *http.Request, name, want string) {
	t.Helper()
	if got := strings.Join(r.Header.Values(name), ","); got != want {
		t.Errorf("%s: got %q, want %q", name, got, want)
	}
}

func contains(xs []string, x string) bool {
	for _, e := range xs {
		if e == x {
			return true
		}
	}
	return false
}

func TestPermissionDenied(t *testing.T) {
	v := startVault(t)
	b, c := newBroker(t, v, brokerOpts{})
	_, _, err := attach(t, b, "sbx-1", "forbidden")
	var e *secrets.Error
	if !errors.As(err, &e) || e.HTTPStatus() != http.StatusBadGateway {
		t.Fatalf("got %v, want a 502 *secrets.Error", err)
	}
	for _, bad := range []string{"sk-not-for-airlock", v.addr, "127.0.0.1"} {
		if strings.Contains(err.Error(), bad) {
			t.Errorf("error %q contains %q", err, bad)
		}
	}
	if !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), `"forbidden"`) {
		t.Errorf("error: got %q, want the credential and Vault's reason", err)
	}
	if got := c.get("PUT /v1/auth/approle/login"); got != 1 {
		t.Errorf("logins: got %d, want 1 (a denied path is not a lost token)", got)
	}
}

func TestOneVaultCallForConcurrentRequests(t *testing.T) {
	v := startVault(t)
	b, c := newBroker(t, v, brokerOpts{})
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out, _, err := attach(t, b, "sbx-1", "openai")
			if err == nil && out.Header.Get("Authorization") != "Bearer "+openaiKey {
				err = errors.New("wrong credential attached")
			}
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := c.get("GET /v1/kv2/data/openai"); got != 1 {
		t.Fatalf("vault reads: got %d, want 1", got)
	}
}

func TestRevokeSandbox(t *testing.T) {
	v := startVault(t)
	b, _ := newBroker(t, v, brokerOpts{})
	lease1 := mustAttach(t, b, "sbx-1", "db-lease").Header.Get("X-Lease")
	lease2 := mustAttach(t, b, "sbx-2", "db-lease").Header.Get("X-Lease")
	tok1 := mustAttach(t, b, "sbx-1", "child").Header.Get("X-Vault-Token")
	if lease1 == "" || lease1 == lease2 {
		t.Fatalf("leases: got %q and %q, want two different leases", lease1, lease2)
	}
	for _, l := range []string{lease1, lease2} {
		if _, err := v.root.Sys().Lookup(l); err != nil {
			t.Fatalf("lease lookup before revoke: %v", err)
		}
	}
	if err := b.RevokeSandbox(context.Background(), "sbx-1"); err != nil {
		t.Fatalf("RevokeSandbox: %v", err)
	}
	if _, err := v.root.Sys().Lookup(lease1); err == nil {
		t.Errorf("lease of sbx-1: still in Vault after RevokeSandbox")
	}
	if _, err := v.root.Auth().Token().Lookup(tok1); err == nil {
		t.Errorf("child token of sbx-1: still valid after RevokeSandbox")
	}
	if _, err := v.root.Sys().Lookup(lease2); err != nil {
		t.Errorf("lease of sbx-2: got %v, want it untouched", err)
	}
	if got := mustAttach(t, b, "sbx-1", "db-lease").Header.Get("X-Lease"); got == lease1 {
		t.Errorf("after revoke: got the revoked lease again")
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := v.root.Sys().Lookup(lease2); err == nil {
		t.Errorf("lease of sbx-2: still in Vault after Close")
	}
}

// TestScrubEcho sends real requests with real credentials to an upstream that echoes the
// request back, and checks that the scrubbed response holds none of the values.
func TestScrubEcho(t *testing.T) {
	v := startVault(t)
	b, _ := newBroker(t, v, brokerOpts{})
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
		_ = r.Write(w)
	}))
	t.Cleanup(echo.Close)
	basic := base64.StdEncoding.EncodeToString([]byte("app:" + dbPassword))
	for _, name := range []string{"openai", "query", "db"} {
		t.Run(name, func(t *testing.T) {
			out, err := http.NewRequest(http.MethodGet, echo.URL+"/echo?q=1", nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := b.Attach(context.Background(), secrets.AttachRequest{SandboxID: "sbx-1", Names: []string{name}, Out: out})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(out)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			s.ScrubResponse(resp)
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			var hdr strings.Builder
			_ = resp.Header.Write(&hdr)
			seen := hdr.String() + string(body)
			for _, bad := range []string{openaiKey, dbPassword, basic} {
				if strings.Contains(seen, bad) {
					t.Errorf("response contains a credential value: %q", seen)
				}
			}
			if !strings.Contains(seen, secrets.Redaction) {
				t.Errorf("response: got %q, want the echoed value redacted", seen)
			}
		})
	}
}
