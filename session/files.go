package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
)

// Files are put and got by commands run inside the sandbox, as its user: a path reaches
// what a command of the sandbox reaches, and no more (a link to outside the workspace
// leads where the sandbox's own view leads, never to the host behind it).

// CheckPath accepts a clean absolute path under /workspace (when the session has one) or
// /tmp, and nothing else.
func (s *Session) CheckPath(p string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: path %q: %s; want a path under /workspace or /tmp", ErrBadRequest, p, why)
	}
	switch {
	case p == "":
		return bad("empty")
	case strings.IndexByte(p, 0) >= 0:
		return bad("holds a NUL byte")
	case !path.IsAbs(p):
		return bad("not absolute")
	case path.Clean(p) != p:
		return bad("not clean (.., . or repeated /)")
	}
	if strings.HasPrefix(p, "/tmp/") {
		return nil
	}
	if strings.HasPrefix(p, "/workspace/") {
		if s.spec.Workspace == "" {
			return bad("this sandbox has no workspace")
		}
		return nil
	}
	return bad("outside the workspace and /tmp")
}

// PutFile writes data to p inside session id: written beside it, then renamed into
// place, so that a reader never sees half a file.
func (m *Manager) PutFile(ctx context.Context, id, p string, data []byte) error {
	s, err := m.Get(id)
	if err != nil {
		return err
	}
	if err := s.CheckPath(p); err != nil {
		return err
	}
	if int64(len(data)) > m.opts.MaxFileBytes {
		return fmt.Errorf("%w: %d bytes; files are at most %d bytes (sessions.max_file_bytes)", ErrTooLarge, len(data), m.opts.MaxFileBytes)
	}
	s.touch()
	var stderr bytes.Buffer
	res, err := s.sb.Run(ctx, sandbox.Command{
		Args:  []string{"/bin/sh", "-c", `t="$1.airlock-put.$$" && cat > "$t" && mv -f -- "$t" "$1" || { rm -f -- "$t"; exit 1; }`, "airlock-put", p},
		Stdin: bytes.NewReader(data), Stderr: &stderr, Dir: "/",
	})
	return fileResult("write", p, res, err, stderr.String())
}

// GetFile reads p inside session id, at most sessions.max_file_bytes.
func (m *Manager) GetFile(ctx context.Context, id, p string) ([]byte, error) {
	s, err := m.Get(id)
	if err != nil {
		return nil, err
	}
	if err := s.CheckPath(p); err != nil {
		return nil, err
	}
	s.touch()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, fileOpTimeout)
	defer cancel()
	lim := &limitWriter{w: &stdout, n: m.opts.MaxFileBytes, cancel: cancel}
	res, err := s.sb.Run(ctx, sandbox.Command{Args: []string{"cat", "--", p}, Stdout: lim, Stderr: &stderr, Dir: "/", OutputLimit: 1})
	if lim.over {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes (sessions.max_file_bytes)", ErrTooLarge, p, m.opts.MaxFileBytes)
	}
	if err := fileResult("read", p, res, err, stderr.String()); err != nil {
		return nil, err
	}
	return stdout.Bytes(), nil
}

// ListFiles lists directory p inside session id (ls -la).
func (m *Manager) ListFiles(ctx context.Context, id, p string) ([]byte, error) {
	s, err := m.Get(id)
	if err != nil {
		return nil, err
	}
	if p != "/workspace" && p != "/tmp" {
		if err := s.CheckPath(p); err != nil {
			return nil, err
		}
	}
	s.touch()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, fileOpTimeout)
	defer cancel()
	lim := &limitWriter{w: &stdout, n: m.opts.MaxFileBytes, cancel: cancel}
	res, err := s.sb.Run(ctx, sandbox.Command{Args: []string{"ls", "-la", "--", p}, Stdout: lim, Stderr: &stderr, Dir: "/", OutputLimit: 1})
	if lim.over {
		return nil, fmt.Errorf("%w: the listing of %s is larger than %d bytes (sessions.max_file_bytes)", ErrTooLarge, p, m.opts.MaxFileBytes)
	}
	if err := fileResult("list", p, res, err, stderr.String()); err != nil {
		return nil, err
	}
	return stdout.Bytes(), nil
}

func fileResult(verb, p string, res sandbox.Result, err error, stderr string) error {
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, p, err)
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(stderr)
		if len(msg) > 512 {
			msg = msg[:512]
		}
		if strings.Contains(msg, "No such file") || strings.Contains(msg, "Not a directory") {
			return fmt.Errorf("%w: %s %s: %s", ErrNotFound, verb, p, msg)
		}
		return fmt.Errorf("%w: %s %s: %s", ErrConflict, verb, p, msg)
	}
	return nil
}

// limitWriter keeps at most n bytes; when more come it notes it and stops the command
// (a file that never ends, /dev/zero or a FIFO, must not keep airlock reading).
type limitWriter struct {
	w      *bytes.Buffer
	n      int64
	over   bool
	cancel context.CancelFunc
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(l.w.Len()+len(p)) > l.n {
		l.over = true
		if l.cancel != nil {
			l.cancel()
		}
		return 0, errTooLarge
	}
	return l.w.Write(p)
}

var errTooLarge = errors.New("over sessions.max_file_bytes")

// fileOpTimeout bounds a file read or listing: a FIFO that never ends is not waited for.
const fileOpTimeout = 30 * time.Second
