package proxy

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/internal/identity"
)

// clock is a settable clock shared by the replicas of a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var (
	keyA = []byte("key-a-0123456789abcdef0123456789abcdef")
	keyB = []byte("key-b-0123456789abcdef0123456789abcdef")
)

// signedEnv is a proxy with signed credentials on the revocation list st.
func signedEnv(t *testing.T, st approval.Store, clk *clock, keys ...[]byte) *env {
	t.Helper()
	return newEnv(t, func(o *Options) {
		o.RequireAuth = true
		o.Tokens = TokenOptions{Keys: keys, Revocations: st, RevocationCache: time.Second, Now: clk.now}
	})
}

func openStore(t *testing.T) approval.Store {
	t.Helper()
	st, err := approval.OpenStore(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "approvals.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func status(t *testing.T, e *env, user *url.Userinfo, target string) int {
	t.Helper()
	resp, _ := get(t, e.client(user), "GET", target, "")
	return resp.StatusCode
}

// TestSignedTokensAcrossReplicas: a credential issued by one proxy works on another with
// the same key and revocation list, labels included; revoking through one is seen by the
// other once its cache has aged (RevocationCache), and at once by the one that revoked.
func TestSignedTokensAcrossReplicas(t *testing.T) {
	st := openStore(t)
	clk := &clock{t: time.Now()}
	r1, r2 := signedEnv(t, st, clk, keyA), signedEnv(t, st, clk, keyA)
	ctx := context.Background()
	tok, exp, err := r1.proxy.IssueTokenFor(ctx, identity.Identity{ID: "sbx-a", Labels: map[string]string{"task": "t"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := exp.Sub(clk.now()); d < DefaultTokenTTL-time.Second || d > DefaultTokenTTL {
		t.Errorf("expires in %s, want the default %s", d, DefaultTokenTTL)
	}
	user := url.UserPassword("sbx-a", tok)
	for i, e := range []*env{r1, r2} {
		if got := status(t, e, user, e.https.URL+"/allowed"); got != 200 {
			t.Fatalf("replica %d: status %d, want 200", i+1, got)
		}
	}
	labelled := false
	for _, ev := range r2.audit.Events() {
		labelled = labelled || ev.SandboxID == "sbx-a" && ev.Labels["task"] == "t"
	}
	if !labelled {
		t.Error("replica 2 did not attribute the request to sbx-a with its labels")
	}

	if err := r2.proxy.RevokeToken(ctx, "sbx-a"); err != nil {
		t.Fatal(err)
	}
	if got := status(t, r2, user, r2.http.URL+"/allowed"); got != http.StatusProxyAuthRequired {
		t.Errorf("revoking replica: status %d, want 407 at once", got)
	}
	// Replica 1 looked the sandbox up when the clock read now: it may trust that answer
	// for RevocationCache, no longer.
	clk.add(time.Second - time.Millisecond)
	if got := status(t, r1, user, r1.http.URL+"/allowed"); got != 200 {
		t.Errorf("other replica inside its cache time: status %d, want 200 (the documented staleness)", got)
	}
	clk.add(time.Millisecond)
	if got := status(t, r1, user, r1.http.URL+"/allowed"); got != http.StatusProxyAuthRequired {
		t.Errorf("other replica after the cache bound: status %d, want 407", got)
	}
	// A revoked id gets no new credential: ids are not reused.
	_, err = r1.proxy.IssueToken(ctx, identity.Identity{ID: "sbx-a"})
	var te *TokenError
	if !errors.As(err, &te) || te.HTTPStatus() != http.StatusConflict || !errors.Is(err, ErrSandboxRevoked) {
		t.Errorf("issue for a revoked id: %v, want a 409 TokenError", err)
	}
}

// TestSignedTokensRefused: forged, re-signed, expired, wrong-key and other-sandbox
// credentials all get 407; a key listed second still verifies (rotation).
func TestSignedTokensRefused(t *testing.T) {
	st := openStore(t)
	clk := &clock{t: time.Now()}
	e := signedEnv(t, st, clk, keyA)
	ctx := context.Background()
	tok := mustIssue(t, e.proxy, identity.Identity{ID: "sbx-a", Labels: map[string]string{"tenant": "acme"}})
	short, _, err := e.proxy.IssueTokenFor(ctx, identity.Identity{ID: "sbx-short"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	other := signedEnv(t, st, clk, keyB)
	foreign := mustIssue(t, other.proxy, identity.Identity{ID: "sbx-a"})

	parts := strings.Split(tok, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forgedPayload := strings.Replace(string(payload), `"acme"`, `"admin"`, 1)
	forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(forgedPayload)) + "." + parts[2]

	tests := []struct {
		name string
		user *url.Userinfo
	}{
		{"labels changed, signature kept", url.UserPassword("sbx-a", forged)},
		{"signature of another key", url.UserPassword("sbx-a", foreign)},
		{"another sandbox's credential", url.UserPassword("sbx-b", tok)},
		{"truncated signature", url.UserPassword("sbx-a", tok[:len(tok)-4])},
		{"no signature", url.UserPassword("sbx-a", parts[0]+"."+parts[1])},
		{"garbage", url.UserPassword("sbx-a", "v1.!!.!!")},
		{"empty", url.UserPassword("sbx-a", "")},
	}
	for _, tt := range tests {
		if got := status(t, e, tt.user, e.http.URL+"/allowed"); got != http.StatusProxyAuthRequired {
			t.Errorf("%s: status %d, want 407", tt.name, got)
		}
	}
	if got := status(t, e, url.UserPassword("sbx-short", short), e.http.URL+"/allowed"); got != 200 {
		t.Fatalf("short-lived credential before expiry: status %d, want 200", got)
	}
	clk.add(time.Minute)
	if got := status(t, e, url.UserPassword("sbx-short", short), e.http.URL+"/allowed"); got != http.StatusProxyAuthRequired {
		t.Errorf("expired credential: status %d, want 407", got)
	}
	rotated := signedEnv(t, st, clk, keyB, keyA)
	if got := status(t, rotated, url.UserPassword("sbx-a", tok), rotated.http.URL+"/allowed"); got != 200 {
		t.Errorf("credential signed with the previous key on a replica that still lists it: status %d, want 200", got)
	}
}

// TestSignedTokensFailClosed: with the revocation list unreachable, a valid credential is
// refused with 503 (never let through unchecked), and issuing and revoking fail with 503.
func TestSignedTokensFailClosed(t *testing.T) {
	st := openStore(t)
	clk := &clock{t: time.Now()}
	e := signedEnv(t, st, clk, keyA)
	tok := mustIssue(t, e.proxy, identity.Identity{ID: "sbx-a"})
	if got := status(t, e, url.UserPassword("sbx-a", tok), e.http.URL+"/allowed"); got != 200 {
		t.Fatalf("status %d, want 200", got)
	}
	st.Close()
	clk.add(time.Second)
	if got := status(t, e, url.UserPassword("sbx-a", tok), e.http.URL+"/allowed"); got != http.StatusServiceUnavailable {
		t.Errorf("revocation list down: status %d, want 503", got)
	}
	var te *TokenError
	if _, err := e.proxy.IssueToken(context.Background(), identity.Identity{ID: "sbx-b"}); !errors.As(err, &te) || te.HTTPStatus() != 503 {
		t.Errorf("issue with the list down: %v, want a 503 TokenError", err)
	}
	if err := e.proxy.RevokeToken(context.Background(), "sbx-a"); !errors.As(err, &te) || te.HTTPStatus() != 503 {
		t.Errorf("revoke with the list down: %v, want a 503 TokenError", err)
	}
}

func TestTokenOptionsValidated(t *testing.T) {
	st := openStore(t)
	for name, o := range map[string]TokenOptions{
		"short key":      {Keys: [][]byte{[]byte("too-short")}, Revocations: st},
		"no revocations": {Keys: [][]byte{keyA}},
	} {
		p, err := New(Options{Decider: failingDecider{}, CA: newEnv(t).ca, Tokens: o})
		if err == nil {
			p.Shutdown(context.Background())
			t.Errorf("%s: New accepted it", name)
		}
	}
}

func TestCheckIdentity(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		id   identity.Identity
		want string // "" means accepted
	}{
		{identity.Identity{ID: "sbx-7f3a", Labels: map[string]string{"task": "triage", "app.kubernetes.io/name": "x"}}, ""},
		{identity.Identity{ID: ""}, "sandbox id"},
		{identity.Identity{ID: "a:b"}, "sandbox id"},
		{identity.Identity{ID: "-x"}, "sandbox id"},
		{identity.Identity{ID: "default"}, "without a credential"},
		{identity.Identity{ID: "SBX-A"}, "lower-case"},
		{identity.Identity{ID: "sbx_a"}, "lower-case"},
		{identity.Identity{ID: "sbx.a"}, "lower-case"},
		{identity.Identity{ID: strings.Repeat("a", 64)}, "at most 63"},
		{identity.Identity{ID: strings.Repeat("a", 63)}, ""},
		{identity.Identity{ID: "sbx", Labels: map[string]string{"": "v"}}, "label key"},
		{identity.Identity{ID: "sbx", Labels: map[string]string{"a b": "v"}}, "label key"},
		{identity.Identity{ID: "sbx", Labels: map[string]string{"k": long}}, "printable"},
		{identity.Identity{ID: "sbx", Labels: map[string]string{"k": "a\nb"}}, "printable"},
	}
	for _, tt := range tests {
		err := CheckIdentity(tt.id)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckIdentity(%+v) = %v, want nil", tt.id, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("CheckIdentity(%+v) = %v, want an error mentioning %q", tt.id, err, tt.want)
		}
	}
}

// TestSandboxIDHasOneSpelling: after "sbx-a" is revoked, no other spelling of it gets a
// credential, and issue and revoke refuse every id the one rule refuses, in both modes.
func TestSandboxIDHasOneSpelling(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Now()}
	for name, e := range map[string]*env{"signed": signedEnv(t, openStore(t), clk, keyA), "in memory": newEnv(t)} {
		t.Run(name, func(t *testing.T) {
			mustIssue(t, e.proxy, identity.Identity{ID: "sbx-a"})
			if err := e.proxy.RevokeToken(ctx, "sbx-a"); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"SBX-A", "Sbx-a", "sbx-A", "sbx_a", "sbx.a", "sbx-a ", " sbx-a", "sbx-a\n", "\u0455bx-a", "sbx\u2010a", "-sbx-a", ""} {
				_, _, err := e.proxy.IssueTokenFor(ctx, identity.Identity{ID: id}, 0)
				var te *TokenError
				if !errors.As(err, &te) || te.HTTPStatus() != http.StatusBadRequest || !errors.Is(err, identity.ErrInvalidID) {
					t.Errorf("issue %q: %v, want a 400 TokenError wrapping identity.ErrInvalidID", id, err)
				}
				err = e.proxy.RevokeToken(ctx, id)
				if !errors.As(err, &te) || te.HTTPStatus() != http.StatusBadRequest || !errors.Is(err, identity.ErrInvalidID) {
					t.Errorf("revoke %q: %v, want a 400 TokenError wrapping identity.ErrInvalidID", id, err)
				}
			}
		})
	}
}
