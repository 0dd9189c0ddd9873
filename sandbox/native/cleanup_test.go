package native_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

func TestCleanupRemovesLeftoversOfDeadOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	state := t.TempDir()
	n := &native.Native{StateDir: state}
	live := newSandbox(t, sandbox.Options{ID: "sbx-cleanup-live", Backend: n})
	// A live sandbox of another airlock (another state directory), and a cgroup that no
	// state directory here names: Cleanup must leave both alone.
	other := newSandbox(t, sandbox.Options{ID: "sbx-cleanup-other"})
	foreign := "/sys/fs/cgroup/pids/airlock/sbx-cleanup-foreign"
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(foreign) })

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
	for name, s := range map[string]*sandbox.Sandbox{"live": live, "another airlock's": other} {
		if res := run(t, s, "echo alive"); string(res.Stdout) != "alive\n" {
			t.Errorf("%s sandbox after Cleanup: stdout %q, want alive", name, res.Stdout)
		}
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("Cleanup removed a cgroup its state directory does not name: %v", err)
	}
	// uid ranges are machine-wide (SlotDir): the other airlock's slot stays.
	if !slotHeldBy(t, "sbx-cleanup-other") {
		t.Error("Cleanup removed the uid slot of another airlock's live sandbox")
	}
	if !slotHeldBy(t, "sbx-cleanup-live") {
		t.Error("Cleanup removed the uid slot of its own live sandbox")
	}
	// A slot of this state directory whose sandbox has no directory: freed when old, kept
	// while young (its sandbox may be being created, or the file not yet written).
	young := takeSlot(t, "sbx-cleanup-gone\n"+state+"\n")
	old := takeSlot(t, "sbx-cleanup-gone\n"+state+"\n")
	writing := takeSlot(t, "")
	past := time.Now().Add(-2 * time.Minute)
	must(t, os.Chtimes(old, past, past))
	if err := n.Cleanup(context.Background()); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("a young slot was freed: %v", err)
	}
	if _, err := os.Stat(writing); err != nil {
		t.Errorf("a slot being written was freed: %v", err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("an old slot of a sandbox that is gone was kept (stat: %v)", err)
	}
}

// takeSlot creates a free slot file with content, removed at cleanup.
func takeSlot(t *testing.T, content string) string {
	t.Helper()
	for n := 32000; n > 0; n-- {
		p := filepath.Join(sandbox.SlotDir, strconv.Itoa(n))
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if os.IsExist(err) {
			continue
		}
		must(t, err)
		_, err = f.WriteString(content)
		must(t, err)
		must(t, f.Close())
		t.Cleanup(func() { _ = os.Remove(p) })
		return p
	}
	t.Fatal("no free slot")
	return ""
}

// slotHeldBy reports whether a machine-wide uid slot names sandbox id.
func slotHeldBy(t *testing.T, id string) bool {
	t.Helper()
	entries, err := os.ReadDir(sandbox.SlotDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(sandbox.SlotDir, e.Name()))
		if strings.HasPrefix(string(b), id+"\n") {
			return true
		}
	}
	return false
}

// BenchmarkCreateExecDestroy times a sandbox's whole life with one command: create, run
// /bin/true, destroy. It reports the p50 and p90 of the whole and the p50 of each phase.
func BenchmarkCreateExecDestroy(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	n := &native.Native{StateDir: testState}
	ctx := context.Background()
	var total, create, run, destroy []time.Duration
	for b.Loop() {
		t0 := time.Now()
		s, err := sandbox.New(ctx, sandbox.Options{Backend: n})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if res, err := s.Run(ctx, sandbox.Command{Args: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("run: %v exit %d", err, res.ExitCode)
		}
		t2 := time.Now()
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		total, create = append(total, t3.Sub(t0)), append(create, t1.Sub(t0))
		run, destroy = append(run, t2.Sub(t1)), append(destroy, t3.Sub(t2))
	}
	ms := func(d []time.Duration, q float64) float64 {
		slices.Sort(d)
		return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(ms(total, 0.5), "p50-ms")
	b.ReportMetric(ms(total, 0.9), "p90-ms")
	b.ReportMetric(ms(create, 0.5), "create-p50-ms")
	b.ReportMetric(ms(run, 0.5), "run-p50-ms")
	b.ReportMetric(ms(destroy, 0.5), "destroy-p50-ms")
}

// BenchmarkRun times one more command (/bin/true) in a sandbox that already exists.
func BenchmarkRun(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	ctx := context.Background()
	s, err := sandbox.New(ctx, sandbox.Options{Backend: &native.Native{StateDir: testState}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		if res, err := s.Run(ctx, sandbox.Command{Args: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("run: %v exit %d", err, res.ExitCode)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
}
