package sandbox_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
)

func TestCleanupRemovesLeftoversOfDeadOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	state := t.TempDir()
	n := &sandbox.Native{StateDir: state}
	live := newSandbox(t, sandbox.Options{ID: "sbx-cleanup-live", Backend: n})

	// A dead owner: a process that has exited.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(state, "sandboxes", "sbx-cleanup-stale")
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	owner := strconv.Itoa(dead.Process.Pid) + " 12345"
	if err := os.WriteFile(filepath.Join(stale, "owner"), []byte(owner), 0o600); err != nil {
		t.Fatal(err)
	}
	cg := "/sys/fs/cgroup/pids/airlock/sbx-cleanup-stale"
	if err := os.MkdirAll(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(cg) })

	if err := n.Cleanup(context.Background()); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	for _, p := range []string{stale, cg} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there after Cleanup (stat: %v)", p, err)
		}
	}
	if res := run(t, live, "echo alive"); string(res.Stdout) != "alive\n" {
		t.Errorf("live sandbox after Cleanup: stdout %q, want alive", res.Stdout)
	}
}

func BenchmarkCreateExecDestroy(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	n := &sandbox.Native{StateDir: testState}
	ctx := context.Background()
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		s, err := sandbox.New(ctx, sandbox.Options{Backend: n})
		if err != nil {
			b.Fatal(err)
		}
		if res, err := s.Run(ctx, sandbox.Command{Args: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("run: %v exit %d", err, res.ExitCode)
		}
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
}
