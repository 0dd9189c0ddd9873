package rego

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
)

// makeBundle builds an OPA bundle tarball with OPA's own writer: one policy whose decision
// names rule, data, and optionally a signature made with key.
func makeBundle(t testing.TB, revision, rule string, key *rsa.PrivateKey) []byte {
	t.Helper()
	src := "package airlock\n\ndecision := {\"action\": \"allow\", \"rule\": \"" + rule + "\", \"reason\": data.note}\n"
	b := bundle.Bundle{
		Manifest: bundle.Manifest{Revision: revision, Roots: &[]string{"airlock", "note"}},
		Data:     map[string]any{"note": "from bundle " + revision},
		Modules: []bundle.ModuleFile{{
			URL: "/policy/p.rego", Path: "/policy/p.rego", Raw: []byte(src),
			Parsed: ast.MustParseModule(src),
		}},
	}
	if key != nil {
		pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
		if err := b.GenerateSignature(bundle.NewSigningConfig(string(pemKey), "RS256", ""), "airlock-test", false); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBundleFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.tar.gz")
	if err := os.WriteFile(path, makeBundle(t, "rev-1", "b.one", nil), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := New(context.Background(), Options{Bundle: path, Poll: 10 * time.Millisecond, Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.Decide(context.Background(), requestInput("GET", "a.example", "/"))
	if err != nil || d.Rule != "b.one" || d.Reason != "from bundle rev-1" {
		t.Fatalf("got %+v, %v; want the bundle's decision and data", d, err)
	}
	if st := e.Status(); st.Revision != "rev-1" || st.Source != path {
		t.Errorf("status %+v, want revision rev-1 from %s", st, path)
	}

	// A corrupt bundle is refused, the good one stays.
	if err := os.WriteFile(path, []byte("not a tarball"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(context.Background()); err == nil || e.Revision() != "rev-1" {
		t.Errorf("corrupt bundle: Reload error %v, revision %s; want an error and rev-1", err, e.Revision())
	}

	// Watch polls the file and picks up the next revision.
	if err := os.WriteFile(path, makeBundle(t, "rev-2", "b.two", nil), 0o644); err != nil {
		t.Fatal(err)
	}
	waitForRevision(t, e, "rev-2")
}

// waitForRevision runs Watch until the engine has loaded want (bounded).
func waitForRevision(t *testing.T, e *Engine, want string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Watch(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for e.Revision() != want {
		if time.Now().After(deadline) {
			t.Fatalf("revision %s, want %s within 20s (last error %q)", e.Revision(), want, e.Status().LastError)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBundleURLPolling(t *testing.T) {
	var mu sync.Mutex
	current, etag := makeBundle(t, "rev-1", "b.one", nil), `"1"`
	fetches, notModified := 0, 0
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fetches++
		if r.Header.Get("If-None-Match") == etag {
			notModified++
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
		_, _ = w.Write(current)
	}))
	t.Cleanup(srv.Close)

	e, err := New(context.Background(), Options{Bundle: srv.URL + "/bundle.tar.gz", HTTPClient: srv.Client(), Poll: 10 * time.Millisecond, Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if got := decideRule(t, e); got != "b.one" {
		t.Fatalf("decision by %q, want b.one", got)
	}
	// Unchanged bundle: the server answers 304 and nothing is reloaded.
	if err := e.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if notModified != 1 {
		t.Errorf("%d not-modified answers, want 1 (ETag not sent?)", notModified)
	}
	current, etag = makeBundle(t, "rev-2", "b.two", nil), `"2"`
	mu.Unlock()

	waitForRevision(t, e, "rev-2")
	if got := decideRule(t, e); got != "b.two" {
		t.Errorf("decision by %q after polling, want b.two", got)
	}
}

func TestBundleURLErrors(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	_, err := New(context.Background(), Options{Bundle: srv.URL + "/missing.tar.gz", HTTPClient: srv.Client()})
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("New error %v, want one naming the 404", err)
	}
}

func TestSignedBundle(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	verify := &BundleVerification{
		KeyID:     "airlock-test",
		PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})),
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		signer *rsa.PrivateKey
		ok     bool
	}{{"signed with the key", key, true}, {"unsigned", nil, false}, {"signed with another key", other, false}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "policy.tar.gz")
			if err := os.WriteFile(path, makeBundle(t, "rev-s", "b.signed", tc.signer), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := New(context.Background(), Options{Bundle: path, BundleVerification: verify})
			if (err == nil) != tc.ok {
				t.Errorf("New error %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
