package vault_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/secrets"
	"github.com/hashicorp/vault/api"
)

func TestExpiryRefetch(t *testing.T) {
	v := startVault(t)
	creds := map[string]secrets.CredentialConfig{
		// A non-renewable child token: it must be replaced by a new one before it ends.
		"short-token": {Vault: &secrets.VaultSource{Path: "auth/token/create", Method: "POST", Params: map[string]any{"ttl": "3s", "renewable": false, "policies": []any{"reader"}}},
			Inject: secrets.Inject{Header: "X-Vault-Token", Value: "{{ .auth.client_token }}"}},
		// A static KV value: max_ttl bounds how long it is cached.
		"openai": {Vault: &secrets.VaultSource{Path: "kv2/data/openai"}, Inject: secrets.Inject{Header: "Authorization", Value: "Bearer {{ .data.data.key }}"}, MaxTTL: secrets.Duration(2 * time.Second)},
	}
	b, c := newBroker(t, v, brokerOpts{creds: creds})
	first := mustAttach(t, b, "sbx-1", "short-token").Header.Get("X-Vault-Token")
	var next string
	eventually(t, "a new child token", func() bool {
		next = mustAttach(t, b, "sbx-1", "short-token").Header.Get("X-Vault-Token")
		return next != first
	})
	if _, err := v.root.Auth().Token().Lookup(next); err != nil {
		t.Errorf("new token: got %v, want valid", err)
	}
	mustAttach(t, b, "sbx-1", "openai")
	eventually(t, "a second KV read", func() bool {
		wantHeader(t, mustAttach(t, b, "sbx-1", "openai"), "Authorization", "Bearer "+openaiKey)
		return c.get("GET /v1/kv2/data/openai") >= 2
	})
}

func TestRenewal(t *testing.T) {
	v := startVault(t)
	v.write(t, "leased/short", map[string]any{"password": "short-lived-password", "ttl": "3s"})
	creds := map[string]secrets.CredentialConfig{
		"short": {Vault: &secrets.VaultSource{Path: "leased/short"}, Inject: secrets.Inject{Header: "X-Lease", Value: "{{ .lease_id }}"}},
	}
	b, c := newBroker(t, v, brokerOpts{creds: creds})
	lease := mustAttach(t, b, "sbx-1", "short").Header.Get("X-Lease")
	eventually(t, "two lease renewals", func() bool {
		if got := mustAttach(t, b, "sbx-1", "short").Header.Get("X-Lease"); got != lease {
			t.Fatalf("lease: got %q, want the renewed %q", got, lease)
		}
		return c.get("PUT /v1/sys/leases/renew") >= 2
	})
	if got := c.get("GET /v1/leased/short"); got != 1 {
		t.Errorf("reads: got %d, want 1 (renewed, not re-fetched)", got)
	}
	s, err := v.root.Sys().Lookup(lease)
	if err != nil {
		t.Fatalf("lease lookup: %v", err)
	}
	if s.Data["last_renewal"] == nil {
		t.Errorf("lease: got %v, want a last_renewal", s.Data)
	}
}

func TestVaultStopped(t *testing.T) {
	t.Setenv("VAULT_MAX_RETRIES", "0")
	v := startVault(t)
	creds := map[string]secrets.CredentialConfig{
		"openai": {Vault: &secrets.VaultSource{Path: "kv2/data/openai"}, Inject: secrets.Inject{Header: "Authorization", Value: "Bearer {{ .data.data.key }}"}, MaxTTL: secrets.Duration(3 * time.Second)},
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	must(t, os.WriteFile(tokenFile, []byte(v.root.Token()), 0o600))
	b, _ := newBroker(t, v, brokerOpts{creds: creds, auth: secrets.VaultAuth{Method: "token", TokenFile: tokenFile}})
	mustAttach(t, b, "sbx-1", "openai")
	v.ln.stop()
	wantHeader(t, mustAttach(t, b, "sbx-1", "openai"), "Authorization", "Bearer "+openaiKey) // cached
	var err error
	eventually(t, "the cached credential to expire", func() bool {
		var out *http.Request
		out, _, err = attach(t, b, "sbx-1", "openai")
		if err == nil {
			wantHeader(t, out, "Authorization", "Bearer "+openaiKey)
		}
		return err != nil
	})
	var e *secrets.Error
	if !errors.As(err, &e) || e.HTTPStatus() != http.StatusServiceUnavailable {
		t.Fatalf("got %v, want a 503 *secrets.Error", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"openai"`) || strings.Contains(msg, openaiKey) || strings.Contains(msg, "127.0.0.1") {
		t.Errorf("error: got %q, want the credential named and no value or address", msg)
	}
	if _, _, err := attach(t, b, "sbx-2", "openai"); err == nil {
		t.Errorf("uncached sandbox with Vault down: got a credential, want an error")
	}
}

func TestReauthAppRole(t *testing.T) {
	v := startVault(t)
	b, c := newBroker(t, v, brokerOpts{})
	mustAttach(t, b, "sbx-1", "openai")
	// Revoke every token AppRole issued: the proxy's own token is gone.
	if err := v.root.Sys().RevokePrefix("auth/approle/login"); err != nil {
		t.Fatalf("revoke proxy token: %v", err)
	}
	wantHeader(t, mustAttach(t, b, "sbx-2", "openai"), "Authorization", "Bearer "+openaiKey)
	if got := c.get("PUT /v1/auth/approle/login"); got != 2 {
		t.Errorf("logins: got %d, want 2", got)
	}
}

func TestReauthTokenFile(t *testing.T) {
	v := startVault(t)
	newToken := func() string {
		s, err := v.root.Auth().Token().Create(&api.TokenCreateRequest{Policies: []string{"airlock"}, TTL: "1h"})
		if err != nil {
			t.Fatal(err)
		}
		return s.Auth.ClientToken
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	old := newToken()
	must(t, os.WriteFile(tokenFile, []byte(old+"\n"), 0o600))
	b, _ := newBroker(t, v, brokerOpts{auth: secrets.VaultAuth{Method: "token", TokenFile: tokenFile}})
	mustAttach(t, b, "sbx-1", "openai")
	must(t, v.root.Auth().Token().RevokeTree(old))
	must(t, os.WriteFile(tokenFile, []byte(newToken()+"\n"), 0o600))
	wantHeader(t, mustAttach(t, b, "sbx-2", "openai"), "Authorization", "Bearer "+openaiKey)
	if err := b.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}
