//go:build e2e

package tty_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// sessionProxy is an `airlock proxy` serving sandbox sessions on its admin API, and the
// flags that reach it (--admin, --token-file).
type sessionProxy struct {
	flags string
	dir   string
}

// startSessionProxy starts `airlock proxy` with an issuer token, on free loopback ports;
// it is stopped (SIGTERM: its sessions end) when the test ends.
func startSessionProxy(t *testing.T) *sessionProxy {
	t.Helper()
	bin := e2etest.AirlockBinary(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	token := filepath.Join(dir, "issuer.token")
	if err := os.WriteFile(token, []byte("e2e-tty-issuer-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := e2etest.FreeAddr(t)
	cfg := fmt.Sprintf(`home: %s
listen: [%q]
admin_listen: %q
log: {level: warn, format: text}
proxy:
  issuers: [{name: e2e, token_file: %s}]
sessions:
  state_dir: %s
`, filepath.Join(dir, "home"), e2etest.FreeAddr(t), admin, token, filepath.Join(dir, "sessions"))
	cfgPath := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "proxy", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("proxy log:\n%s", b)
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("airlock proxy never became ready: %v\n%s", err, b)
		}
	}
	return &sessionProxy{flags: "--admin http://" + admin + " --token-file " + token, dir: dir}
}

// airlock runs the CLI against the proxy (not on the terminal) and returns its stdout.
func (p *sessionProxy) airlock(t *testing.T, args ...string) string {
	t.Helper()
	args = append(append(args[:2:2], strings.Fields(p.flags)...), args[2:]...) // before any "--"
	out, err := exec.Command(e2etest.AirlockBinary(t), args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("airlock %s: %v %s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// create makes a session and copies files (name → content) into its /tmp.
func (p *sessionProxy) create(t *testing.T, files map[string]string) string {
	t.Helper()
	id := p.airlock(t, "sandbox", "create")
	t.Cleanup(func() {
		_ = exec.Command(e2etest.AirlockBinary(t), append([]string{"sandbox", "rm", id}, strings.Fields(p.flags)...)...).Run()
	})
	for name, content := range files {
		src := filepath.Join(p.dir, name)
		if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		p.airlock(t, "sandbox", "cp", src, id+":/tmp/"+name)
	}
	return id
}

// TestSessionExecTerminal: `airlock sandbox exec` from a terminal gives the command a
// terminal of the session sandbox's own: vi draws and takes keys (and what it wrote stays
// in the session); the size is the host terminal's and a resize reaches the command;
// Ctrl-C interrupts the command inside, and airlock exits with its status; the host
// terminal's settings are the same after each.
func TestSessionExecTerminal(t *testing.T) {
	p := startSessionProxy(t)
	id := p.create(t, map[string]string{"inside.sh": insideScript})
	tm := newTerm(t, 100, 30)
	tm.saveSettings()
	tm.typeLine(fmt.Sprintf(`X="%s"; ID=%s`, p.flags, id))

	tm.typeLine(`$AIRLOCK sandbox exec $X $ID -- vi /tmp/notes; echo "vi-""status=$?"`)
	tm.waitFor("~") // vi's empty lines: it drew a full screen
	tm.keys("i")
	tm.tmux("send-keys", "-t", "e2e", "-l", "typed-in-vi")
	tm.keys("Escape")
	tm.waitFor("typed-in-vi")
	tm.tmux("send-keys", "-t", "e2e", "-l", ":wq")
	tm.keys("Enter")
	if s := tm.waitFor("vi-status="); !strings.Contains(s, "vi-status=0") {
		t.Errorf("airlock's status after vi, want 0:\n%s", s)
	}
	tm.settingsSame("after vi")
	if got := p.airlock(t, "sandbox", "exec", "-T", id, "--", "cat", "/tmp/notes"); got != "typed-in-vi" {
		t.Errorf("the file vi wrote in the session: %q", got)
	}

	tm.interruptInside(`$AIRLOCK sandbox exec -it $X $ID -- sh /tmp/inside.sh; echo "inside-""status=$?"`, "/dev/pts/", "inside-status=")
	tm.settingsSame("after Ctrl-C")
	// The session outlived the exec: airlock was not what Ctrl-C stopped.
	if got := p.airlock(t, "sandbox", "exec", "-T", id, "--", "echo", "still-here"); got != "still-here" {
		t.Errorf("the session after Ctrl-C: %q", got)
	}

	// A timeout ends the command; the terminal is restored and the status is 124.
	if st := tm.run(`$AIRLOCK sandbox exec $X --timeout 2s $ID -- vi`); st != "124" {
		t.Errorf("timeout: status %s, want 124:\n%s", st, tm.screen())
	}
	tm.settingsSame("after a timeout")
	// -T keeps pipes even on a terminal.
	if st := tm.run(`$AIRLOCK sandbox exec -T $X $ID -- sh -c 'tty || echo "no-""terminal"'`); st != "0" || !strings.Contains(tm.screen(), "no-terminal") {
		t.Errorf("-T: status %s:\n%s", st, tm.screen())
	}
}

// TestSessionExecTIOCSTI: a session command that pushes a line into its terminal's input
// with TIOCSTI pushes it into the sandbox's terminal, which the sandbox reads, never into
// the host terminal, whose shell would run it after airlock exits. The host terminal's
// settings are the same after; airlock's SIGTERM while the command runs restores them too.
func TestSessionExecTIOCSTI(t *testing.T) {
	p := startSessionProxy(t)
	id := p.create(t, map[string]string{"sti.py": stiProbe})
	tm := newTerm(t, 120, 30)
	tm.saveSettings()
	tm.typeLine(fmt.Sprintf(`X="%s"; ID=%s`, p.flags, id))
	tm.tiocstiStaysInside(`$AIRLOCK sandbox exec -it $X $ID -- sh -c 'python3 /tmp/sti.py; read -r line; echo "sandbox-read:[$line]"'; echo "sti-""status=$?"`)

	tm.typeLine(`$AIRLOCK sandbox exec $X $ID -- sh -c 'echo run""ning; sleep 60'; echo "term-""status=$?"`)
	tm.waitFor("running") // the output: the typed line has run""ning
	tm.termAirlock()
	tm.settingsSame("after SIGTERM to airlock")
}

// TestSessionExecOSC52: a clipboard write (OSC 52) from a session command's terminal does
// not reach the host terminal (tmux, told to take OSC 52 into a paste buffer, gets none);
// with --raw-output it does: the test can fail.
func TestSessionExecOSC52(t *testing.T) {
	p := startSessionProxy(t)
	// "osc52-canary" in base64; the sequence is split across writes as a program may.
	script := "printf '\\033]52;c;b3NjNTIt'; sleep 0.1; printf 'Y2FuYXJ5\\007'; echo drawn\n"
	id := p.create(t, map[string]string{"osc52.sh": script})
	tm := newTerm(t, 100, 30)
	tm.typeLine(fmt.Sprintf(`X="%s"; ID=%s`, p.flags, id))
	if st := tm.run(`$AIRLOCK sandbox exec -t $X $ID -- sh /tmp/osc52.sh`); st != "0" {
		t.Fatalf("status %s:\n%s", st, tm.screen())
	}
	if b := tm.tmux("list-buffers"); strings.TrimSpace(b) != "" {
		t.Errorf("the sandbox wrote the host terminal's clipboard: buffers %q", b)
	}
	if st := tm.run(`$AIRLOCK sandbox exec -t --raw-output $X $ID -- sh /tmp/osc52.sh`); st != "0" {
		t.Fatalf("status %s:\n%s", st, tm.screen())
	}
	if b := tm.tmux("show-buffer"); b != "osc52-canary" {
		t.Errorf("with --raw-output the clipboard write should pass (the control): buffer %q", b)
	}
}

// TestSessionExecStdinBacklog: `airlock sandbox exec -i` of a command that does not read
// its input, sent more than the server holds for it: the command is killed, airlock says
// why on stderr and exits non-zero.
func TestSessionExecStdinBacklog(t *testing.T) {
	p := startSessionProxy(t)
	id := p.create(t, nil)
	args := append(append([]string{"sandbox", "exec", id}, strings.Fields(p.flags)...), "-i", "--", "sleep", "60")
	cmd := exec.Command(e2etest.AirlockBinary(t), args...)
	cmd.Stdin = strings.NewReader(strings.Repeat("x", 4<<20))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 ||
		!strings.Contains(stderr.String(), "stdin backlog over 1048576 bytes: the command is not reading its input") {
		t.Fatalf("airlock sandbox exec -i: %v, stderr %q: want a non-zero exit saying the backlog is over", err, stderr.String())
	}
	t.Logf("exit %d, stderr %q", ee.ExitCode(), stderr.String())
}
