package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/admin"
	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/testkit/otlptest"
	"github.com/airlock-proxy/airlock/testkit/pgtest"
)

const testIssuerToken = "orchestrator-token-0123456789"

// replica is one proxy process's parts as `airlock proxy` wires them: proxy listener,
// admin API, and its log.
type replica struct {
	s        *stack
	proxy    string // listener address
	admin    *httptest.Server
	logs     *syncBuffer
	auditLog string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// sharedSetup writes what replicas share: policy, token key, issuer token, CA home.
func sharedSetup(t *testing.T) (home string) {
	t.Helper()
	home = t.TempDir()
	policy := filepath.Join(home, "policy")
	must(t, os.MkdirAll(policy, 0o700))
	must(t, os.WriteFile(filepath.Join(policy, "p.rego"), []byte(`package airlock
default decision := {"action": "deny", "rule": "t.deny", "reason": "no"}
decision := {"action": "allow", "rule": "t.allow"} if input.request.path == "/ok"
`), 0o600))
	must(t, os.WriteFile(filepath.Join(home, "token.key"), []byte("shared-hmac-key-0123456789abcdef0123456789\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(home, "issuer.token"), []byte(testIssuerToken+"\n"), 0o600))
	return home
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// startReplica builds a replica from a config file, as `airlock proxy --config` does.
func startReplica(t *testing.T, home, name, store string) *replica {
	t.Helper()
	auditLog := filepath.Join(home, name+"-audit.jsonl")
	cfgPath := filepath.Join(home, name+".yaml")
	must(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`home: %s
policy: %s
allow_private: [127.0.0.0/8]
require_auth: true
audit_log: %s
approvals:
  store: %q
proxy:
  token_key_file: %s
  revocation_cache: 300ms
  issuers: [{name: orchestrator, token_file: %s}]
`, home, filepath.Join(home, "policy"), auditLog, store, filepath.Join(home, "token.key"), filepath.Join(home, "issuer.token"))), 0o600))
	cfg, _, err := loadWithFlags(t, "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	s, err := build(context.Background(), cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.proxy.Serve(ln)
	r := &replica{s: s, proxy: ln.Addr().String(), admin: httptest.NewServer(s.adminHandler()), logs: logs, auditLog: auditLog}
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	if r.s == nil {
		return
	}
	r.admin.Close()
	r.s.proxy.Shutdown(context.Background())
	r.s.close(context.Background())
	r.s = nil
}

// through sends GET target through the replica's proxy listener with user's credential.
func (r *replica) through(t *testing.T, user *url.Userinfo, target string) int {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: r.proxy, User: user})}}
	resp, err := c.Get(target)
	if err != nil {
		t.Fatalf("GET %s through %s: %v", target, r.proxy, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// pgStore creates a database for the test on $AIRLOCK_TEST_POSTGRES.
func pgStore(t *testing.T) string { return pgtest.Database(t) }

// TestReplicasShareCredentials: two proxies sharing a token key and a store are two
// replicas. A credential issued through one's admin API works through the other's proxy
// listener; after a revoke through the other's admin API both answer 407 once the
// documented bound (proxy.revocation_cache) has passed; forged, other-sandbox and
// wrong-key credentials get 407. The credential's value appears in no log line, audit
// event, exported span or metric, and no error.
func TestReplicasShareCredentials(t *testing.T) {
	for _, kind := range []struct {
		name  string
		store func(t *testing.T, home string) string
	}{
		{"sqlite", func(t *testing.T, home string) string { return "sqlite:" + filepath.Join(home, "approvals.db") }},
		{"postgres", func(t *testing.T, _ string) string { return pgStore(t) }},
	} {
		t.Run(kind.name, func(t *testing.T) {
			otlp := otlptest.Start(t)

			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
			defer up.Close()
			home := sharedSetup(t)
			store := kind.store(t, home)
			a, b := startReplica(t, home, "a", store), startReplica(t, home, "b", store)
			ctx := context.Background()
			issuerA := &admin.Client{BaseURL: a.admin.URL, Token: testIssuerToken}
			issuerB := &admin.Client{BaseURL: b.admin.URL, Token: testIssuerToken}

			tok, err := issuerA.IssueToken(ctx, identity.Identity{ID: "sbx-shared", Labels: map[string]string{"task": "t"}})
			if err != nil {
				t.Fatal(err)
			}
			user := url.UserPassword("sbx-shared", tok)
			for name, r := range map[string]*replica{"issuing replica": a, "other replica": b} {
				if got := r.through(t, user, up.URL+"/ok"); got != 200 {
					t.Fatalf("%s: status %d, want 200", name, got)
				}
			}
			other, err := issuerB.IssueToken(ctx, identity.Identity{ID: "sbx-other"})
			if err != nil {
				t.Fatal(err)
			}
			for name, u := range map[string]*url.Userinfo{
				"another sandbox's credential":   url.UserPassword("sbx-shared", other),
				"credential with a changed byte": url.UserPassword("sbx-shared", tok[:len(tok)-2]+flip(tok[len(tok)-2:])),
				"no credential":                  nil,
			} {
				for rn, r := range map[string]*replica{"a": a, "b": b} {
					if got := r.through(t, u, up.URL+"/ok"); got != http.StatusProxyAuthRequired {
						t.Errorf("%s on replica %s: status %d, want 407", name, rn, got)
					}
				}
			}

			if err := issuerB.RevokeToken(ctx, "sbx-shared"); err != nil {
				t.Fatal(err)
			}
			// The bound: a look-up that started after the revocation was committed sees it,
			// and none older than revocation_cache is trusted.
			time.Sleep(300 * time.Millisecond)
			for name, r := range map[string]*replica{"revoking replica": b, "issuing replica": a} {
				if got := r.through(t, user, up.URL+"/ok"); got != http.StatusProxyAuthRequired {
					t.Errorf("%s after revoke and the bound: status %d, want 407", name, got)
				}
			}
			if got := a.through(t, url.UserPassword("sbx-other", other), up.URL+"/ok"); got != 200 {
				t.Errorf("revoking sbx-shared broke sbx-other: status %d, want 200", got)
			}
			if _, err := issuerA.IssueToken(ctx, identity.Identity{ID: "bad:id"}); err == nil {
				t.Error("issue for a malformed id: got nil error")
			} else if strings.Contains(err.Error(), tok) {
				t.Errorf("an error holds the credential: %v", err)
			}

			a.stop()
			b.stop()
			exported := otlp.Bytes()
			if len(exported) == 0 {
				t.Fatal("nothing was exported over OTLP: the span check would prove nothing")
			}
			auditA, _ := os.ReadFile(a.auditLog)
			auditB, _ := os.ReadFile(b.auditLog)
			if !bytes.Contains(auditB, []byte(`"sandbox":"sbx-shared"`)) {
				t.Fatalf("replica b's audit log lacks sbx-shared's requests: the check would prove nothing")
			}
			for name, got := range map[string][]byte{
				"replica a's log": a.logs.Bytes(), "replica b's log": b.logs.Bytes(),
				"replica a's audit log": auditA, "replica b's audit log": auditB, "OTLP export": exported,
			} {
				for _, secret := range []string{tok, other, testIssuerToken} {
					if i := bytes.Index(got, []byte(secret)); i >= 0 {
						t.Errorf("a credential reached %s: ...%q...", name, got[max(0, i-60):min(len(got), i+len(secret))])
					}
				}
			}
		})
	}
}

// flip changes a base64url string's characters to others of the same alphabet.
func flip(s string) string {
	out := []byte(s)
	for i, c := range out {
		if c == 'A' {
			out[i] = 'B'
		} else {
			out[i] = 'A'
		}
	}
	return string(out)
}

// newOKUpstream is a plain-HTTP upstream answering "ok"; its URL is returned.
func newOKUpstream(t *testing.T) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	return up.URL
}
