//go:build e2e

package sandbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// airlockRun runs `airlock sandbox run ARGS...` with its own AIRLOCK_HOME; it returns the
// exit status, stdout and stderr.
func airlockRun(t *testing.T, args ...string) (int, []byte, []byte) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	cmd := exec.Command(e2etest.AirlockBinary(t), append([]string{"sandbox", "run"}, args...)...)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.Bytes(), stderr.Bytes()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.Bytes(), stderr.Bytes()
}

// rootSecret is a root-owned 0600 file outside any workspace: what a sandbox would like
// airlock (root) to overwrite.
func rootSecret(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(p, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReportIgnoresWhatTheSandboxPlanted: --report inside a read-write workspace, where
// the sandbox planted a link to a host file, a dangling link, a FIFO or a link in place of
// the report's directory. airlock writes a fresh report file in the directory it resolved
// before the run, never through what was planted, and exits with the command's status.
func TestReportIgnoresWhatTheSandboxPlanted(t *testing.T) {
	for _, tc := range []struct{ name, report, script string }{
		{"symlink to a host file", "report.json", "ln -sf $SECRET /workspace/report.json"},
		{"dangling symlink", "report.json", "ln -sf $SECRETDIR/created-by-airlock /workspace/report.json"},
		{"symlink to a host directory", "report.json", "ln -sf $SECRETDIR /workspace/report.json"},
		{"FIFO", "report.json", "mkfifo /workspace/report.json"},
		{"linked parent directory", "out/report.json", "mv /workspace/out /workspace/moved && ln -s $SECRETDIR /workspace/out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secret := rootSecret(t)
			ws := t.TempDir()
			must(t, os.Mkdir(filepath.Join(ws, "out"), 0o755))
			script := strings.NewReplacer("$SECRETDIR", filepath.Dir(secret), "$SECRET", secret).Replace(tc.script) + "; exit 3"
			code, _, stderr := airlockRun(t, "--workspace", ws, "--report", filepath.Join(ws, tc.report), "--", "sh", "-c", script)
			if code != 3 {
				t.Fatalf("exit %d, want the command's 3 (stderr %s)", code, stderr)
			}
			if b, err := os.ReadFile(secret); err != nil || string(b) != "host secret\n" {
				t.Fatalf("the host file was overwritten: %q %v", b, err)
			}
			if ents, _ := os.ReadDir(filepath.Dir(secret)); len(ents) != 1 {
				t.Fatalf("airlock created files in the host directory: %v", ents)
			}
			dst := filepath.Join(ws, tc.report)
			if tc.name == "linked parent directory" {
				dst = filepath.Join(ws, "moved", "report.json")
			}
			fi, err := os.Lstat(dst)
			if err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("report %s: %v %v, want a regular file", dst, fi, err)
			}
			var rep sandbox.Report
			b, _ := os.ReadFile(dst)
			if err := json.Unmarshal(b, &rep); err != nil || rep.ExitCode != 3 {
				t.Errorf("report %s: %v %+v", b, err, rep)
			}
		})
	}
}

// TestSandboxBytesDoNotReachTheTerminal: the command's output loses the sequences that act
// beyond the screen (unless --raw-output), and what airlock itself prints about the
// sandbox's files quotes their control bytes, so a file name can neither act on the
// terminal nor forge a line of airlock's.
func TestSandboxBytesDoNotReachTheTerminal(t *testing.T) {
	const emit = `printf 'a\033]52;c;ZXZpbA==\007b\033]0;title\033\\c\302\235x\234d\033[1mbold\n'`
	_, out, _ := airlockRun(t, "--", "sh", "-c", emit+"; "+emit+" >&2")
	if string(out) != "abcd\x1b[1mbold\n" {
		t.Errorf("filtered stdout %q", out)
	}
	_, raw, _ := airlockRun(t, "--raw-output", "--", "sh", "-c", emit)
	if !bytes.Contains(raw, []byte("\x1b]52;c;ZXZpbA==\x07")) {
		t.Errorf("--raw-output stdout %q, want it unchanged", raw)
	}

	// A FIFO named with escape sequences and a forged line is left out of the patch, and
	// airlock says so on stderr, quoted.
	ws := t.TempDir()
	must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("old\n"), 0o644))
	patch := filepath.Join(t.TempDir(), "p.diff")
	code, _, stderr := airlockRun(t, "--workspace", ws+":cow", "--patch", patch, "--",
		"sh", "-c", `mkfifo "$(printf 'x\033]0;pwned\007\nairlock: patch OK')"; echo new > a.txt; exit 5`)
	if code != 5 {
		t.Errorf("exit %d, want the command's 5 (stderr %q)", code, stderr)
	}
	if bytes.ContainsAny(stderr, "\x1b\x07") || bytes.Contains(stderr, []byte("\nairlock: patch OK")) {
		t.Errorf("stderr carries the sandbox's raw bytes: %q", stderr)
	}
	if !bytes.Contains(stderr, []byte("leaves changes out")) {
		t.Errorf("stderr does not say the patch is incomplete: %q", stderr)
	}
	if p, _ := os.ReadFile(patch); !bytes.Contains(p, []byte("+new")) {
		t.Errorf("the patch lacks the edit beside the FIFO:\n%s", p)
	}
}

// TestDeepTreeKeepsTheListing: a directory 2,000 levels deep (past PATH_MAX) beside an
// ordinary edit: the report lists both, the patch carries the edit, and the run keeps the
// command's status.
func TestDeepTreeKeepsTheListing(t *testing.T) {
	ws := t.TempDir()
	must(t, os.WriteFile(filepath.Join(ws, "edit.txt"), []byte("old\n"), 0o644))
	report := filepath.Join(t.TempDir(), "r.json")
	patch := filepath.Join(t.TempDir(), "p.diff")
	code, _, stderr := airlockRun(t, "--workspace", ws+":cow", "--report", report, "--patch", patch, "--",
		"python3", "-c", `import os
os.chdir("/workspace")
open("edit.txt", "w").write("new\n")
for i in range(2000):
    os.mkdir("d" * 20); os.chdir("d" * 20)
open("leaf", "w").write("x\n")
`)
	if code != 0 {
		t.Fatalf("exit %d (stderr %s)", code, stderr)
	}
	var rep sandbox.Report
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	must(t, json.Unmarshal(b, &rep))
	var edit, leaf bool
	for _, c := range rep.Changes {
		edit = edit || c.Path == "edit.txt" && c.Kind == "modified"
		leaf = leaf || strings.HasSuffix(c.Path, "/leaf") && len(c.Path) > 4096
	}
	if !edit || !leaf || rep.ChangesIncomplete != "" {
		t.Errorf("report changes: edit %v, deep leaf %v, incomplete %q", edit, leaf, rep.ChangesIncomplete)
	}
	if p, _ := os.ReadFile(patch); !bytes.Contains(p, []byte("+++ b/edit.txt\n")) {
		t.Errorf("the patch lacks the edit:\n%.300s", p)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// openPty opens a pseudo-terminal: the master, and the terminal itself for a child.
func openPty(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	must(t, err)
	must(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	must(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	must(t, err)
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// TestAirlockLinesAreSeen: output that would hide what airlock prints after it (clearing
// the scrollback, a full reset, concealed text, the alternate screen, leaving UTF-8) loses
// the sequences that erase or switch coding, and on a terminal airlock restores the
// attributes, the screen and the character set before its own lines.
func TestAirlockLinesAreSeen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	master, tty := openPty(t)
	cmd := exec.Command(e2etest.AirlockBinary(t), "sandbox", "run", "--timeout", "3s", "--", "sh", "-c",
		`printf 'visible\033[?1049h\033[8m\033(0\016\033[3J\033c\033[2J\033%%@hidden'; sleep 60`)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+t.TempDir())
	cmd.Stdout, cmd.Stderr = tty, tty
	must(t, cmd.Start())
	out := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(master) // EIO once the terminal is closed and drained
		out <- b
	}()
	err := cmd.Wait()
	tty.Close()
	got := <-out
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 124 {
		t.Errorf("exit %v, want 124 (timeout)", err)
	}
	for _, seq := range []string{"\x1b[3J", "\x1bc", "\x1b%@"} {
		if bytes.Contains(got, []byte(seq)) {
			t.Errorf("the terminal got %q: %q", seq, got)
		}
	}
	end := bytes.Index(got, []byte("hidden"))
	line := bytes.Index(got, []byte("airlock: sandbox"))
	if end < 0 || line < end {
		t.Fatalf("the command's output and airlock's timeout line: %q", got)
	}
	between := string(got[end:line])
	for _, want := range []string{"\x1b[0m", "\x1b[?1049l", "\x1b(B\x0f", "\x1b[?25h"} {
		if !strings.Contains(between, want) {
			t.Errorf("no %q between the command's output and airlock's line: %q", want, between)
		}
	}
}

// TestAirlockSecretsAreHidden: airlock's config names an approver token and the proxy's
// credential key. Written with umask 022 (readable by anyone, a sandbox included) they are
// refused, naming the key; private, they and the config file read nothing inside the
// sandbox wherever it would see them: under /opt, and in the workspace, whose owner's files
// the sandbox reads as its own ($AIRLOCK_HOME there too).
func TestAirlockSecretsAreHidden(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	rt, err := os.MkdirTemp("/opt", "airlock-e2e-rt-") // a host directory sandboxes see
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(rt) })
	ws := t.TempDir()
	inWS := filepath.Join(ws, ".airlock")
	must(t, os.Mkdir(inWS, 0o700))
	write := func(path, body string, mode os.FileMode) {
		must(t, os.WriteFile(path, []byte(body), mode))
		must(t, os.Chmod(path, mode))
	}
	config := func(dir string, mode os.FileMode) string {
		write(filepath.Join(dir, "oncall.token"), "APPROVER-TOKEN-CANARY\n", mode)
		write(filepath.Join(dir, "token.key"), "HMAC-KEY-CANARY-0123456789abcdef0123456789abcdef\n", mode)
		p := filepath.Join(dir, "airlock.yaml")
		write(p, "approvals:\n  approvers: [{name: oncall, token_file: "+filepath.Join(dir, "oncall.token")+"}]\n"+
			"proxy:\n  token_key_file: "+filepath.Join(dir, "token.key")+"\n", 0o644)
		return p
	}
	run := func(home, cfg, script string) (int, string, string) {
		cmd := exec.Command(e2etest.AirlockBinary(t), "sandbox", "run", "--config", cfg, "--workspace", ws, "--", "sh", "-c", script)
		cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String()
	}

	cfg := config(rt, 0o644)
	code, out, stderr := run(t.TempDir(), cfg, "cat "+rt+"/*")
	if code == 0 || strings.Contains(out, "CANARY") || !strings.Contains(stderr, "approvals.approvers[0].token_file") || !strings.Contains(stderr, "chmod 600") {
		t.Errorf("secret files readable by anyone: exit %d, stdout %q, stderr %q; want refused, naming the key", code, out, stderr)
	}
	for _, c := range []struct{ name, dir, home string }{
		{"under /opt", rt, t.TempDir()},
		{"in the workspace", inWS, filepath.Join(inWS, "home")},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config(c.dir, 0o600)
			code, out, stderr := run(c.home, cfg, "cat "+c.dir+"/* /workspace/.airlock/* 2>&1; ls -AR /workspace/.airlock/home 2>&1; echo DONE")
			if code != 0 || !strings.Contains(out, "DONE") {
				t.Fatalf("exit %d: %s %s", code, out, stderr)
			}
			if strings.Contains(out, "CANARY") || strings.Contains(out, "approvers") || strings.Contains(out, "ca-key.pem") {
				t.Errorf("the sandbox read airlock's config, secrets or home:\n%s", out)
			}
		})
	}
}
