package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
)

// TestApprovalsCLIShowsHiddenCharacters: `approvals show` and `approvals list` print a record
// whose URL, headers and body preview hold bidirectional overrides, isolates, zero-width
// characters and terminal escapes with each of them escaped (\u202e), never as itself; the
// JSON still parses to exactly what the sandbox sent.
func TestApprovalsCLIShowsHiddenCharacters(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	const tok = "cli-approver-token-0123456789"
	if err := os.WriteFile(tokFile, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	svc, err := approval.New(context.Background(), approval.Options{
		Config: approval.Config{Store: "sqlite:" + filepath.Join(dir, "a.db"),
			Approvers: []approval.ApproverConfig{{Name: "oncall", TokenFile: tokFile}}},
		PollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)

	url := "https://api.example.com/\u202Etxt.exe?q=\u2066x\u2069"
	ev, cancel := svc.Subscribe()
	defer cancel()
	hctx, stop := context.WithCancel(context.Background())
	defer stop()
	go svc.Hold(hctx, approval.Request{SandboxID: "sbx\u200B1", Method: "POST", URL: url, Rule: "r",
		Header: http.Header{"X-A\u200Db": {"v\x1b]52;c;ZXZpbA==\x07"}},
		Body:   []byte("ok\u202E\U000E0041 tag\n")})
	var id string
	select {
	case e := <-ev:
		id = e.Record.ID
	case <-time.After(30 * time.Second):
		t.Fatal("no approval created")
	}
	run := func(args ...string) string {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"approvals", "--admin", srv.URL, "--token-file", tokFile}, args...))
		if err := root.Execute(); err != nil {
			t.Fatalf("approvals %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	hidden := []rune{0x202E, 0x2066, 0x2069, 0x200B, 0x200D, 0x1B, 0x07, 0xE0041}
	show := run("show", id)
	list := run("list", "--state", "all")
	for name, out := range map[string]string{"show": show, "list": list} {
		for _, r := range hidden {
			if strings.ContainsRune(out, r) {
				t.Errorf("%s prints U+%04X as itself:\n%s", name, r, out)
			}
		}
		if !strings.Contains(out, `\u202e`) {
			t.Errorf("%s lacks the escaped override:\n%s", name, out)
		}
	}
	var rec approval.Record
	if err := json.Unmarshal([]byte(show), &rec); err != nil {
		t.Fatalf("show is not JSON: %v\n%s", err, show)
	}
	if rec.URL != url || rec.Sandbox != "sbx\u200B1" || rec.Headers.Get("X-A\u200Db") != "v\x1b]52;c;ZXZpbA==\x07" || !strings.Contains(rec.BodyPreview, "\U000E0041") {
		t.Errorf("show's JSON does not parse back to the record: %+v", rec)
	}
	if _, err := svc.Decide(context.Background(), id, approval.StateDenied, "oncall", ""); err != nil {
		t.Fatal(err)
	}
}
