package native_test

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/sandbox"
)

// screen collects a terminal's output for a test to wait on.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor waits until the output holds want, failing the test after a generous deadline.
func (s *screen) waitFor(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(s.String(), want) {
			return
		}
	}
	t.Fatalf("the terminal never showed %q; it showed %q", want, s.String())
}

// TestTTYIsTheSandboxesOwn: a command run with a TTY has a terminal on stdin, stdout and
// stderr, of the sandbox's own devpts (its first terminal, owned by the sandbox user,
// on a devpts other than the host's), leads its session with it as controlling terminal,
// starts at the size asked, and its stderr reaches the one output stream.
func TestTTYIsTheSandboxesOwn(t *testing.T) {
	s := newSandbox(t, sandbox.Options{})
	var host unix.Stat_t
	if err := unix.Stat("/dev/pts", &host); err != nil {
		t.Fatal(err)
	}
	script := `[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo all-terminals
tty
stat -c 'dev=%d owner=%u' "$(tty)"
stty size
set -- $(cut -d' ' -f5-8 /proc/self/stat) # cut's process group, session, terminal, foreground group
[ "$1" = "$2" ] && [ "$3" != 0 ] && [ "$4" = "$1" ] && echo session-leader-in-foreground
echo "term=$TERM"
echo to-stderr >&2`
	scr := &screen{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", script}, Stdout: scr,
		TTY: &sandbox.TTY{Term: "vt100", Size: sandbox.WindowSize{Rows: 30, Cols: 100}}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	out := strings.ReplaceAll(string(res.Stdout), "\r\n", "\n")
	for _, want := range []string{"all-terminals\n", "/dev/pts/0\n", "owner=1000\n", "30 100\n",
		"session-leader-in-foreground\n", "term=vt100\n", "to-stderr\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "dev="+strconv.FormatUint(host.Dev, 10)+" ") {
		t.Errorf("the terminal is on the host's devpts (dev %d):\n%s", host.Dev, out)
	}
	if len(res.Stderr) != 0 {
		t.Errorf("Result.Stderr = %q, want empty: a terminal's output is one stream", res.Stderr)
	}
	if scr.String() != string(res.Stdout) {
		t.Errorf("streamed %q, captured %q", scr.String(), res.Stdout)
	}
	if res.ExitCode != 0 {
		t.Errorf("exit %d", res.ExitCode)
	}
}

// TestTTYResizeAndInterrupt: a new size reaches the command (SIGWINCH, and the size it
// reads), and Ctrl-C typed at the terminal interrupts the command's foreground process
// group inside; the run ends with the command's own status.
func TestTTYResizeAndInterrupt(t *testing.T) {
	s := newSandbox(t, sandbox.Options{})
	script := `trap 'echo "size $(stty size)"' WINCH
trap 'echo interrupted; exit 7' INT
echo ready
while :; do sleep 0.05; done`
	inR, inW := io.Pipe()
	defer inW.Close()
	resize := make(chan sandbox.WindowSize, 1)
	scr := &screen{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		res sandbox.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", script}, Stdin: inR, Stdout: scr,
			TTY: &sandbox.TTY{Size: sandbox.WindowSize{Rows: 24, Cols: 80}, Resize: resize}})
		done <- result{res, err}
	}()
	scr.waitFor(t, "ready")
	resize <- sandbox.WindowSize{Rows: 40, Cols: 132}
	scr.waitFor(t, "size 40 132")
	if _, err := inW.Write([]byte{0x03}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	if !strings.Contains(string(r.res.Stdout), "interrupted") || r.res.ExitCode != 7 {
		t.Fatalf("exit %d, output %q; want the INT trap's exit 7", r.res.ExitCode, r.res.Stdout)
	}
}

// TestTTYTakesFromThePtyBound: the terminal of a run is one of the sandbox's Ptys; when
// the sandbox holds them all, a run with a TTY is refused and says why.
func TestTTYTakesFromThePtyBound(t *testing.T) {
	s := newSandbox(t, sandbox.Options{Ptys: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", "tty"}, TTY: &sandbox.TTY{}})
	if err != nil || !strings.Contains(string(res.Stdout), "/dev/pts/0") {
		t.Fatalf("first terminal: %v, output %q", err, res.Stdout)
	}
	// A background process keeps a terminal of its own open: the bound is reached.
	inR, inW := io.Pipe()
	defer inW.Close()
	scr := &screen{}
	go func() {
		_, _ = s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", "echo holding; cat"}, Stdin: inR, Stdout: scr, TTY: &sandbox.TTY{}})
	}()
	scr.waitFor(t, "holding")
	_, err = s.Run(ctx, sandbox.Command{Args: []string{"true"}, TTY: &sandbox.TTY{}})
	if err == nil || !strings.Contains(err.Error(), "--ptys") {
		t.Fatalf("Run past the bound: %v, want a refusal naming --ptys", err)
	}
	_, _ = inW.Write([]byte{0x04}) // Ctrl-D: cat ends
}
