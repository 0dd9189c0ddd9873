package native_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

func TestMain(m *testing.M) {
	native.Init()
	os.Exit(m.Run())
}

// testState is the state directory of the tests' sandboxes, apart from a real airlock's.
var testState = filepath.Join(os.TempDir(), "airlock-test-state")

// newSandbox creates a sandbox closed at cleanup; it skips when not root.
func newSandbox(t testing.TB, o sandbox.Options) *sandbox.Sandbox {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("native sandboxes need root (CI runs as root)")
	}
	if o.Backend == nil {
		o.Backend = &native.Native{StateDir: testState}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sandbox.New(ctx, o)
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

// run runs a shell script in s and fails the test if it cannot be run at all.
func run(t testing.TB, s *sandbox.Sandbox, script string) sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("Run %q: %v (stderr %q)", script, err, res.Stderr)
	}
	return res
}
