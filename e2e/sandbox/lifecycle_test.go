//go:build e2e

package sandbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// TestParentCrashEndsTheSandboxAndARestartClearsIt kills `airlock sandbox run` with SIGKILL
// while its command runs: the command must die with it (the holder's parent-death signal,
// and the command's on the holder), and the next airlock run must remove what the dead one
// left: its state directory and its cgroups.
func TestParentCrashEndsTheSandboxAndARestartClearsIt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	bin := e2etest.AirlockBinary(t)
	cmd, pid, id, marker, _ := startSleeper(t, bin, "crash")
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

// TestSignalStopsTheRunCleanly: SIGTERM, SIGINT or SIGHUP (a closed terminal) to `airlock sandbox run` ends the
// sandboxed command, removes the sandbox (state, cgroups) before airlock exits, and airlock
// exits as a shell reports the signal (128+n) saying what stopped it.
func TestSignalStopsTheRunCleanly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	bin := e2etest.AirlockBinary(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, pid, id, marker, stderr := startSleeper(t, bin, "signal")
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
				t.Errorf("airlock exit after %s: %v, want status %d", sig, err, 128+int(sig))
			}
			if !strings.Contains(stderr.String(), "stopped by signal") {
				t.Errorf("stderr %q does not say a signal stopped the run", stderr.String())
			}
			// airlock has exited: everything must already be gone, with no grace period.
			if processAlive(pid, marker) {
				t.Errorf("the sandboxed command (pid %d) outlived airlock", pid)
			}
			left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*/airlock", id))
			left = append(left, filepath.Join("/run/airlock/sandboxes", id), filepath.Join("/sys/fs/cgroup/airlock", id))
			for _, p := range left {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Errorf("%s still there after airlock exited (stat: %v)", p, err)
				}
			}
		})
	}
}

// startSleeper starts `airlock sandbox run -- sleep MARKER` with its own AIRLOCK_HOME and
// waits until the sandboxed sleep runs; it returns the command, the sleep's pid, the
// sandbox id, the marker and airlock's stderr.
func startSleeper(t *testing.T, bin, kind string) (*exec.Cmd, int, string, string, *bytes.Buffer) {
	t.Helper()
	home := t.TempDir()
	marker := fmt.Sprint(200000 + rand.IntN(700000)) // `sleep MARKER` is this test's command
	id := "sbx-" + kind + "-" + marker
	cmd := exec.Command(bin, "sandbox", "run", "--id", id, "--", "sleep", marker)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home)
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
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
	return cmd, pid, id, marker, stderr
}

// TestRootlessRunSaysWhatDoesNotHold: as an unprivileged user, `airlock sandbox run` runs
// the command in a rootless native sandbox, says once what it does not enforce (no cgroups)
// and puts the same list in the run report; a memory limit asked for is refused unless
// --allow-unenforced-limits accepts it unenforced.
func TestRootlessRunSaysWhatDoesNotHold(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to another user")
	}
	bin := e2etest.AirlockBinary(t)
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	if err := os.Chmod(filepath.Dir(home), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	airlock := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append([]string{"sandbox", "run"}, args...)...)
		cmd.Env = []string{"AIRLOCK_HOME=" + home, "HOME=" + home, "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	report := filepath.Join(home, "report.json")
	code, out := airlock("--report", report, "--", "sh", "-c", "id -u; grep NoNewPrivs /proc/self/status")
	if code != 0 || !strings.Contains(out, "1000\n") || !strings.Contains(out, "NoNewPrivs:\t1") {
		t.Fatalf("rootless run: exit %d, want 0 with uid 1000 and no_new_privs\n%s", code, out)
	}
	if n := strings.Count(out, "not enforced (no cgroup)"); n != 1 || !strings.Contains(out, "RLIMIT_NPROC") {
		t.Errorf("the notice of what does not hold appears %d times, want once, naming the pids bound\n%s", n, out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Unenforced []string `json:"unenforced"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Unenforced) == 0 || !strings.Contains(rep.Unenforced[0], "memory") {
		t.Errorf("report's unenforced = %q (%v), want the memory limit first\n%s", rep.Unenforced, err, b)
	}
	code, out = airlock("--memory", "64M", "--", "true")
	if code != 1 || !strings.Contains(out, "a memory limit cannot be enforced") || !strings.Contains(out, "--allow-unenforced-limits") {
		t.Errorf("--memory as an ordinary user: exit %d, want 1 saying it cannot be enforced and how to accept that\n%s", code, out)
	}
	if code, out = airlock("--memory", "64M", "--allow-unenforced-limits", "--", "true"); code != 0 {
		t.Errorf("--memory with --allow-unenforced-limits: exit %d, want 0\n%s", code, out)
	}
}

// TestTimeoutFlagOverridesConfig: --timeout 0 means no timeout even when the config sets
// one (it used to fall back to the config), and without the flag the config's applies.
func TestTimeoutFlagOverridesConfig(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	bin := e2etest.AirlockBinary(t)
	home := t.TempDir()
	cfg := filepath.Join(home, "airlock.yaml")
	if err := os.WriteFile(cfg, []byte("sandbox:\n  timeout: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		flags []string
		want  int
	}{
		{nil, 124},
		{[]string{"--timeout", "0"}, 0},
	} {
		args := append([]string{"sandbox", "run", "--config", cfg}, tt.flags...)
		cmd := exec.Command(bin, append(args, "--", "sleep", "1.5")...)
		cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home)
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tt.want {
			t.Errorf("sandbox run %v with config timeout 1s, sleep 1.5: exit %d, want %d\n%s", tt.flags, code, tt.want, out)
		}
	}
}

// TestRunWaitsForItsPolicy: a one-shot run makes its sandbox while its policy loads. A
// policy that does not load fails the run with the policy's error before the command
// starts (nothing of it runs: no file in the workspace), and the sandbox is gone after; a
// policy that loads is the one the run report names.
func TestRunWaitsForItsPolicy(t *testing.T) {
	pol := t.TempDir()
	writeFile := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(pol, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeFile("p.rego", "package airlock\n\ndecision := {\"action\": }\n")
	cfg := filepath.Join(t.TempDir(), "airlock.yaml")
	if err := os.WriteFile(cfg, []byte("log: {level: warn}\npolicy: "+pol+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	report := filepath.Join(t.TempDir(), "report.json")
	code, _, stderr := airlockRun(t, "--config", cfg, "--workspace", ws, "--report", report, "--id", "policy-wait", "--",
		"sh", "-c", "touch /workspace/ran")
	if code == 0 || !strings.Contains(string(stderr), "policy: ") || !strings.Contains(string(stderr), "p.rego:3") {
		t.Fatalf("broken policy: exit %d, stderr %s; want a failure naming p.rego:3", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Fatal("the command ran under a policy that did not load")
	}
	if _, err := os.Stat("/run/airlock/sandboxes/policy-wait"); err == nil {
		t.Fatal("the sandbox of the failed run is still there")
	}

	writeFile("p.rego", "package airlock\n\ndecision := {\"action\": \"deny\", \"rule\": \"t.deny\", \"reason\": \"no\"}\n")
	code, _, stderr = airlockRun(t, "--config", cfg, "--workspace", ws, "--report", report, "--", "sh", "-c", "touch /workspace/ran")
	if code != 0 {
		t.Fatalf("good policy: exit %d, stderr %s", code, stderr)
	}
	var rep struct {
		PolicyRevision string `json:"policy_revision"`
	}
	b, _ := os.ReadFile(report)
	if err := json.Unmarshal(b, &rep); err != nil || !strings.HasPrefix(rep.PolicyRevision, "sha256:") {
		t.Errorf("report %s (%v): want the loaded policy's revision", b, err)
	}
}
