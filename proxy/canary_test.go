package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/secrets"
	"github.com/airlock-proxy/airlock/telemetry"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
	"github.com/airlock-proxy/airlock/testkit/otlptest"
)

const canaryPolicy = `package airlock

default decision := {"action": "deny", "rule": "canary.deny", "reason": "not allowed"}

decision := {"action": "allow", "rule": "canary.echo", "credentials": ["canary"]} if {
	input.request.path == "/echo"
}

decision := {"action": "allow", "rule": "canary.fail", "credentials": ["canary"]} if {
	input.request.path == "/fail"
}

decision := {"action": "allow", "rule": "canary.missing", "credentials": ["unconfigured"]} if {
	input.request.path == "/missing"
}
`

// TestCanarySecretReachesOnlyTheUpstream drives allowed, denied, failed and echoing requests
// with a credential whose value is a canary, through the proxy wired with the real secrets
// broker, audit sink, OTel (exporting OTLP to a real receiver) and a JSON logger, and checks
// the canary reaches the upstream and nothing else: no response the sandbox received, no
// audit line, no log line, no exported span or metric, no /metrics output.
func TestCanarySecretReachesOnlyTheUpstream(t *testing.T) {
	var b [12]byte
	rand.Read(b[:])
	canary := "sk-canary-" + hex.EncodeToString(b[:])
	t.Setenv("AIRLOCK_TEST_CANARY", canary)

	otlp := otlptest.Start(t)

	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewJSONHandler(&lockedWriter{w: &logs, mu: &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))

	// The upstream echoes what it received, headers included: an echoing endpoint.
	var upstreamSaw bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Authorization"), canary) {
			upstreamSaw = true
		}
		auth := r.Header.Get("Authorization")
		if r.URL.Query().Get("gz") != "" { // a compressed file: refused, never passed on
			w.Header().Set("Content-Type", "application/gzip")
			w.Write(e2etest.Gzip([]byte(auth)))
			return
		}
		w.Header().Set("X-Echo-Auth", auth)
		w.Header().Set("Trailer", "X-Echo-Trailer")
		fmt.Fprintf(w, "you sent %q to %s; base64 %s", auth, r.URL.Path, base64.StdEncoding.EncodeToString([]byte(auth)))
		w.Header().Set("X-Echo-Trailer", strings.ToLower(auth))
	}))
	defer up.Close()

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "p.rego"), []byte(canaryPolicy), 0o600)
	eng, err := rego.New(context.Background(), rego.Options{Dir: dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	broker, err := secrets.New(context.Background(), secrets.Options{Logger: log, Credentials: map[string]secrets.CredentialConfig{
		"canary": {Env: "AIRLOCK_TEST_CANARY", Inject: secrets.Inject{Header: "Authorization", Value: "Bearer {{ .value }}"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	auditPath := filepath.Join(dir, "audit.jsonl")
	sink, err := audit.Open(audit.Options{Path: auditPath, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ca.New()
	p, err := New(Options{Decider: eng, CA: c, Credentials: broker, Auditor: sink, Telemetry: &OTel{T: tel}, Logger: log,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go p.Serve(ln)

	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close() // /fail goes to a port nobody listens on

	var seen bytes.Buffer // everything the sandbox received
	e := &env{addr: ln.Addr().String(), ca: c}
	client := e.client(nil)
	for _, u := range []string{
		up.URL + "/echo", up.URL + "/echo?token=" + canary, up.URL + "/echo?gz=1", up.URL + "/denied", "http://" + closedAddr + "/fail", up.URL + "/missing",
	} {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer sandbox-own-"+canary[:6]) // replaced, never forwarded
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Header.Write(&seen)
		resp.Trailer.Write(&seen)
		seen.Write(body)
	}
	metricsRec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(metricsRec, httptest.NewRequest("GET", "/metrics", nil))

	p.Shutdown(context.Background())
	broker.Close(context.Background())
	sink.Close()
	tel.Shutdown(context.Background())

	if !upstreamSaw {
		t.Fatal("the upstream never received the canary credential: the test would prove nothing")
	}
	auditBytes, _ := os.ReadFile(auditPath)
	if !bytes.Contains(auditBytes, []byte("canary.echo")) || !bytes.Contains(auditBytes, []byte("canary.deny")) {
		t.Fatalf("audit log lacks the requests: %s", auditBytes)
	}
	exported := otlp.Bytes()
	if len(exported) == 0 {
		t.Fatal("nothing was exported over OTLP: the span check would prove nothing")
	}
	logMu.Lock()
	defer logMu.Unlock()
	for name, b := range map[string][]byte{
		"responses to the sandbox": seen.Bytes(), "audit log": auditBytes, "log output": logs.Bytes(),
		"OTLP export": exported, "/metrics": metricsRec.Body.Bytes(),
	} {
		if l := e2etest.Leak(b, canary); l != "" {
			t.Errorf("the canary reached the %s (%s)", name, l)
		}
	}
	if !strings.Contains(seen.String(), "application/gzip") || !strings.Contains(seen.String(), `"reflects": false`) {
		t.Errorf("the compressed echo was not refused with a reason naming reflects")
	}
	if !strings.Contains(seen.String(), secrets.Redaction) {
		t.Errorf("the echoed credential was not visibly redacted in what the sandbox received")
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
