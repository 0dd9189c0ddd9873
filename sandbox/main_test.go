package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	Init()
	os.Exit(m.Run())
}

// newTestSandbox creates a sandbox with a private state directory, closed at cleanup.
func newTestSandbox(t testing.TB, o Options) *Sandbox {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("native sandboxes need root (CI runs as root)")
	}
	if o.Backend == nil {
		o.Backend = &Native{StateDir: filepath.Join(os.TempDir(), "airlock-test-state")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// run runs args and fails the test when the command cannot be run at all.
func run(t testing.TB, s *Sandbox, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := s.Run(ctx, Command{Args: args})
	if err != nil {
		t.Fatalf("Run %q: %v (stderr %q)", args, err, res.Stderr)
	}
	return res
}
