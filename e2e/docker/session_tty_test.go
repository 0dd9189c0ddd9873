//go:build e2e

package docker_test

import (
	"context"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/session"
)

// lockedText is output a test waits on while it is written.
type lockedText struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedText) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedText) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedText) waitFor(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(l.String(), want) {
			return
		}
	}
	t.Fatalf("the terminal never showed %q; it shows %q", want, l.String())
}

// TestDockerSessionTTY: a Docker session's exec with "tty": true runs on a terminal of the
// container's devpts at the size asked for; a resize message reaches the command (stty
// size after SIGWINCH); Ctrl-C typed interrupts it inside; its status is passed through.
func TestDockerSessionTTY(t *testing.T) {
	m, err := session.New(session.Options{
		StateDir: filepath.Join(t.TempDir(), "sessions"),
		Backend: func(context.Context, string, string) (sandbox.Backend, error) {
			return newBackend(t, docker.Options{Mode: docker.ModeNetNS}), nil
		},
	}, session.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	m.Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(func() {
		srv.Close()
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	c := &session.Client{BaseURL: srv.URL}
	ctx := context.Background()
	info, err := c.Create(ctx, session.Spec{Backend: "docker", Image: testImage})
	if err != nil {
		t.Fatal(err)
	}
	// An Engine before API 1.42 sets the size just after the start: read it a moment later.
	script := `tty; sleep 0.3; stty size
trap 'echo "resized $(stty size)"' WINCH
trap 'echo interrupted; exit 3' INT
echo ready
while :; do sleep 0.1; done
`
	keys, typed := io.Pipe()
	defer typed.Close()
	resize := make(chan sandbox.WindowSize, 1)
	out := &lockedText{}
	type done struct {
		res session.ExecResult
		err error
	}
	ch := make(chan done, 1)
	go func() {
		res, err := c.ExecTTY(ctx, info.ID, session.ExecRequest{Argv: []string{"sh", "-c", script},
			TTYSize: &session.Resize{Rows: 30, Cols: 100}}, keys, out, resize)
		ch <- done{res, err}
	}()
	out.waitFor(t, "ready")
	if s := out.String(); !strings.Contains(s, "/dev/pts/") || !strings.Contains(s, "30 100") {
		t.Errorf("want a terminal of the container at 30×100: %q", s)
	}
	resize <- sandbox.WindowSize{Rows: 20, Cols: 70}
	out.waitFor(t, "resized 20 70")
	if _, err := typed.Write([]byte{3}); err != nil {
		t.Fatal(err)
	}
	d := <-ch
	if d.err != nil || d.res.ExitCode != 3 || !strings.Contains(out.String(), "interrupted") || d.res.StderrBytes != 0 {
		t.Errorf("Ctrl-C: want the INT trap and status 3 on one stream: %+v %v %q", d.res, d.err, out.String())
	}
}
