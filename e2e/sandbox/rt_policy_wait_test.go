//go:build e2e

package sandbox_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// Red team: a one-shot run whose policy is slow to load (here a bundle URL that never
// answers) is stopped with Ctrl-C. It sat out the bundle client's 30 s timeout, deaf to
// SIGINT, the sandbox already made: the background load ignored cancellation and the
// sandbox's start event waited for the policy's revision without a context. The load now
// ends with the run's context, and the event waits only as long as the run goes on: the run
// ends at once with 130, nothing ran, and its sandbox is removed.
func TestRTRunStopsOnSIGINTWhilePolicyLoads(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	cfg := filepath.Join(t.TempDir(), "airlock.yaml")
	body := "log: {level: warn}\npolicy: " + srv.URL + "/b.tar.gz\npolicy_options: {allow_insecure_http: true}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	cmd := exec.Command(e2etest.AirlockBinary(t), "sandbox", "run", "--config", cfg, "--workspace", ws, "--id", "rt-sigint", "--",
		"sh", "-c", "touch /workspace/ran")
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	time.Sleep(2 * time.Second)
	_ = cmd.Process.Signal(syscall.SIGINT)
	sent := time.Now()
	select {
	case err := <-done:
		if cmd.ProcessState.ExitCode() != 130 {
			t.Errorf("exit %v, want 130 (SIGINT)", err)
		}
		t.Logf("exited %s after SIGINT: %v\n%s", time.Since(sent), err, stderr.Bytes())
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGINT) // a second Ctrl-C
		select {
		case <-done:
			t.Errorf("still running 5 s after SIGINT (exited %s after it, after a second one)\n%s", time.Since(sent), stderr.Bytes())
		case <-time.After(3 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("still running 8 s after SIGINT, deaf to a second one; killed\n%s", stderr.Bytes())
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Error("the command ran")
	}
	if _, err := os.Stat("/run/airlock/sandboxes/rt-sigint"); err == nil {
		t.Error("the stopped run left its sandbox behind")
	}
}
