package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSweepWorkspace: what the sandbox made where git reads files that were absent at
// start is moved aside (a link is moved, not followed); the rest is left alone.
func TestSweepWorkspace(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	ws := t.TempDir()
	for _, d := range []string{".git/objects", ".git/refs", "evil"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(ws, ".git", "HEAD"), "ref: refs/heads/main\n")
	write(t, filepath.Join(ws, ".git", "config"), "[core]\n\thooksPath = .hooks\n"+
		"[include]\n\tpath = ../conf/local.cfg\n\tpath = ../later/x.cfg\n")
	if err := os.Mkdir(filepath.Join(ws, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	prots, err := WorkspaceProtections(Options{Workspace: ws, ProtectedPaths: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	var absent, pinned []string
	for _, p := range prots {
		if p.Absent {
			absent = append(absent, p.Path)
		} else if !p.ReadOnly {
			pinned = append(pinned, p.Path)
		}
	}
	wantAbsent := []string{".hooks", ".git/hooks", "conf/local.cfg", "later/x.cfg", ".git/commondir", ".git/config.worktree"}
	slices.Sort(absent)
	slices.Sort(wantAbsent)
	if !slices.Equal(absent, wantAbsent) || !slices.Contains(pinned, "conf") {
		t.Errorf("absent %v, want %v; pinned %v, want conf among them", absent, wantAbsent, pinned)
	}
	// The sandbox's doing: a commondir, a hooks directory, config.worktree as a link, and
	// an earlier sweep's leftover in the way.
	write(t, filepath.Join(ws, ".git", "commondir"), "../evil\n")
	write(t, filepath.Join(ws, ".git", "commondir.airlock-removed"), "old\n")
	write(t, filepath.Join(ws, ".git", "hooks", "post-checkout"), "#!/bin/sh\n")
	if err := os.Symlink(filepath.Join(ws, "evil"), filepath.Join(ws, ".git", "config.worktree")); err != nil {
		t.Fatal(err)
	}
	// An included file and a hooks directory git would read, and a link on the way to
	// another included file.
	write(t, filepath.Join(ws, "conf", "local.cfg"), "[core]\n\tfsmonitor = evil\n")
	write(t, filepath.Join(ws, ".hooks", "pre-commit"), "#!/bin/sh\n")
	write(t, filepath.Join(ws, "evil", "x.cfg"), "[core]\n\tfsmonitor = evil\n")
	if err := os.Symlink("evil", filepath.Join(ws, "later")); err != nil {
		t.Fatal(err)
	}
	moved, err := sweepWorkspace(ws, prots)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(moved)
	if want := []string{".git/commondir", ".git/config.worktree", ".git/hooks", ".hooks", "conf/local.cfg", "later"}; !slices.Equal(moved, want) {
		t.Errorf("moved %v, want %v", moved, want)
	}
	if _, err := os.Lstat(filepath.Join(ws, "evil", "x.cfg")); err != nil {
		t.Errorf("the link's target was touched: %v", err)
	}
	for _, p := range []string{".git/commondir", ".git/hooks", ".git/config.worktree"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s is still there", p)
		}
	}
	for _, p := range []string{".git/commondir.airlock-removed-*", ".git/hooks.airlock-removed-*/post-checkout", ".git/config", "evil",
		".git/commondir.airlock-removed"} {
		if m, _ := filepath.Glob(filepath.Join(ws, p)); len(m) != 1 {
			t.Errorf("%s: %d found, want one", p, len(m))
		}
	}
	if moved, err := sweepWorkspace(ws, prots); err != nil || len(moved) != 0 {
		t.Errorf("second sweep: %v %v, want nothing", moved, err)
	}
}

// hostGitRuns runs git on the host in dir with a timeout (a FIFO where git reads would
// block it) and reports whether it finished; its exit status does not matter here.
func hostGitRuns(t *testing.T, dir string, args ...string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "safe.directory=*"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	cmd.WaitDelay = time.Second
	_, _ = cmd.CombinedOutput()
	return ctx.Err() == nil
}

// repoWorkspace is a workspace holding a repository with one commit, and its protections.
func repoWorkspace(t *testing.T) (string, []Protection) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	t.Setenv("HOME", t.TempDir())
	ws := t.TempDir()
	gitIn(t, ws, "init", "-q")
	write(t, filepath.Join(ws, "README"), "hello\n")
	gitIn(t, ws, "add", "README")
	gitIn(t, ws, "commit", "-q", "-m", "one")
	prots, err := WorkspaceProtections(Options{Workspace: ws, ProtectedPaths: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	return ws, prots
}

// TestSweepNeverRunsOutOfNames: the names things are moved aside to are fresh and random;
// a sandbox that took every predictable one keeps nothing. What cannot be moved aside or
// removed is an error naming it.
func TestSweepNeverRunsOutOfNames(t *testing.T) {
	ws, prots := repoWorkspace(t)
	for i := range 200 {
		n := ".git/commondir.airlock-removed"
		if i > 0 {
			n += fmt.Sprintf("-%d", i)
		}
		need(t, os.MkdirAll(filepath.Join(ws, n), 0o755))
	}
	write(t, filepath.Join(ws, ".git", "commondir"), "../evil\n")
	moved, err := sweepWorkspace(ws, prots)
	if err != nil || !slices.Contains(moved, ".git/commondir") {
		t.Fatalf("moved %v, %v; want .git/commondir", moved, err)
	}
	if _, err := os.Lstat(filepath.Join(ws, ".git", "commondir")); err == nil {
		t.Fatal(".git/commondir is still there")
	}
	if os.Geteuid() != 0 {
		return
	}
	// A mount point cannot be renamed or removed: the sweep says so.
	write(t, filepath.Join(ws, ".git", "config.worktree"), "[core]\n\tfsmonitor = x\n")
	target := filepath.Join(ws, ".git", "config.worktree")
	need(t, unix.Mount("/dev/null", target, "", unix.MS_BIND, ""))
	defer unix.Unmount(target, unix.MNT_DETACH)
	if _, err := sweepWorkspace(ws, prots); err == nil || !strings.Contains(err.Error(), ".git/config.worktree") {
		t.Errorf("sweeping a path that cannot be moved: %v, want an error naming it", err)
	}
}

// TestSweepNeutralisesNewGitDirs: git directories that were not there at start (a
// repository initialised in a new directory and added to the index as a gitlink, a
// submodule's git directory under .git/modules with a .git file pointing at it, a
// directory laid out as a bare repository, a worktree's git directory) lose their
// config, hooks, config.worktree and commondir; .git files pointing outside the start's
// git directories are moved aside; the host's git then runs nothing of theirs.
func TestSweepNeutralisesNewGitDirs(t *testing.T) {
	ws, prots := repoWorkspace(t)
	pwned := filepath.Join(t.TempDir(), "PWNED")
	monitor := "[core]\n\tfsmonitor = touch " + pwned + "\n"
	// (a) a new repository, with a planted fsmonitor, as a gitlink of the protected one.
	need(t, os.Mkdir(filepath.Join(ws, "sub"), 0o755))
	gitIn(t, filepath.Join(ws, "sub"), "init", "-q")
	gitIn(t, filepath.Join(ws, "sub"), "commit", "-q", "--allow-empty", "-m", "sub")
	f, err := os.OpenFile(filepath.Join(ws, "sub", ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	need(t, err)
	_, _ = f.WriteString(monitor)
	f.Close()
	write(t, filepath.Join(ws, "sub", ".git", "hooks", "post-checkout"), "#!/bin/sh\ntouch "+pwned+"\n")
	head, err := exec.Command("git", "-C", filepath.Join(ws, "sub"), "rev-parse", "HEAD").Output()
	need(t, err)
	gitIn(t, ws, "update-index", "--add", "--cacheinfo", "160000,"+strings.TrimSpace(string(head))+",sub")
	// (b) a new submodule git directory and the .git file of its checkout.
	need(t, os.MkdirAll(filepath.Join(ws, ".git", "modules"), 0o755))
	need(t, exec.Command("cp", "-a", filepath.Join(ws, "sub", ".git"), filepath.Join(ws, ".git", "modules", "m")).Run())
	write(t, filepath.Join(ws, ".git", "modules", "m", "config"), monitor+"\tworktree = ../../../m\n")
	write(t, filepath.Join(ws, "m", ".git"), "gitdir: ../.git/modules/m\n")
	gitIn(t, ws, "update-index", "--add", "--cacheinfo", "160000,"+strings.TrimSpace(string(head))+",m")
	// (c) a bare repository's layout; (d) a worktree's git directory.
	need(t, exec.Command("cp", "-a", filepath.Join(ws, "sub", ".git"), filepath.Join(ws, "bare")).Run())
	write(t, filepath.Join(ws, ".git", "worktrees", "w", "HEAD"), "ref: refs/heads/main\n")
	write(t, filepath.Join(ws, ".git", "worktrees", "w", "commondir"), "../..\n")
	write(t, filepath.Join(ws, ".git", "worktrees", "w", "config.worktree"), monitor)
	write(t, filepath.Join(ws, "w", ".git"), "gitdir: ../.git/worktrees/w\n")
	write(t, filepath.Join(ws, "evil-wt", ".git"), "gitdir: ../bare\n")

	moved, err := sweepWorkspace(ws, prots)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(moved)
	want := []string{".git/modules/m/config", ".git/modules/m/hooks", ".git/worktrees/w/config.worktree", "bare/config",
		"bare/hooks", "evil-wt/.git", "m/.git", "sub/.git/config", "sub/.git/hooks", "w/.git"}
	if !slices.Equal(moved, want) {
		t.Errorf("moved %v\nwant  %v", moved, want)
	}
	for _, dir := range []string{".", "sub", "m", "w", "bare"} {
		if !hostGitRuns(t, filepath.Join(ws, dir), "status") || !hostGitRuns(t, filepath.Join(ws, dir), "checkout", "-q", "-B", "x") {
			t.Errorf("git in %s did not finish", dir)
		}
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Error("the host's git ran what the sandbox planted")
	}
	// The start's repository is left as it is; a second sweep finds nothing more.
	if moved, err := sweepWorkspace(ws, prots); err != nil || len(moved) != 0 {
		t.Errorf("second sweep: %v %v", moved, err)
	}
}

// TestSweepRemovesWhatGitWouldFollowOrBlockOn: in every git directory, symbolic links and
// FIFOs, sockets or devices the start did not have are removed (git would follow them or
// block on them); those of the start stay.
func TestSweepRemovesWhatGitWouldFollowOrBlockOn(t *testing.T) {
	ws, _ := repoWorkspace(t)
	gitIn(t, ws, "submodule", "add", "-q", filepath.Join(ws, ".git"), "deps/self")
	keep := filepath.Join(ws, ".git", "keep-fifo")
	need(t, unix.Mkfifo(keep, 0o644))
	prots, err := WorkspaceProtections(Options{Workspace: ws, ProtectedPaths: []string{}})
	need(t, err)
	var made []string
	for _, p := range []string{".git/objects/info/alternates", ".git/packed-refs", ".git/refs/tags/t",
		".git/modules/deps/self/info/exclude", ".git/FETCH_HEAD", "deps/self/.git.x/../.git"} {
		p = filepath.Clean(p)
		_ = os.Remove(filepath.Join(ws, p))
		if p == "deps/self/.git" {
			continue // a protected .git file: the sandbox could not replace it
		}
		need(t, os.MkdirAll(filepath.Dir(filepath.Join(ws, p)), 0o755))
		need(t, unix.Mkfifo(filepath.Join(ws, p), 0o644))
		made = append(made, p)
	}
	need(t, os.Remove(filepath.Join(ws, ".git", "index")))
	need(t, os.Symlink("/dev/zero", filepath.Join(ws, ".git", "index")))
	need(t, os.Symlink("/etc/passwd", filepath.Join(ws, ".git", "refs", "heads", "zero")))
	made = append(made, ".git/index", ".git/refs/heads/zero")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	need(t, err)
	need(t, unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(ws, ".git", "ORIG_HEAD")}))
	unix.Close(fd)
	made = append(made, ".git/ORIG_HEAD")

	moved, err := sweepWorkspace(ws, prots)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(moved)
	slices.Sort(made)
	if !slices.Equal(moved, made) {
		t.Errorf("removed %v\nwant    %v", moved, made)
	}
	for _, p := range made {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s is still there", p)
		}
	}
	if _, err := os.Lstat(keep); err != nil {
		t.Errorf("the start's FIFO was removed: %v", err)
	}
	need(t, os.Remove(keep))
	if !hostGitRuns(t, ws, "status") || !hostGitRuns(t, ws, "log", "--all", "-1") {
		t.Error("the host's git did not finish")
	}
}
