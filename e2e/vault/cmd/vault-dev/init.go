package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/vault/api"
)

// airlockUID owns the files airlock reads (the airlock image's user).
const airlockUID = 65532

// policy is what airlock's AppRole may do: read the example credentials, revoke its leases
// and its own token.
const policy = `
path "secret/data/github"       { capabilities = ["read"] }
path "secret/data/internal-api" { capabilities = ["read"] }
path "sys/leases/revoke"        { capabilities = ["update"] }
path "auth/token/revoke-self"   { capabilities = ["update"] }
`

// setup prepares the dev Vault at $VAULT_ADDR (token $VAULT_TOKEN) for deploy/airlock.yaml:
// KV v2 demo secrets, the airlock policy, an AppRole with role id airlock-demo, and in out
// the files airlock reads: the AppRole secret id, an audit signing key and an approver
// token, readable only by airlock's user. What exists is kept, so a rerun changes nothing.
func setup(ctx context.Context, out string) error {
	c, err := api.NewClient(api.DefaultConfig())
	if err != nil {
		return err
	}
	if err := waitUnsealed(ctx, c); err != nil {
		return err
	}
	sys := c.Sys()
	mounts, err := sys.ListMountsWithContext(ctx)
	if err != nil {
		return fmt.Errorf("list mounts: %w", err)
	}
	if _, ok := mounts["secret/"]; !ok {
		if err := sys.MountWithContext(ctx, "secret", &api.MountInput{Type: "kv", Options: map[string]string{"version": "2"}}); err != nil {
			return fmt.Errorf("mount secret/: %w", err)
		}
	}
	// Demo values: replace with real tokens (vault kv put secret/github read_token=... write_token=...).
	for path, keys := range map[string][]string{"github": {"read_token", "write_token"}, "internal-api": {"key"}} {
		if s, err := c.KVv2("secret").Get(ctx, path); err == nil && s != nil {
			continue
		}
		data := map[string]any{}
		for _, k := range keys {
			data[k] = "demo-" + k + "-" + random(12)
		}
		if _, err := c.KVv2("secret").Put(ctx, path, data); err != nil {
			return fmt.Errorf("put secret/%s: %w", path, err)
		}
	}
	if err := sys.PutPolicyWithContext(ctx, "airlock", policy); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	auths, err := sys.ListAuthWithContext(ctx)
	if err != nil {
		return fmt.Errorf("list auth: %w", err)
	}
	if _, ok := auths["approle/"]; !ok {
		if err := sys.EnableAuthWithOptionsWithContext(ctx, "approle", &api.EnableAuthOptions{Type: "approle"}); err != nil {
			return fmt.Errorf("enable approle: %w", err)
		}
	}
	l := c.Logical()
	if _, err := l.WriteWithContext(ctx, "auth/approle/role/airlock", map[string]any{
		"token_policies": "airlock", "token_ttl": "1h", "token_max_ttl": "24h", "secret_id_ttl": 0, "secret_id_num_uses": 0,
	}); err != nil {
		return fmt.Errorf("approle role: %w", err)
	}
	if _, err := l.WriteWithContext(ctx, "auth/approle/role/airlock/role-id", map[string]any{"role_id": "airlock-demo"}); err != nil {
		return fmt.Errorf("approle role id: %w", err)
	}
	sid, err := l.WriteWithContext(ctx, "auth/approle/role/airlock/secret-id", nil)
	if err != nil {
		return fmt.Errorf("approle secret id: %w", err)
	}
	var secretID string
	if sid != nil {
		secretID, _ = sid.Data["secret_id"].(string)
	}
	if secretID == "" {
		return errors.New("approle secret id: none in the answer")
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	files := []struct {
		name, value string
		keep        bool // an existing file is kept
	}{
		{"vault-secret-id", secretID, false},
		// Ed25519 seed (hex) for signed audit checkpoints; airlock audit verify --public-key accepts it too.
		{"audit.key", random(32), true},
		{"approver.token", random(24), true},
	}
	for _, f := range files {
		if err := writeSecret(filepath.Join(out, f.name), f.value, f.keep); err != nil {
			return err
		}
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(out, airlockUID, airlockUID); err != nil {
			return err
		}
	}
	fmt.Println("vault-init: done")
	return nil
}

// writeSecret writes value to path, readable only by airlock's user (when run as root),
// keeping a non-empty regular file that is there when keep is set. It never follows a link:
// it runs as root in a volume airlock reads, so a link there must not make it write or
// chown anything else.
func writeSecret(path, value string, keep bool) error {
	st, err := os.Lstat(path)
	switch {
	case err == nil && !st.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (%s): refusing to write through it", path, st.Mode().Type())
	case err == nil && keep && st.Size() > 0:
		return nil
	case err == nil:
		if err := os.Remove(path); err != nil { // a previous one is 0400
			return err
		}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o400)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(value); err != nil {
		f.Close()
		return err
	}
	if os.Geteuid() == 0 {
		if err := f.Chown(airlockUID, airlockUID); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// waitUnsealed waits up to a minute for Vault to answer unsealed.
func waitUnsealed(ctx context.Context, c *api.Client) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		st, err := c.Sys().SealStatusWithContext(ctx)
		if err == nil && !st.Sealed {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("vault at %s did not answer unsealed within a minute: %v", c.Address(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// random is n random bytes in hex.
func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
