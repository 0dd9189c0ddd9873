//go:build e2e

// Package approval_test holds writes through the real proxy: curl sends a POST over HTTPS
// through airlock (TLS intercepted with airlock's CA), the policy says approve, an approver
// decides through the admin API, and the upstream receives exactly the held bytes (or
// nothing).
//
//	go test -tags e2e -race ./e2e/approval/
package approval_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
)

const policy = `package airlock

default decision := {"action": "deny", "rule": "e2e.default", "reason": "not allowed"}

decision := {"action": "allow", "rule": "e2e.connect"} if {
	input.phase == "connect"
	input.request.host == "127.0.0.1"
}

decision := {"action": "approve", "rule": "e2e.write", "reason": "writes need a human",
	"approval": {"timeout": "2m"}} if {
	input.phase == "request"
	input.request.host == "127.0.0.1"
	input.request.method == "POST"
}
`

const token = "e2e-approver-token-0123456789"

type env struct {
	svc      *approval.Service
	client   *approval.Client
	proxy    string
	caFile   string
	upstream *httptest.Server // HTTPS: the proxy intercepts it
	plain    *httptest.Server // plain HTTP
	got      chan []byte
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(dir, "policy"), 0o700); err != nil {
		t.Fatal(err)
	}
	write("policy/policy.rego", policy)
	eng, err := rego.New(ctx, rego.Options{Dir: filepath.Join(dir, "policy")})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := approval.New(ctx, approval.Options{Config: approval.Config{
		Store:     approval.DefaultStore(dir),
		Approvers: []approval.ApproverConfig{{Name: "oncall", TokenFile: write("oncall.token", token)}},
	}, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	admin := httptest.NewServer(svc.Handler())
	t.Cleanup(admin.Close)

	e := &env{svc: svc, client: &approval.Client{BaseURL: admin.URL, Token: token}, got: make(chan []byte, 10)}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		e.got <- b
		io.WriteString(w, "created\n")
	})
	e.upstream, e.plain = httptest.NewTLSServer(h), httptest.NewServer(h)
	t.Cleanup(e.upstream.Close)
	t.Cleanup(e.plain.Close)
	roots := x509.NewCertPool()
	roots.AddCert(e.upstream.Certificate())

	c, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	e.caFile = write("ca.pem", string(c.CertPEM()))
	p, err := proxy.New(proxy.Options{Decider: eng, CA: c, Approver: svc, UpstreamCAs: roots,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Limits:       proxy.Limits{MaxBodyBytes: svc.MaxBody()}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	e.proxy = "http://" + ln.Addr().String()
	return e
}

// curl posts body through the proxy and returns its output (status line last).
func (e *env) curl(ctx context.Context, body []byte) *exec.Cmd {
	return e.curlTo(ctx, e.upstream.URL, body)
}

func (e *env) curlTo(ctx context.Context, base string, body []byte) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "curl", "-sS", "--proxy", e.proxy, "--cacert", e.caFile,
		"-H", "Content-Type: application/json", "--data-binary", "@-",
		"-w", "\nstatus=%{http_code}", base+"/repos/acme/app/issues")
	cmd.Stdin = bytes.NewReader(body)
	return cmd
}

func (e *env) pending(t *testing.T) approval.Record {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		recs, err := e.client.List(context.Background(), approval.StatePending)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 1 {
			return recs[0]
		}
	}
	t.Fatal("no pending approval appeared")
	return approval.Record{}
}

func TestApproveSendsExactlyTheHeldBytes(t *testing.T) {
	e := newEnv(t)
	body := []byte("{\"title\":\"exact bytes\",\"n\":\"\u00e9\\u0000 \"}\n")
	var out bytes.Buffer
	cmd := e.curl(context.Background(), body)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rec := e.pending(t)
	sum := sha256.Sum256(body)
	if rec.BodySHA256 != hex.EncodeToString(sum[:]) || rec.Rule != "e2e.write" {
		t.Errorf("record: body_sha256 %s rule %s, want %x e2e.write", rec.BodySHA256, rec.Rule, sum)
	}
	if got := rec.Expires.Sub(rec.Created); got != 2*time.Minute {
		t.Errorf("rule timeout: got %s, want 2m from the decision", got)
	}
	if _, err := e.client.Approve(context.Background(), rec.ID, "ok"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("curl: %v\n%s", err, out.String())
	}
	if !strings.HasSuffix(out.String(), "status=200") {
		t.Errorf("curl output: got %q, want status=200", out.String())
	}
	select {
	case got := <-e.got:
		if !bytes.Equal(got, body) {
			t.Errorf("upstream body: got %q, want exactly %q", got, body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("upstream received nothing")
	}
}

func TestDenyAndDisconnectSendNothing(t *testing.T) {
	e := newEnv(t)
	var out bytes.Buffer
	cmd := e.curl(context.Background(), []byte(`{"deny":true}`))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rec := e.pending(t)
	if _, err := e.client.Deny(context.Background(), rec.ID, "wrong repository"); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if s := out.String(); !strings.HasSuffix(s, "status=403") || !strings.Contains(s, "wrong repository") {
		t.Errorf("denied curl: got %q, want 403 with the approver's comment", s)
	}

	for _, tc := range []struct{ name, base string }{{"plain HTTP", e.plain.URL}, {"intercepted HTTPS", e.upstream.URL}} {
		t.Run("client gone, "+tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cmd := e.curlTo(ctx, tc.base, []byte(`{"gone":true}`))
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			rec := e.pending(t)
			cancel() // the agent goes away while held
			cmd.Wait()
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				r, err := e.client.Get(context.Background(), rec.ID)
				if err != nil {
					t.Fatal(err)
				}
				if r.State == approval.StateDisconnected {
					break
				}
				if time.Now().After(deadline) {
					e.client.Deny(context.Background(), rec.ID, "test cleanup")
					t.Fatalf("record after the client went away: got %q, want disconnected", r.State)
				}
			}
			if _, err := e.client.Approve(context.Background(), rec.ID, ""); err == nil {
				t.Error("approving a disconnected request: got nil error, want 409")
			}
		})
	}
	select {
	case got := <-e.got:
		t.Errorf("upstream received %q; want nothing for denied and disconnected requests", got)
	default:
	}
}
