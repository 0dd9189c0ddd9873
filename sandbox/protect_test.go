package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main",
		"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWorkspaceProtectionsFindEveryRepository builds, with real git, a workspace holding a
// repository with a submodule (and one whose checkout is gone), a linked worktree, a nested repository, a bare one, a
// hooks directory named by core.hooksPath, an included config file and editor settings,
// and checks what is protected.
func TestWorkspaceProtectionsFindEveryRepository(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	t.Setenv("HOME", t.TempDir()) // no host config of the test's user
	ws := t.TempDir()
	lib := t.TempDir() // the submodule's origin, outside the workspace
	gitIn(t, lib, "init", "-q")
	gitIn(t, lib, "commit", "-q", "--allow-empty", "-m", "lib")
	gitIn(t, ws, "init", "-q")
	gitIn(t, ws, "commit", "-q", "--allow-empty", "-m", "one")
	gitIn(t, ws, "submodule", "add", "-q", lib, "deps/lib")
	gitIn(t, ws, "submodule", "add", "-q", lib, "deps/gone")
	gitIn(t, ws, "commit", "-q", "-m", "sub")
	gitIn(t, ws, "submodule", "deinit", "-q", "-f", "deps/gone") // its git directory stays
	gitIn(t, ws, "worktree", "add", "-q", "wt")
	gitIn(t, ws, "config", "core.hooksPath", ".githooks")
	write(t, filepath.Join(ws, ".githooks", "pre-commit"), "#!/bin/sh\n")
	write(t, filepath.Join(ws, "shared.gitconfig"), "[core]\n\tfsmonitor = true\n")
	gitIn(t, ws, "config", "include.path", "../shared.gitconfig")
	if err := os.MkdirAll(filepath.Join(ws, "vendor", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	gitIn(t, filepath.Join(ws, "vendor", "x"), "init", "-q")
	bare := filepath.Join(ws, "remote.git")
	if err := os.Mkdir(bare, 0o755); err != nil {
		t.Fatal(err)
	}
	gitIn(t, bare, "init", "-q", "--bare")
	write(t, filepath.Join(ws, ".vscode", "tasks.json"), "{}")
	write(t, filepath.Join(ws, ".envrc"), "")

	prots, err := WorkspaceProtections(Options{Workspace: ws, WorkspaceMode: WorkspaceRW})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	absent := map[string]bool{}
	for i, p := range prots {
		if p.Absent {
			absent[p.Path] = true
			if p.ReadOnly {
				t.Errorf("%s: absent and read-only", p.Path)
			}
			continue
		}
		got[p.Path] = p.ReadOnly
		if d := filepath.Dir(p.Path); d != "." {
			if _, ok := got[d]; !ok {
				t.Errorf("%s comes before its parent %s", p.Path, d)
			}
		}
		if i > 0 && prots[i-1].Path == p.Path {
			t.Errorf("%s twice", p.Path)
		}
	}
	want := map[string]bool{ // path → read-only; false: pinned (a mount point, writable)
		".git": false, ".git/hooks": true, ".git/config": true,
		".git/modules": false, ".git/modules/deps": false, ".git/modules/deps/lib": false,
		".git/modules/deps/lib/hooks": true, ".git/modules/deps/lib/config": true,
		".git/modules/deps/gone": false, ".git/modules/deps/gone/hooks": true, ".git/modules/deps/gone/config": true,
		".git/worktrees": false, ".git/worktrees/wt": false, ".git/worktrees/wt/commondir": true,
		"deps": false, "deps/lib": false, "deps/lib/.git": true, // the submodule's .git file
		"wt": false, "wt/.git": true,
		".githooks": true, "shared.gitconfig": true,
		"vendor": false, "vendor/x": false, "vendor/x/.git": false, "vendor/x/.git/hooks": true, "vendor/x/.git/config": true,
		"remote.git": false, "remote.git/hooks": true, "remote.git/config": true,
		".vscode": true, ".envrc": true, ".gitmodules": true,
	}
	for p, ro := range want {
		if gro, ok := got[p]; !ok || gro != ro {
			t.Errorf("%s: protected %v read-only %v, want read-only %v", p, ok, gro, ro)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s protected, not expected", p)
		}
	}
	// What git would read in a git directory but is not there is listed for the sweep.
	for _, p := range []string{".git/commondir", ".git/config.worktree", ".git/modules/deps/lib/commondir",
		"vendor/x/.git/commondir", "remote.git/commondir", ".git/worktrees/wt/config.worktree"} {
		if !absent[p] {
			t.Errorf("%s: not listed as absent", p)
		}
	}

	// A copy-on-write workspace is protected too (its patch would carry the change); a
	// read-only one needs nothing.
	if cow, err := WorkspaceProtections(Options{Workspace: ws, WorkspaceMode: WorkspaceCoW}); err != nil || !slices.Equal(cow, prots) {
		t.Errorf("cow: %v %v, want the same protections", cow, err)
	}
	if ro, err := WorkspaceProtections(Options{Workspace: ws, WorkspaceMode: WorkspaceRO}); err != nil || ro != nil {
		t.Errorf("ro: %v %v, want none", ro, err)
	}
}

func TestWorkspaceProtectionsPaths(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	ws := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(ws, "tools", "run.sh"), "")
	write(t, filepath.Join(ws, "real", "settings.json"), "")
	write(t, filepath.Join(outside, "settings.json"), "")
	if err := os.Symlink("real", filepath.Join(ws, ".vscode")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, ".idea")); err != nil {
		t.Fatal(err)
	}
	// A .git file pointing to a git directory elsewhere in the workspace.
	write(t, filepath.Join(ws, "gitdirs", "a", "HEAD"), "ref: refs/heads/main\n")
	write(t, filepath.Join(ws, "gitdirs", "a", "config"), "[core]\n\thooksPath = /nonexistent\n")
	write(t, filepath.Join(ws, "gitdirs", "a", "hooks", "post-checkout"), "")
	write(t, filepath.Join(ws, "checkout", ".git"), "gitdir: ../gitdirs/a\n")
	prots, err := WorkspaceProtections(Options{Workspace: ws, ProtectedPaths: []string{"tools/run.sh", ".vscode", ".idea", "absent"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range prots {
		if !p.Absent {
			got = append(got, p.Path+map[bool]string{true: " ro", false: ""}[p.ReadOnly])
		}
	}
	want := []string{"checkout", "gitdirs", "real ro", "tools", "checkout/.git ro", "gitdirs/a",
		"tools/run.sh ro", "gitdirs/a/config ro", "gitdirs/a/hooks ro"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	// An empty list protects git's files alone; a path outside the workspace is refused.
	prots, err = WorkspaceProtections(Options{Workspace: ws, ProtectedPaths: []string{}})
	prots = slices.DeleteFunc(prots, func(p Protection) bool { return p.Absent })
	if err != nil || len(prots) != len(want)-3 {
		t.Errorf("empty list: %v %v", prots, err)
	}
	for _, bad := range []string{"../x", "/etc", "", ".", "a/../../b"} {
		if _, err := WorkspaceProtections(Options{Workspace: ws, ProtectedPaths: []string{bad}}); err == nil {
			t.Errorf("protected path %q accepted", bad)
		}
	}
}

func TestWorkspaceProtectionsBounded(t *testing.T) {
	ws := t.TempDir()
	for _, d := range []string{"a/b", "c/d", "e"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := maxScanDirs
	maxScanDirs = 4
	defer func() { maxScanDirs = old }()
	_, err := WorkspaceProtections(Options{Workspace: ws, ProtectedPaths: []string{}})
	if err == nil || !strings.Contains(err.Error(), "more than 4 directories") {
		t.Errorf("got %v, want the scan bound named", err)
	}
}

func need(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
