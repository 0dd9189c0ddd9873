package audit

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A named pipe at the audit log's path (red team: `airlock proxy --check` waited for ever in
// open(2) for a writer): CheckResume returns at once, reading nothing from it.
func TestCheckResumeNamedPipe(t *testing.T) {
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- CheckResume(p) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("CheckResume on a named pipe: %v, want nil (nothing to resume)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("CheckResume on a named pipe still waiting after 5s")
	}
}
