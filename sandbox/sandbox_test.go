package sandbox

import (
	"strings"
	"testing"
)

func TestRunEcho(t *testing.T) {
	s := newTestSandbox(t, Options{})
	res := run(t, s, "sh", "-c", "echo hello; echo oops >&2; id -u; exit 3")
	if got, want := string(res.Stdout), "hello\n1000\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := strings.TrimSpace(string(res.Stderr)), "oops"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	if res.ExitCode != 3 {
		t.Errorf("exit code = %d, want 3", res.ExitCode)
	}
}
