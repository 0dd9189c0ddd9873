//go:build e2e

package tty_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const dockerImage = "airlock-sandbox-test:latest"

// needDocker skips without a reachable Docker daemon and builds the test image (as
// e2e/docker does: locally, from Debian's static busybox).
func needDocker(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("the Docker daemon is not reachable: %v %s", err, out)
	}
	if out, err := exec.Command("sh", "../docker/build-image.sh", dockerImage).CombinedOutput(); err != nil {
		t.Fatalf("build the sandbox image: %v\n%s", err, out)
	}
}

// TestDockerTerminal: the Docker backend's command gets a terminal of the container's
// private devpts (its first pty) at the host terminal's size, a resize reaches it, Ctrl-C
// interrupts it inside and airlock exits with its status; busybox's vi draws; the host
// terminal's settings are the same after.
func TestDockerTerminal(t *testing.T) {
	needDocker(t)
	tm := newTerm(t, 100, 30)
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	if err := os.WriteFile(filepath.Join(ws, "inside.sh"), []byte(insideScript), 0o644); err != nil {
		t.Fatal(err)
	}
	tm.saveSettings()
	tm.interruptInside(`$AIRLOCK sandbox run --backend docker --image `+dockerImage+` --workspace `+ws+`:ro -- sh /workspace/inside.sh; echo "stat""us=$?"`,
		"/dev/pts/0", "status=")
	tm.settingsSame("after Ctrl-C (docker)")

	tm.typeLine(`clear; $AIRLOCK sandbox run --backend docker --image ` + dockerImage + ` -- vi; echo "vi-""status=$?"`)
	tm.waitFor("~")
	tm.tmux("send-keys", "-t", "e2e", "-l", ":q!")
	tm.keys("Enter")
	if s := tm.waitFor("vi-status="); !strings.Contains(s, "vi-status=0") {
		t.Errorf("airlock's status after busybox vi, want 0:\n%s", s)
	}
	tm.settingsSame("after vi (docker)")
}
