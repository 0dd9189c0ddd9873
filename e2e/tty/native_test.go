//go:build e2e

package tty_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFullScreenProgramDraws: vi, run by `airlock sandbox run` from a terminal (no -t:
// stdin and stdout are terminals), draws its screen in the sandbox's terminal and takes
// keys; the host terminal's settings are the same after.
func TestFullScreenProgramDraws(t *testing.T) {
	tm := newTerm(t, 100, 30)
	tm.saveSettings()
	tm.typeLine(`$AIRLOCK sandbox run -- vi /tmp/notes; echo "vi-""status=$?"`)
	tm.waitFor("~") // vi's empty lines: it drew a full screen
	tm.keys("i")
	tm.tmux("send-keys", "-t", "e2e", "-l", "typed-in-vi")
	tm.keys("Escape")
	tm.waitFor("typed-in-vi")
	tm.tmux("send-keys", "-t", "e2e", "-l", ":q!")
	tm.keys("Enter")
	s := tm.waitFor("vi-status=")
	if !strings.Contains(s, "vi-status=0") {
		t.Errorf("airlock's status after vi, want 0:\n%s", s)
	}
	tm.settingsSame("after vi")
}

// TestTerminalInside: the command's terminal is the sandbox's own (its first pty), its
// size is the host terminal's, a resize of the host terminal reaches it (SIGWINCH), and
// Ctrl-C interrupts the command inside, not airlock, which exits with the command's
// status after its cleanup.
func TestTerminalInside(t *testing.T) {
	tm := newTerm(t, 100, 30)
	tm.saveSettings()
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	if err := os.WriteFile(filepath.Join(ws, "inside.sh"), []byte(insideScript), 0o644); err != nil {
		t.Fatal(err)
	}
	tm.interruptInside(`$AIRLOCK sandbox run --id sbx-tty-e2e --workspace `+ws+`:ro -- sh /workspace/inside.sh; echo "stat""us=$?"; test -e /run/airlock/sandboxes/sbx-tty-e2e && echo "sta""te-left" || echo "sta""te-gone"`,
		"/dev/pts/0", "status=")
	if s := tm.waitFor("state-gone"); !strings.Contains(s, "state-gone") {
		t.Errorf("the sandbox's state was not removed: airlock did not clean up:\n%s", s)
	}
	tm.settingsSame("after Ctrl-C")
}

// TestJobControlInAShell: an interactive bash inside has job control (no "cannot set
// terminal process group", no "no job control"), Ctrl-Z stops its foreground job and fg
// resumes it.
func TestJobControlInAShell(t *testing.T) {
	tm := newTerm(t, 100, 30)
	tm.saveSettings()
	tm.typeLine(`$AIRLOCK sandbox run -it -- env PS1='in''ner$ ' bash --norc -i; echo "bash-""status=$?"`)
	tm.waitFor("inner$ ")
	tm.sync()
	// Ctrl-Z once the job runs in the foreground (its output shows it): sent at once, it
	// could reach bash before the job started.
	tm.typeLine(`sh -c 'echo sle""eping; exec sleep 30'`)
	tm.waitFor("sleeping")
	tm.keys("C-z")
	tm.waitFor("Stopped")
	// wait: bash reaps the killed job before `exit`, which it refuses once while a job it
	// has not reaped yet still shows as stopped ("There are stopped jobs", seen in CI).
	tm.typeLine(`jobs; kill %1; wait %1; echo "killed""-job"`)
	tm.waitFor("killed-job")
	tm.typeLine("exit 5")
	s := tm.waitFor("bash-status=")
	if !strings.Contains(s, "bash-status=5") {
		t.Errorf("want bash's status 5:\n%s", s)
	}
	for _, bad := range []string{"cannot set terminal process group", "no job control"} {
		if strings.Contains(s, bad) {
			t.Errorf("bash says %q:\n%s", bad, s)
		}
	}
	tm.settingsSame("after bash")
}

// TestTIOCSTIStaysInside: a command that pushes a line into its terminal's input with
// TIOCSTI pushes it into the sandbox's terminal, where the sandbox itself reads it, never
// into the host terminal, whose shell would run it after airlock exits. Without airlock
// the same program does reach the host shell (when the kernel allows TIOCSTI at all):
// the test can fail.
func TestTIOCSTIStaysInside(t *testing.T) {
	tm := newTerm(t, 120, 30)
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	if err := os.WriteFile(filepath.Join(ws, "sti.py"), []byte(stiProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	tm.saveSettings()
	tm.tiocstiStaysInside(`$AIRLOCK sandbox run --workspace ` + ws + `:ro -- sh -c 'python3 /workspace/sti.py; read -r line; echo "sandbox-read:[$line]"'; echo "sti-""status=$?"`)

	// The control: straight from the host terminal, the same program's line is run by
	// the host shell, when the kernel allows TIOCSTI.
	if b, _ := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti"); strings.TrimSpace(string(b)) == "1" {
		tm.typeLine("python3 " + filepath.Join(ws, "sti.py"))
		tm.waitFor("INJECTED-42")
	}
}

// TestTerminalRestoredOnEveryWayOut: the host terminal's settings are back after a
// timeout, after the command dies of a signal, and after airlock itself is stopped by
// SIGTERM while the command runs; the statuses are what they are without a terminal.
func TestTerminalRestoredOnEveryWayOut(t *testing.T) {
	tm := newTerm(t, 100, 30)
	tm.saveSettings()
	if st := tm.run(`$AIRLOCK sandbox run --timeout 2s -- vi`); st != "124" {
		t.Errorf("timeout: status %s, want 124:\n%s", st, tm.screen())
	}
	tm.settingsSame("after a timeout")
	if st := tm.run(`$AIRLOCK sandbox run -- sh -c 'kill -SEGV $$'`); st != "139" {
		t.Errorf("crashed command: status %s, want 139:\n%s", st, tm.screen())
	}
	tm.settingsSame("after a crashed command")
	tm.typeLine(`$AIRLOCK sandbox run -- sh -c 'echo run""ning; sleep 60'; echo "term-""status=$?"`)
	tm.waitFor("running") // the output: the typed line has run""ning
	tm.termAirlock()
	tm.settingsSame("after SIGTERM to airlock")
}

// TestOSC52FilteredOnTheTerminal: a clipboard write (OSC 52) from the sandbox's terminal
// does not reach the host terminal (tmux, told to take OSC 52 into a paste buffer, gets
// none); with --raw-output it does: the test can fail.
func TestOSC52FilteredOnTheTerminal(t *testing.T) {
	tm := newTerm(t, 100, 30)
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	// "osc52-canary" in base64; the sequence is split across writes as a program may.
	script := "printf '\\033]52;c;b3NjNTIt'; sleep 0.1; printf 'Y2FuYXJ5\\007'; echo drawn\n"
	if err := os.WriteFile(filepath.Join(ws, "osc52.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := tm.run(`$AIRLOCK sandbox run -t --workspace ` + ws + `:ro -- sh /workspace/osc52.sh`); st != "0" {
		t.Fatalf("status %s:\n%s", st, tm.screen())
	}
	if b := tm.tmux("list-buffers"); strings.TrimSpace(b) != "" {
		t.Errorf("the sandbox wrote the host terminal's clipboard: buffers %q", b)
	}
	if st := tm.run(`$AIRLOCK sandbox run -t --raw-output --workspace ` + ws + `:ro -- sh /workspace/osc52.sh`); st != "0" {
		t.Fatalf("status %s:\n%s", st, tm.screen())
	}
	if b := tm.tmux("show-buffer"); b != "osc52-canary" {
		t.Errorf("with --raw-output the clipboard write should pass (the control): buffer %q", b)
	}
}
