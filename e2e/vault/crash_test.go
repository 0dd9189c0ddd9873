package vault_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/session"
)

// crashProxy is a real `airlock proxy` (the binary) serving sandbox sessions with
// credentials from the test's Vault.
type crashProxy struct {
	bin, dir, cfg, admin string
	cmd                  *exec.Cmd
}

func (p *crashProxy) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(p.dir, "proxy.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	p.cmd = exec.Command(p.bin, "proxy", "--config", p.cfg)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + p.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(p.dir, "proxy.log"))
			t.Fatalf("airlock not ready: %v\n%s", err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *crashProxy) stop(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	_ = p.cmd.Wait()
	p.cmd = nil
}

// TestCrashedProxyLeasesRevoked: a command in a sandbox session makes a request that gets
// a dynamic lease, a child token and a leased password; airlock is killed (SIGKILL, so it
// revokes nothing); the airlock started next on the same home and state directory, which
// cannot take a native sandbox over, revokes the lease and the token in Vault. Nothing
// secret was written to disk on the way, and the exec's result is still answered.
func TestCrashedProxyLeasesRevoked(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("native sandbox sessions need root")
	}
	v := startVault(t)
	var mu sync.Mutex
	var seen http.Header
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
		fmt.Fprint(w, "upstream ok")
	}))
	t.Cleanup(up.Close)

	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	p := &crashProxy{dir: dir, admin: e2etest.FreeAddr(t), cfg: filepath.Join(dir, "airlock.yaml"), bin: filepath.Join(dir, "airlock")}
	if out, err := exec.Command("go", "build", "-C", "../..", "-o", p.bin, "./cmd/airlock").CombinedOutput(); err != nil {
		t.Fatalf("build airlock: %v\n%s", err, out)
	}
	must(t, os.WriteFile(filepath.Join(dir, "upstream.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600))
	must(t, os.MkdirAll(filepath.Join(dir, "policy"), 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "policy", "p.rego"), []byte(`package airlock
default decision := {"action": "allow", "rule": "t.allow"}
decision := {"action": "allow", "rule": "t.creds", "credentials": ["db", "db-lease", "child"]} if input.request.path == "/creds"
`), 0o600))
	const issuer = "e2e-vault-issuer-token-0123456789abcdef"
	must(t, os.WriteFile(filepath.Join(dir, "issuer.token"), []byte(issuer+"\n"), 0o600))
	roleID, secretID := v.approle(t)
	must(t, os.WriteFile(p.cfg, []byte(fmt.Sprintf(`home: %[1]s/home
listen: [%[2]q]
admin_listen: %[3]q
policy: %[1]s/policy
allow_private: [127.0.0.0/8]
upstream_ca: %[1]s/upstream.pem
audit_log: %[1]s/audit.jsonl
log: {level: debug, format: text}
vault: {address: %[4]q, auth: {method: approle, role_id: %[5]q, secret_id_file: %[6]q}}
credentials:
  db: {vault: {path: leased/db}, inject: {basic: {username: app, password: "{{ .data.password }}"}}}
  db-lease: {vault: {path: leased/db}, inject: {header: X-Lease, value: "{{ .lease_id }}"}}
  child: {vault: {path: auth/token/create, method: POST, params: {ttl: 1h, policies: [reader]}}, inject: {header: X-Vault-Token, value: "{{ .auth.client_token }}"}}
proxy:
  issuers: [{name: e2e, token_file: %[1]s/issuer.token}]
sessions:
  state_dir: %[1]s/sessions
`, dir, e2etest.FreeAddr(t), p.admin, v.addr, roleID, secretID)), 0o600))
	p.start(t)
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "proxy.log"))
			t.Logf("proxy log:\n%s", b)
		}
	})

	ctx := context.Background()
	c := &session.Client{BaseURL: "http://" + p.admin, Token: issuer}
	info, err := c.Create(ctx, session.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	res, err := c.Exec(ctx, info.ID, session.ExecRequest{Argv: []string{"curl", "-sS", "--max-time", "20", up.URL + "/creds"}}, nil, &stdout, &stderr)
	if err != nil || res.ExitCode != 0 || stdout.String() != "upstream ok" {
		t.Fatalf("exec: %+v %v, stdout %q, stderr %q", res, err, stdout.String(), stderr.String())
	}
	mu.Lock()
	lease, token := seen.Get("X-Lease"), seen.Get("X-Vault-Token")
	mu.Unlock()
	if lease == "" || token == "" {
		t.Fatalf("upstream saw X-Lease %q, X-Vault-Token set %v: want both", lease, token != "")
	}
	if _, err := v.root.Sys().Lookup(lease); err != nil {
		t.Fatalf("lease before the crash: %v", err)
	}
	if ents := journalRecords(filepath.Join(dir, "home", "leases")); len(ents) != 3 {
		t.Errorf("lease journal before the crash: %d files, want 3", len(ents))
	}

	p.stop(syscall.SIGKILL)
	if _, err := v.root.Sys().Lookup(lease); err != nil {
		t.Fatalf("lease after the crash, before a successor: %v (the test proves nothing)", err)
	}
	p.start(t)
	if _, err := v.root.Sys().Lookup(lease); err == nil {
		t.Errorf("the lease the crashed airlock left is still in Vault")
	}
	if _, err := v.root.Auth().Token().Lookup(token); err == nil {
		t.Errorf("the child token the crashed airlock left is still valid")
	}
	if ents := journalRecords(filepath.Join(dir, "home", "leases")); len(ents) != 0 {
		t.Errorf("lease journal after the successor started: %d files, want none", len(ents))
	}
	got, err := c.Result(ctx, info.ID, res.ExecID)
	if err != nil || got.State != "done" || got.StdoutBytes != int64(len("upstream ok")) {
		t.Errorf("the exec's result after the restart: %+v %v", got, err)
	}
	if i, err := c.Get(ctx, info.ID); err != nil || i.State != session.StateEnded {
		t.Errorf("the native session after the restart: %+v %v, want ended", i, err)
	}
	// Nothing secret on disk: not in the journal, state, logs, audit or anywhere else.
	p.stop(syscall.SIGTERM)
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || path == p.bin {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, canary := range []string{dbPassword, token, v.root.Token()} {
			if bytes.Contains(b, []byte(canary)) {
				t.Errorf("%s holds a secret value", path)
			}
		}
		return nil
	})
}
