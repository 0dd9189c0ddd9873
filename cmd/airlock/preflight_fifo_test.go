package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Named pipes where preflight opens files (red team: `--check` with a pipe as the approval
// store or the audit log waited for ever, deaf to SIGTERM): each check returns at once, and
// the store, which must be a database, is refused with its reason.
func TestPreflightNamedPipes(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "approvals.db")
	log := filepath.Join(dir, "audit.jsonl")
	for _, p := range []string{store, log} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	within := func(name string, f func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			t.Fatalf("%s on a named pipe still waiting after 5s", name)
			return nil
		}
	}
	if err := within("sqliteProblem", func() error { return sqliteProblem(store) }); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("sqliteProblem(pipe) = %v, want 'not a regular file'", err)
	}
	if err := within("fileProblem", func() error { return fileProblem(log, true, os.O_WRONLY|os.O_APPEND) }); err != nil {
		t.Errorf("fileProblem(pipe) = %v, want nil (not a file preflight opens)", err)
	}
	cfg := &Config{Home: filepath.Join(dir, "home"), AuditLog: log}
	cfg.Approvals.Store = "sqlite:" + store
	errs := within("checkPaths", func() error {
		for _, err := range checkPaths(cfg) {
			if strings.Contains(err.Error(), "approvals.store") && strings.Contains(err.Error(), "not a regular file") {
				return nil
			}
		}
		return os.ErrNotExist
	})
	if errs != nil {
		t.Errorf("checkPaths did not refuse the pipe as approvals.store")
	}
}
