package audit

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const canary = "CANARY-7d1f0e6b2a"

// Events and decision-log entries built from requests that carry a secret in headers,
// query and user info never contain it.
func TestNoCanaryInAuditOrDecisionLog(t *testing.T) {
	dir := t.TempDir()
	keyFile, _ := testKey(t)
	var logs bytes.Buffer
	s := openSink(t, Options{Path: filepath.Join(dir, "audit.jsonl"), SigningKeyFile: keyFile, CheckpointEvents: 2,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	dl, err := OpenDecisionLog(filepath.Join(dir, "decisions.jsonl"), map[string]string{"id": "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dl.Close() })

	targets := []string{
		"https://api.example.com/v1/items?token=" + canary + "&state=open",
		"https://api.example.com/v1/items?" + canary,
		"https://user:" + canary + "@api.example.com/",
		"http://api.example.com/x?a=1&key=%43ANARY-7d1f0e6b2a",
	}
	for _, target := range targets {
		r := httptest.NewRequest("POST", target, strings.NewReader("body="+canary))
		r.Header.Set("Authorization", "Bearer "+canary)
		r.Header.Set("X-Api-Key", canary)
		r.Header.Set("Cookie", "session="+canary)
		ev := NewRequestEvent(r)
		ev.SandboxID, ev.Decision, ev.Rule, ev.Creds = "sbx-1", "allow", "example", []string{"github-write"}
		ev.ErrorClass = "upstream: Authorization " + canary
		if err := s.Record(context.Background(), &ev); err != nil {
			t.Fatal(err)
		}
		input := map[string]any{"version": 1, "phase": "request", "sandbox": map[string]any{"id": "sbx-1"},
			"request": map[string]any{"method": r.Method, "host": ev.Host, "path": ev.Path,
				"query":   r.URL.Query(),
				"headers": map[string][]string{"x-api-key": {canary}, "content-type": {"text/plain"}}}}
		err := dl.RecordDecision(context.Background(), Decision{Input: input,
			Result: map[string]any{"action": "allow", "rule": "example"}, Bundles: map[string]string{"airlock": "rev1"}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dl.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"audit.jsonl", "decisions.jsonl"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			t.Fatalf("%s is empty", f)
		}
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("%s contains the canary:\n%s", f, b)
		}
	}
	if bytes.Contains(logs.Bytes(), []byte(canary)) {
		t.Errorf("sink log contains the canary:\n%s", logs.String())
	}
	dlb, _ := os.ReadFile(filepath.Join(dir, "decisions.jsonl"))
	for _, want := range []string{`"decision_id":"`, `"path":"airlock/decision"`, `"bundles":{"airlock":{"revision":"rev1"}}`,
		`"x-api-key":["[redacted]"]`, `"masked":["/input/request/headers","/input/request/query"]`, `"labels":{"id":"test"}`} {
		if !bytes.Contains(dlb, []byte(want)) {
			t.Errorf("decision log lacks %s:\n%s", want, dlb)
		}
	}
}
