package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/audit"
)

// runAudit runs `airlock audit ARGS...` and returns its output and error.
func runAudit(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"audit"}, args...))
	err := root.Execute()
	return out.String(), err
}

// TestAuditVerifyCommand: `airlock audit verify --public-key` passes an intact signed log,
// fails the forgery an attack produced (checkpoints dropped, an event deleted, seq and prev
// recomputed) and a cut tail, and without the key calls the log unsigned.
func TestAuditVerifyCommand(t *testing.T) {
	dir := t.TempDir()
	key, pub := filepath.Join(dir, "audit.key"), filepath.Join(dir, "audit.pub")
	if _, err := runAudit(t, "keygen", key, pub); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "audit.jsonl")
	s, err := audit.Open(audit.Options{Path: path, SigningKeyFile: key, CheckpointEvents: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if err := s.Record(context.Background(), &audit.Event{Kind: "request", SandboxID: "sbx", Decision: "allow", Path: "/" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := runAudit(t, "verify", "--require-sealed", "--public-key", pub, path)
	if err != nil || !strings.Contains(out, "OK: chain intact and signed to the end") {
		t.Fatalf("intact log: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	lines = lines[:len(lines)-1]

	// The forgery: keep only events, drop the third, renumber and rechain.
	var events []string
	for _, l := range lines {
		if !strings.Contains(l, `"kind":"checkpoint"`) {
			events = append(events, l)
		}
	}
	events = append(events[:2:2], events[3:]...)
	prefix := regexp.MustCompile(`^\{"seq":\d+,"prev":"[0-9a-f]+",`)
	prev := audit.Genesis
	var forged strings.Builder
	for i, l := range events {
		l = prefix.ReplaceAllString(l, `{"seq":`+strconv.Itoa(i+1)+`,"prev":"`+prev+`",`)
		prev = hashLine(l)
		forged.WriteString(l)
	}
	forgedPath := filepath.Join(dir, "forged.jsonl")
	os.WriteFile(forgedPath, []byte(forged.String()), 0o600)
	out, err = runAudit(t, "verify", "--public-key", pub, forgedPath)
	if err == nil || !strings.Contains(out, "BROKEN") || !strings.Contains(out, "no valid signed checkpoint covers the 7 event line(s)") {
		t.Errorf("forged log: %v\n%s", err, out)
	}
	out, err = runAudit(t, "verify", forgedPath)
	if err != nil || !strings.Contains(out, "UNSIGNED") {
		t.Errorf("forged log without a key: %v, want a chain-only OK that says UNSIGNED\n%s", err, out)
	}

	cutPath := filepath.Join(dir, "cut.jsonl")
	os.WriteFile(cutPath, []byte(strings.Join(lines[:len(lines)-2], "")), 0o600)
	out, err = runAudit(t, "verify", "--public-key", pub, cutPath)
	if err == nil || !strings.Contains(out, "come after the last valid signed checkpoint") {
		t.Errorf("log with its tail cut: %v\n%s", err, out)
	}
}

func hashLine(l string) string {
	sum := sha256.Sum256([]byte(strings.TrimSuffix(l, "\n")))
	return hex.EncodeToString(sum[:])
}

// TestAuditVerifyFirstRun: what a new user meets. A file that does not exist is an error
// and no report (no "OK" before it); an empty file is not OK; a cleanly closed unsigned log
// is OK and is not called unsealed (an unsigned log has no seal), with what a seal would
// need said.
func TestAuditVerifyFirstRun(t *testing.T) {
	dir := t.TempDir()
	out, err := runAudit(t, "verify", filepath.Join(dir, "nonexist.jsonl"))
	if err == nil || out != "" || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: err %v, output %q; want the error and no report", err, out)
	}
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o600)
	out, err = runAudit(t, "verify", empty)
	if err == nil || strings.Contains(out, "OK:") || !strings.Contains(out, "BROKEN") || !strings.Contains(out, "the log holds no lines") {
		t.Errorf("empty file: err %v, output %q; want BROKEN: the log holds no lines", err, out)
	}
	path := filepath.Join(dir, "audit.jsonl")
	s, err := audit.Open(audit.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	s.Record(context.Background(), &audit.Event{Kind: "request", SandboxID: "sbx", Decision: "allow"})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out, err = runAudit(t, "verify", path)
	if err != nil || !strings.Contains(out, "OK: chain intact") || strings.Contains(out, "sealed: no") || !strings.Contains(out, "sealed: does not apply: the log is unsigned") {
		t.Errorf("unsigned closed log: err %v, output:\n%s", err, out)
	}
}
