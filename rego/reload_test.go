package rego

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

const allowPolicy = "package airlock\n\ndecision := {\"action\": \"allow\", \"rule\": \"t.allow\", \"reason\": \"ok\"}\n"

const denyPolicy = "package airlock\n\ndecision := {\"action\": \"deny\", \"rule\": \"t.deny\", \"reason\": \"no\"}\n"

func decideRule(t *testing.T, e *Engine) string {
	t.Helper()
	d, err := e.Decide(context.Background(), requestInput("GET", "a.example", "/"))
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return d.Rule
}

func TestReloadKeepsLastGoodPolicy(t *testing.T) {
	var logs bytes.Buffer
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": allowPolicy})
	e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	good := e.Status()
	if good.Revision == "" || !strings.HasPrefix(good.Revision, "sha256:") || good.Source != dir || good.LastError != "" {
		t.Fatalf("status after load: %+v", good)
	}

	// Unchanged: nothing happens.
	if err := e.Reload(context.Background()); err != nil || e.Revision() != good.Revision {
		t.Fatalf("reload of unchanged policy: %v, revision %s", err, e.Revision())
	}

	steps := []struct {
		name     string
		files    map[string]string
		wantErr  string
		wantRule string
	}{
		{"broken", map[string]string{"p.rego": "package airlock\n\ndecision := {\"action\": }\n"}, "p.rego:3", "t.allow"},
		{"tests fail", map[string]string{
			"p.rego":      denyPolicy,
			"p_test.rego": "package airlock_test\n\nimport data.airlock\n\ntest_allow if airlock.decision.action == \"allow\"\n",
		}, "test_allow: FAIL", "t.allow"},
		{"fixed", map[string]string{
			"p.rego":      denyPolicy,
			"p_test.rego": "package airlock_test\n\nimport data.airlock\n\ntest_deny if airlock.decision.action == \"deny\"\n",
		}, "", "t.deny"},
	}
	for _, s := range steps {
		writeFiles(t, dir, s.files)
		err := e.Reload(context.Background())
		st := e.Status()
		if s.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), s.wantErr) {
				t.Errorf("%s: Reload error %v, want one mentioning %q", s.name, err, s.wantErr)
			}
			if !strings.Contains(st.LastError, s.wantErr) || st.LastErrorAt.IsZero() || st.Revision != good.Revision {
				t.Errorf("%s: status %+v, want the last error and the good revision %s", s.name, st, good.Revision)
			}
		} else {
			if err != nil {
				t.Errorf("%s: Reload: %v", s.name, err)
			}
			if st.LastError != "" || st.Revision == good.Revision || !st.LoadedAt.After(good.LoadedAt) {
				t.Errorf("%s: status %+v, want a new revision and no error", s.name, st)
			}
		}
		if got := decideRule(t, e); got != s.wantRule {
			t.Errorf("%s: decision by %q, want %q", s.name, got, s.wantRule)
		}
	}
	if !strings.Contains(logs.String(), "policy reload refused") {
		t.Errorf("no refusal logged:\n%s", logs.String())
	}
}

func TestDataDocuments(t *testing.T) {
	policy := `package airlock

decision := {"action": "allow", "rule": "t.list"} if data.hosts.allowed[input.request.host]

else := {"action": "deny", "rule": "t.default"}
`
	for _, tc := range []struct{ name, file, content string }{
		{"json", "data.json", `{"hosts": {"allowed": {"a.example": true}}}`},
		{"yaml", "data.yaml", "hosts:\n  allowed:\n    a.example: true\n"},
		{"nested dir", "hosts/data.json", `{"allowed": {"a.example": true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, map[string]string{"p.rego": policy, tc.file: tc.content}, Options{})
			if got := decideRule(t, e); got != "t.list" {
				t.Errorf("listed host decided by %q, want t.list", got)
			}
			d, _ := e.Decide(context.Background(), requestInput("GET", "b.example", "/"))
			if d.Rule != "t.default" {
				t.Errorf("unlisted host decided by %q, want t.default", d.Rule)
			}
		})
	}
}

func TestDataChangeIsANewRevision(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": allowPolicy, "data.json": `{"a": 1}`})
	e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	before := e.Revision()
	writeFiles(t, dir, map[string]string{"data.json": `{"a": 2}`})
	if err := e.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.Revision() == before {
		t.Errorf("revision unchanged (%s) after data.json changed", before)
	}
}

// Watch picks up an edited policy directory by itself.
func TestWatchDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": allowPolicy})
	e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Watch(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// The watcher may not be registered yet when the file is first written: write again
	// now and then (slower than the debounce), bounded.
	deadline := time.Now().Add(20 * time.Second)
	var lastWrite time.Time
	for decideRule(t, e) != "t.deny" {
		if time.Now().After(deadline) {
			t.Fatal("policy change not picked up by Watch within 20s")
		}
		if time.Since(lastWrite) > time.Second {
			writeFiles(t, dir, map[string]string{"p.rego": denyPolicy})
			lastWrite = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
}
