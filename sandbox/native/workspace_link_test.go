package native_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

// TestWorkspaceLinkSwappedInIsNotMounted: a session's workspace is checked against
// sessions.workspace_roots with its links resolved, and that resolved path is what the
// backend gets. Whoever may write a directory on it can still swap a link in afterwards
// (seen: racing creates, a root-owned host directory mounted read-write as the workspace,
// its root files shown as the sandbox user's, written through). A workspace path with a
// link in it, which is what the backend sees after such a swap, is refused: no sandbox, the
// link's target untouched.
func TestWorkspaceLinkSwappedInIsNotMounted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("native sandboxes need root")
	}
	base := t.TempDir()
	victim := filepath.Join(base, "victim") // root's, 0755, a 0600 file in it
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "secret"), []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The checked path was base/a/victim, a directory of the user's; a is now a link.
	if err := os.Symlink(base, filepath.Join(base, "a")); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(base, "a", "victim")
	for _, mode := range []sandbox.WorkspaceMode{sandbox.WorkspaceRW, sandbox.WorkspaceCoW} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := sandbox.New(ctx, sandbox.Options{ID: "sbx-ws-link-" + string(mode), Workspace: ws, WorkspaceMode: mode,
			Backend: &native.Native{StateDir: filepath.Join(base, "state")}})
		cancel()
		if err == nil {
			res, _ := s.Run(context.Background(), sandbox.Command{Args: []string{"sh", "-c", "cat /workspace/secret; touch /workspace/written"}})
			_ = s.Close(context.Background())
			t.Errorf("%s: a workspace path with a link in it was mounted (exit %d)", mode, res.ExitCode)
		} else if !errors.Is(err, syscall.ELOOP) && !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("%s: %v, want a refusal saying the path has a link in it", mode, err)
		}
		if _, err := os.Stat(filepath.Join(victim, "written")); err == nil {
			t.Errorf("%s: the sandbox wrote into the link's target", mode)
		}
	}
}

// TestRootfsLinkSwappedInIsNotMounted: the same for a root file system of its own (a
// session's rootfs, checked under sessions.rootfs_roots): through a path with a link in it
// (seen: racing creates, the host's /usr the sandbox's root) no sandbox is made.
func TestRootfsLinkSwappedInIsNotMounted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("native sandboxes need root")
	}
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "other", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "other"), filepath.Join(base, "a")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sandbox.New(ctx, sandbox.Options{ID: "sbx-rootfs-link", Rootfs: filepath.Join(base, "a"),
		Backend: &native.Native{StateDir: filepath.Join(base, "state")}})
	if err == nil {
		_ = s.Close(context.Background())
		t.Fatalf("a root file system path with a link in it was mounted")
	}
	if !errors.Is(err, syscall.ELOOP) && !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("%v, want a refusal saying the path has a link in it", err)
	}
}
