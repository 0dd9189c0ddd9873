//go:build e2e

package docker_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// TestCLIReportIgnoresWhatTheSandboxPlanted: with the Docker backend too, a link to a
// root-owned host file, or a link in place of the report's directory, planted in a
// read-write workspace does not redirect --report; the command's output is filtered and
// the exit status is the command's.
func TestCLIReportIgnoresWhatTheSandboxPlanted(t *testing.T) {
	// Built as the release binary is (with cgo); the Docker backend runs no holder.
	bin := e2etest.AirlockBinary(t)
	for _, tc := range []struct{ name, report, script string }{
		{"symlink to a host file", "report.json", "ln -sf $SECRET /workspace/report.json"},
		{"linked parent directory", "out/report.json", "mv /workspace/out /workspace/moved && ln -s $SECRETDIR /workspace/out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			secret := filepath.Join(dir, "shadow")
			must(t, os.WriteFile(secret, []byte("host secret\n"), 0o600))
			ws := t.TempDir()
			must(t, os.Chmod(ws, 0o777))
			must(t, os.Mkdir(filepath.Join(ws, "out"), 0o777))
			script := strings.NewReplacer("$SECRETDIR", dir, "$SECRET", secret).Replace(tc.script) +
				`; printf 'a\033]52;c;ZXZpbA==\007b\n'; exit 3`
			cmd := exec.Command(bin, "sandbox", "run", "--backend", "docker", "--image", testImage,
				"--workspace", ws, "--report", filepath.Join(ws, tc.report), "--", "sh", "-c", script)
			cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+t.TempDir())
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 3 {
				t.Fatalf("exit: %v, want the command's 3 (stderr %s)", err, stderr.String())
			}
			if stdout.String() != "ab\n" {
				t.Errorf("stdout %q, want the OSC 52 dropped", stdout.String())
			}
			if b, _ := os.ReadFile(secret); string(b) != "host secret\n" {
				t.Fatalf("the host file was overwritten: %q", b)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Fatalf("airlock wrote into the host directory: %v", ents)
			}
			dst := filepath.Join(ws, tc.report)
			if tc.name == "linked parent directory" {
				dst = filepath.Join(ws, "moved", "report.json")
			}
			var rep sandbox.Report
			b, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &rep); err != nil || rep.ExitCode != 3 {
				t.Errorf("report %s: %v", b, err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
