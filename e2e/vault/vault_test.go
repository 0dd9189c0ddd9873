package vault_test

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/vault/api"
	"github.com/hashicorp/vault/builtin/credential/approle"
	vaulthttp "github.com/hashicorp/vault/http"
	"github.com/hashicorp/vault/sdk/logical"
	"github.com/hashicorp/vault/vault"
)

// testVault is a real in-process Vault core served over HTTP on a loopback port.
type testVault struct {
	addr string
	root *api.Client
	ln   *trackingListener
}

// startVault starts Vault with KV v2 at kv2/, leased-passthrough at leased/, AppRole at
// approle/ and an identity OIDC role "internal"; root is a client with the root token.
func startVault(t *testing.T) *testVault {
	t.Helper()
	core, _, rootToken := vault.TestCoreUnsealedWithConfig(t, &vault.CoreConfig{
		LogicalBackends:    map[string]logical.Factory{"leased-passthrough": vault.LeasedPassthroughBackendFactory},
		CredentialBackends: map[string]logical.Factory{"approle": approle.Factory},
	})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &trackingListener{Listener: raw}
	addr := "http://" + raw.Addr().String()
	vaulthttp.TestServerWithListener(t, ln, addr, core)
	t.Cleanup(ln.stop)

	conf := api.DefaultConfig()
	conf.Address = addr
	conf.MaxRetries = 0
	root, err := api.NewClient(conf)
	if err != nil {
		t.Fatal(err)
	}
	root.SetToken(rootToken)
	v := &testVault{addr: addr, root: root, ln: ln}
	v.setup(t)
	return v
}

func (v *testVault) setup(t *testing.T) {
	t.Helper()
	sys := v.root.Sys()
	must(t, sys.Mount("kv2", &api.MountInput{Type: "kv", Options: map[string]string{"version": "2"}}))
	must(t, sys.Mount("leased", &api.MountInput{Type: "leased-passthrough"}))
	must(t, sys.EnableAuthWithOptions("approle", &api.EnableAuthOptions{Type: "approle"}))
	must(t, sys.PutPolicy("airlock", `
path "kv2/data/*"                  { capabilities = ["read"] }
path "leased/*"                    { capabilities = ["read"] }
path "auth/token/create"           { capabilities = ["update", "sudo"] }
path "auth/token/renew"            { capabilities = ["update"] }
path "auth/token/revoke"           { capabilities = ["update"] }
path "auth/token/revoke-accessor"  { capabilities = ["update"] }
path "sys/leases/renew"            { capabilities = ["update"] }
path "sys/leases/revoke"           { capabilities = ["update"] }
path "identity/oidc/token/internal" { capabilities = ["read"] }
`))
	must(t, sys.PutPolicy("reader", `path "kv2/data/openai" { capabilities = ["read"] }`))
	v.write(t, "kv2/data/openai", map[string]any{"data": map[string]any{"key": "sk-canary-openai-0123456789"}})
	v.write(t, "secret/forbidden", map[string]any{"key": "sk-not-for-airlock"})
	v.write(t, "leased/db", map[string]any{"password": "db-canary-password-42", "ttl": "1h"})
	v.write(t, "auth/approle/role/airlock", map[string]any{"token_policies": []string{"airlock"}, "token_ttl": "1h"})
	v.write(t, "identity/oidc/key/airlock", map[string]any{"allowed_client_ids": "*", "verification_ttl": "1h", "rotation_period": "1h"})
	v.write(t, "identity/oidc/role/internal", map[string]any{"key": "airlock", "ttl": "5m"})
}

func (v *testVault) write(t *testing.T, path string, data map[string]any) *api.Secret {
	t.Helper()
	s, err := v.root.Logical().Write(path, data)
	if err != nil {
		t.Fatalf("vault write %s: %v", path, err)
	}
	return s
}

// approle returns the role id and a file holding a fresh secret id for role "airlock".
func (v *testVault) approle(t *testing.T) (roleID, secretIDFile string) {
	t.Helper()
	r, err := v.root.Logical().Read("auth/approle/role/airlock/role-id")
	if err != nil {
		t.Fatal(err)
	}
	s := v.write(t, "auth/approle/role/airlock/secret-id", nil)
	file := filepath.Join(t.TempDir(), "secret-id")
	if err := os.WriteFile(file, []byte(s.Data["secret_id"].(string)), 0o600); err != nil {
		t.Fatal(err)
	}
	return r.Data["role_id"].(string), file
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// trackingListener lets a test stop the Vault server completely: the listener and every
// connection accepted from it.
type trackingListener struct {
	net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns = append(l.conns, c)
	return c, nil
}

func (l *trackingListener) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.Listener.Close()
	for _, c := range l.conns {
		c.Close()
	}
}

// counter counts the proxy's HTTP calls to Vault by "METHOD /path", wrapping the real
// client's real transport.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[r.Method+" "+r.URL.Path]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

func (c *counter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
