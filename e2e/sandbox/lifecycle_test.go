//go:build e2e

package sandbox_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestParentCrashEndsTheSandboxAndARestartClearsIt kills `airlock sandbox run` with SIGKILL
// while its command runs: the command must die with it (the holder's parent-death signal,
// and the command's on the holder), and the next airlock run must remove what the dead one
// left: its state directory and its cgroups.
func TestParentCrashEndsTheSandboxAndARestartClearsIt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	bin := filepath.Join(t.TempDir(), "airlock")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/airlock-proxy/airlock/cmd/airlock").CombinedOutput(); err != nil {
		t.Fatalf("build airlock: %v\n%s", err, out)
	}
	home := t.TempDir()
	marker := fmt.Sprint(200000 + rand.IntN(700000)) // `sleep MARKER` is this test's command
	id := "sbx-crash-" + marker
	cmd := exec.Command(bin, "sandbox", "run", "--id", id, "--", "sleep", marker)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	for deadline := time.Now().Add(60 * time.Second); pid == 0; time.Sleep(50 * time.Millisecond) {
		if pid = findProcess("sleep\x00" + marker + "\x00"); pid == 0 && time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the sandboxed command never appeared (stderr %q)", stderr.String())
		}
	}
	stateDir := filepath.Join("/run/airlock/sandboxes", id)
	if _, err := os.Stat(stateDir); err != nil {
		t.Fatalf("state directory of the running sandbox: %v", err)
	}
	// Its cgroups, v1 and v2, as they are while it runs.
	groups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*/airlock", id))
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/airlock", id)); err == nil {
		groups = append(groups, filepath.Join("/sys/fs/cgroup/airlock", id))
	}
	if len(groups) == 0 {
		t.Fatal("no cgroup of the running sandbox found")
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); processAlive(pid, marker); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sandboxed command (pid %d) outlived airlock by 10s", pid)
		}
	}

	// The next run clears what the dead one left.
	next := exec.Command(bin, "sandbox", "run", "--", "true")
	next.Env = cmd.Env
	if out, err := next.CombinedOutput(); err != nil {
		t.Fatalf("the next airlock run: %v\n%s", err, out)
	}
	for _, p := range append([]string{stateDir}, groups...) {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there after the next run (stat: %v)", p, err)
		}
	}
}

// findProcess returns the pid of a process whose command line starts with cmdline
// (NUL-separated), or 0.
func findProcess(cmdline string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.HasPrefix(string(b), cmdline) {
			return pid
		}
	}
	return 0
}

func processAlive(pid int, marker string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), marker)
}
