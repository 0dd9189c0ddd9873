package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/internal/event"
)

// TestProxyStackRecordsEveryDecision wires the proxy as `airlock proxy` does, from a config
// file, and checks a denied and an allowed request end up in a verifiable audit log and in
// the OPA decision log, and the admin API answers.
func TestProxyStackRecordsEveryDecision(t *testing.T) {
	home, upURL := t.TempDir(), stackUpstream(t)
	cfg, _, err := loadWithFlags(t, "--config", stackConfig(t, home, "  decision_log: "+filepath.Join(home, "decisions.jsonl")+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := build(context.Background(), cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.proxy.Serve(ln)
	admin := httptest.NewServer(s.adminHandler())
	defer admin.Close()
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: ln.Addr().String()})}}
	for path, want := range map[string]int{"/ok": 200, "/nope": 403} {
		resp, err := c.Get("http://" + upURL.Host + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: status %d, want %d", path, resp.StatusCode, want)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/v1/policy"} {
		resp, err := http.Get(admin.URL + p)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("admin %s: %v %v", p, resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
	s.proxy.Shutdown(context.Background())
	if err := s.close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Verify([]string{filepath.Join(home, "audit.jsonl")}, nil)
	if err != nil || rep.Events < 2 {
		t.Errorf("audit log: %d events, %v; want both decisions in an intact chain", rep.Events, err)
	}
	b, _ := os.ReadFile(filepath.Join(home, "audit.jsonl"))
	if !strings.Contains(string(b), `"rule":"t.deny"`) || !strings.Contains(string(b), `"rule":"t.allow"`) {
		t.Errorf("audit log lacks a decision: %s", b)
	}
	d, _ := os.ReadFile(filepath.Join(home, "decisions.jsonl"))
	if n := strings.Count(string(d), `"decision_id"`); n < 2 {
		t.Errorf("decision log has %d entries, want 2: %s", n, d)
	}
}

// TestProxyStackSummarisesRefusalFloods: wired from the config file, a sandbox sending far
// more refused requests than audit.refusal_burst leaves the burst one by one and the rest in
// refusals.suppressed records that add up, while every allowed request keeps its own
// decision and completion records; the log verifies.
func TestProxyStackSummarisesRefusalFloods(t *testing.T) {
	home, upURL := t.TempDir(), stackUpstream(t)
	cfg, _, err := loadWithFlags(t, "--config", stackConfig(t, home, "  refusal_burst: 4\n  refusal_interval: 1h\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.proxy.Serve(ln)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: ln.Addr().String()})}}
	const denied, allowed = 60, 20
	for i := range denied + allowed {
		path := "/nope/" + strings.Repeat("x", i)
		if i%4 == 0 && i/4 < allowed {
			path = "/ok"
		}
		resp, err := c.Get("http://" + upURL.Host + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	s.proxy.Shutdown(context.Background())
	if err := s.close(context.Background()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, "audit.jsonl")
	if _, err := audit.Verify([]string{path}, nil); err != nil {
		t.Fatalf("audit log: %v", err)
	}
	b, _ := os.ReadFile(path)
	var single, decisions, completions int
	var suppressed int64
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var ev audit.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.Kind == event.KindRefusalsSuppressed:
			suppressed += ev.Suppressed
		case audit.IsRefusal(&ev):
			single++
		case ev.Stage == audit.StageDecision && ev.Rule == "t.allow":
			decisions++
		case ev.Stage == audit.StageCompletion && ev.Rule == "t.allow":
			completions++
		}
	}
	if single != 4 || single+int(suppressed) != denied || decisions != allowed || completions != allowed {
		t.Errorf("refusals: %d one by one + %d summarised, want 4 + %d; allowed: %d decisions, %d completions, want %d each",
			single, suppressed, denied-4, decisions, completions, allowed)
	}
}

// stackUpstream is an upstream that answers "ok" to everything, until the test ends.
func stackUpstream(t *testing.T) *url.URL {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	return u
}

// stackConfig writes, in home, a policy that allows /ok and denies the rest (rule t.deny)
// and a config file using it with home as the state directory, loopback destinations
// allowed and the audit settings auditYAML (indented YAML lines); it returns the config's path.
func stackConfig(t *testing.T, home, auditYAML string) string {
	t.Helper()
	policy := filepath.Join(home, "policy")
	cfgPath := filepath.Join(home, "airlock.yaml")
	err := errors.Join(os.MkdirAll(policy, 0o700),
		os.WriteFile(filepath.Join(policy, "p.rego"), []byte(`package airlock
default decision := {"action": "deny", "rule": "t.deny", "reason": "no"}
decision := {"action": "allow", "rule": "t.allow"} if input.request.path == "/ok"
`), 0o600),
		os.WriteFile(cfgPath, []byte("home: "+home+"\npolicy: "+policy+"\nallow_private: [127.0.0.0/8]\naudit:\n"+auditYAML), 0o600))
	if err != nil {
		t.Fatal(err)
	}
	return cfgPath
}
