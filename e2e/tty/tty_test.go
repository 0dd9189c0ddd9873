//go:build e2e

// Package tty_test drives `airlock sandbox run` from a real terminal: a tmux server on a
// private socket, keys sent with send-keys, the screen read with capture-pane. Run as
// root (native sandboxes; the Docker test also needs the Docker daemon):
//
//	go test -tags e2e -count=1 ./e2e/tty/
package tty_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// term is a terminal: one tmux window running a host shell, on a tmux server of its own.
type term struct {
	t    *testing.T
	sock string
}

// newTerm starts a tmux server with one window of cols×rows running sh, whose prompt is
// "host$ ", in dir, with AIRLOCK (the binary) and AIRLOCK_HOME set.
func newTerm(t *testing.T, cols, rows int) *term {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("native sandboxes need root")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("needs tmux (apt-get install tmux)")
	}
	bin := e2etest.AirlockBinary(t)
	dir := t.TempDir()
	tm := &term{t: t, sock: filepath.Join(dir, "tmux.sock")}
	cmd := exec.Command("tmux", "-S", tm.sock, "-f", "/dev/null", "new-session", "-d", "-s", "e2e",
		"-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows), "-c", dir,
		"env", "PS1=host$ ", "AIRLOCK="+bin, "AIRLOCK_HOME="+filepath.Join(dir, "home"), "sh")
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start tmux: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", tm.sock, "kill-server").Run() })
	tm.tmux("set-option", "-g", "set-clipboard", "on") // OSC 52 would fill a paste buffer
	tm.tmux("set-option", "-g", "history-limit", "5000")
	tm.waitFor("host$ ")
	return tm
}

func (tm *term) tmux(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tm.sock}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %s: %v %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// typeLine types s and Enter at the terminal.
func (tm *term) typeLine(s string) {
	tm.t.Helper()
	tm.tmux("send-keys", "-t", "e2e", "-l", s)
	tm.tmux("send-keys", "-t", "e2e", "Enter")
}

// keys sends tmux key names (C-c, Escape...).
func (tm *term) keys(k ...string) {
	tm.t.Helper()
	tm.tmux(append([]string{"send-keys", "-t", "e2e"}, k...)...)
}

// screen is what the window shows now, with its scrollback.
func (tm *term) screen() string {
	tm.t.Helper()
	return tm.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "e2e")
}

// waitFor waits until the screen shows want; it fails the test after a generous deadline.
func (tm *term) waitFor(want string) string {
	tm.t.Helper()
	var s string
	start := time.Now()
	for deadline := start.Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if s = tm.screen(); strings.Contains(s, want) {
			tm.t.Logf("%q after %v", want, time.Since(start).Round(time.Millisecond))
			return s
		}
	}
	tm.t.Fatalf("the terminal never showed %q; it shows:\n%s", want, s)
	return ""
}

// run types a host command line ending in a marker that prints its exit status, and
// waits for that status line: "status=N".
func (tm *term) run(line string) string {
	tm.t.Helper()
	n := time.Now().UnixNano()
	tm.typeLine(fmt.Sprintf("%s; echo \"done$((%d+0))=$?\"", line, n))
	s := tm.waitFor(fmt.Sprintf("done%d=", n))
	i := strings.LastIndex(s, fmt.Sprintf("done%d=", n))
	st, _, _ := strings.Cut(s[i+len(fmt.Sprintf("done%d=", n)):], "\n")
	return strings.TrimSpace(st)
}

// settingsSame checks that the host terminal's settings are what they were at the
// start (saved by saveSettings).
func (tm *term) saveSettings() { tm.typeLine("stty -g > stty.before") }

func (tm *term) settingsSame(when string) {
	tm.t.Helper()
	if st := tm.run("stty -g | cmp -s - stty.before"); st != "0" {
		tm.t.Errorf("%s: the host terminal's settings changed (cmp status %s):\n%s", when, st, tm.screen())
	}
}

// sync types a line until its output shows: an interactive shell may drop what was typed
// before its line editor took the terminal (bash does, at start).
func (tm *term) sync() {
	tm.t.Helper()
	for try := 0; try < 30; try++ {
		tm.typeLine(`echo "sy""nced"`)
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if strings.Contains(tm.screen(), "synced") {
				return
			}
		}
	}
	tm.t.Fatalf("the shell never ran a typed line:\n%s", tm.screen())
}

// stiProbe pushes "echo INJECTED-$((6*7))" and a newline into its terminal's input with
// TIOCSTI and says whether the kernel let it ("pushed", "TIOCSTI refused").
const stiProbe = `import fcntl, sys, termios
try:
    for c in b"echo INJECTED-$((6*7))\n":
        fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))
    print("pushed")
except OSError as e:
    print("TIOCSTI refused:", e)
`

// tiocstiStaysInside types line, which runs stiProbe in a sandbox on its terminal and then
// reads a line there (echoing "sandbox-read:[...]" and then "sti-status=..."): the pushed line
// is what the sandbox reads, the host shell never runs it, and the host terminal's settings
// are those saved before.
func (tm *term) tiocstiStaysInside(line string) {
	t := tm.t
	t.Helper()
	tm.typeLine(line)
	s := tm.waitFor("sti-status=")
	pushed := strings.Contains(s, "pushed")
	if pushed && !strings.Contains(s, "sandbox-read:[echo INJECTED-$((6*7))]") {
		t.Errorf("the pushed line did not reach the sandbox's own terminal:\n%s", s)
	}
	if !pushed && !strings.Contains(s, "TIOCSTI refused") {
		t.Fatalf("the probe did not run:\n%s", s)
	}
	tm.typeLine(`echo "after""-airlock"`)
	s = tm.waitFor("after-airlock")
	if strings.Contains(s, "INJECTED-42") {
		t.Errorf("the sandbox's TIOCSTI reached the host shell:\n%s", s)
	}
	tm.settingsSame("after TIOCSTI")
}

// insideScript prints its terminal and the terminal's size, then waits, saying "resized"
// and the new size on SIGWINCH and exiting with status 3 on SIGINT. (A Docker Engine before
// API 1.42 sets the size just after the start: the script reads it a moment later.)
const insideScript = `tty; sleep 0.3; stty size
trap 'echo "resized $(stty size)"' WINCH
trap 'echo inner-interrupted; exit 3' INT
echo ready
while :; do sleep 0.1; done
`

// interruptInside types line, which runs insideScript in a sandbox and then prints airlock's
// status after the marker status: the command's terminal is wantTTY (a prefix) at the host
// terminal's size 30×100, a resize of the host terminal reaches it, and Ctrl-C runs the
// command's INT trap, whose status 3 is airlock's.
func (tm *term) interruptInside(line, wantTTY, status string) {
	t := tm.t
	t.Helper()
	tm.typeLine(line)
	s := tm.waitFor("ready")
	if !strings.Contains(s, wantTTY) || !strings.Contains(s, "30 100") {
		t.Errorf("want the terminal %s at the host's size 30×100:\n%s", wantTTY, s)
	}
	tm.tmux("resize-window", "-t", "e2e", "-x", "70", "-y", "20")
	tm.waitFor("resized 20 70")
	tm.keys("C-c")
	s = tm.waitFor(status)
	if !strings.Contains(s, "inner-interrupted") || !strings.Contains(s, status+"3") {
		t.Errorf("Ctrl-C: want the command's INT trap and airlock exiting with its status 3:\n%s", s)
	}
}

// termAirlock sends SIGTERM to the airlock the pane's shell is running (its one child) and
// waits for the shell's "term-status=" line: airlock stopped by SIGTERM exits 143.
func (tm *term) termAirlock() {
	tm.t.Helper()
	pid := strings.TrimSpace(tm.tmux("display-message", "-p", "-t", "e2e", "#{pane_pid}"))
	b, err := os.ReadFile(fmt.Sprintf("/proc/%s/task/%s/children", pid, pid))
	if err != nil || len(strings.Fields(string(b))) != 1 {
		tm.t.Fatalf("the host shell's children: %q %v, want airlock alone", b, err)
	}
	airlock, _ := strconv.Atoi(strings.Fields(string(b))[0])
	if err := syscall.Kill(airlock, syscall.SIGTERM); err != nil {
		tm.t.Fatalf("signal airlock: %v", err)
	}
	if s := tm.waitFor("term-status="); !strings.Contains(s, "term-status=143") {
		tm.t.Errorf("airlock stopped by SIGTERM: want status 143:\n%s", s)
	}
}
