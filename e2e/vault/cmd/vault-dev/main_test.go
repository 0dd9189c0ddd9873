package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
)

// TestDevServerAndInit: the compose stack's Vault serves with the dev root token, init
// prepares it for deploy/airlock.yaml, and what init wrote works: the AppRole logs in with
// the role id airlock.yaml names and the secret id file, and its token reads the example
// credentials and nothing else. A second init keeps the secrets and keys it made.
func TestDevServerAndInit(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server(ctx, addr, "dev-root") }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	t.Setenv("VAULT_ADDR", "http://"+addr)
	t.Setenv("VAULT_TOKEN", "dev-root")
	out := filepath.Join(t.TempDir(), "secrets")
	ictx, icancel := context.WithTimeout(ctx, 2*time.Minute)
	defer icancel()
	if err := setup(ictx, out); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	key, approver := read("audit.key"), read("approver.token")
	if len(key) != 64 || len(approver) != 48 {
		t.Fatalf("audit.key %d hex chars, approver.token %d, want 64 and 48", len(key), len(approver))
	}
	for _, f := range []string{"vault-secret-id", "audit.key", "approver.token"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Mode().Perm() != 0o400 {
			t.Errorf("%s: %v %v, want mode 0400", f, st.Mode(), err)
		}
	}

	cfg := api.DefaultConfig()
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.ClearToken()
	login, err := c.Logical().Write("auth/approle/login", map[string]any{"role_id": "airlock-demo", "secret_id": read("vault-secret-id")})
	if err != nil || login == nil || login.Auth == nil {
		t.Fatalf("approle login with what init wrote: %v", err)
	}
	c.SetToken(login.Auth.ClientToken)
	gh, err := c.KVv2("secret").Get(ctx, "github")
	if err != nil || !strings.HasPrefix(gh.Data["read_token"].(string), "demo-read_token-") {
		t.Fatalf("airlock's token reads secret/github: %v %v", gh, err)
	}
	if _, err := c.Logical().Write("secret/data/github", map[string]any{"data": map[string]any{"x": "y"}}); err == nil {
		t.Error("airlock's token may write secret/github; its policy grants read only")
	}

	// A second run keeps the demo secrets and the keys, and issues a new secret id.
	if err := setup(ictx, out); err != nil {
		t.Fatal(err)
	}
	c.SetToken("dev-root")
	gh2, err := c.KVv2("secret").Get(ctx, "github")
	if err != nil || gh2.Data["read_token"] != gh.Data["read_token"] {
		t.Errorf("second init replaced secret/github: %v", err)
	}
	if read("audit.key") != key || read("approver.token") != approver {
		t.Error("second init replaced the audit key or the approver token")
	}
}

// TestWriteSecretRefusesLinks: vault-init runs as root in a volume airlock reads; a link
// planted where one of its files goes is refused, not written or chowned through.
func TestWriteSecretRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("host file"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, keep := range []bool{false, true} {
		link := filepath.Join(dir, "audit.key")
		os.Remove(link)
		if err := os.Symlink(victim, link); err != nil {
			t.Fatal(err)
		}
		if err := writeSecret(link, "secret", keep); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("keep=%v: %v, want a refusal", keep, err)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "host file" {
		t.Errorf("the link's target was written: %q", b)
	}
	if st, _ := os.Stat(victim); st.Mode().Perm() != 0o644 {
		t.Errorf("the link's target's mode changed: %v", st.Mode())
	}
}
