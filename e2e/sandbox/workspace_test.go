//go:build e2e

package sandbox_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
)

// The host runs what a read-write workspace holds: git hooks and config, editor tasks.
// These tests give a sandbox a workspace with a repository, a submodule (and a submodule
// whose checkout is gone), a linked worktree, a nested repository, a core.hooksPath
// directory, an included config file, editor settings and a configured extra path, let it
// try to change each of them, and check the host's copy and what the host's git runs.

func hostGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main",
		"-c", "user.name=host", "-c", "user.email=host@example.com"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// hostToolsWorkspace builds the workspace on the host; origin (outside it) is the
// submodules' origin.
func hostToolsWorkspace(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	ws, origin := t.TempDir(), t.TempDir()
	hostGit(t, origin, "init", "-q")
	hostGit(t, origin, "commit", "-q", "--allow-empty", "-m", "lib")
	hostGit(t, ws, "init", "-q")
	writeFile(t, filepath.Join(ws, "README"), "hello\n", 0o644)
	hostGit(t, ws, "add", "README")
	hostGit(t, ws, "commit", "-q", "-m", "first")
	hostGit(t, ws, "submodule", "add", "-q", origin, "deps/lib")
	hostGit(t, ws, "submodule", "add", "-q", origin, "deps/gone")
	hostGit(t, ws, "commit", "-q", "-m", "submodules")
	hostGit(t, ws, "submodule", "deinit", "-q", "-f", "deps/gone")
	hostGit(t, ws, "worktree", "add", "-q", "wt")
	// git 2.39 writes the host's absolute path in a worktree's .git file, which does not
	// exist inside the sandbox; a relative one works on both sides.
	writeFile(t, filepath.Join(ws, "wt", ".git"), "gitdir: ../.git/worktrees/wt\n", 0o644)
	hostGit(t, ws, "config", "core.hooksPath", ".githooks")
	writeFile(t, filepath.Join(ws, ".githooks", "pre-commit"), "#!/bin/sh\n", 0o755)
	writeFile(t, filepath.Join(ws, "shared.gitconfig"), "[user]\n\tname = shared\n", 0o644)
	hostGit(t, ws, "config", "include.path", "../shared.gitconfig")
	if err := os.MkdirAll(filepath.Join(ws, "vendor", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	hostGit(t, filepath.Join(ws, "vendor", "x"), "init", "-q")
	hostGit(t, filepath.Join(ws, "vendor", "x"), "commit", "-q", "--allow-empty", "-m", "x")
	writeFile(t, filepath.Join(ws, ".vscode", "tasks.json"), "{}\n", 0o644)
	writeFile(t, filepath.Join(ws, ".envrc"), "export A=1\n", 0o644)
	writeFile(t, filepath.Join(ws, "tools", "ci.sh"), "#!/bin/sh\n", 0o755)
	return ws
}

// protectedOnHost are the workspace's paths whose content and names must not change.
var protectedOnHost = []string{
	".git/hooks", ".git/config", ".git/modules/deps/lib/hooks", ".git/modules/deps/lib/config",
	".git/modules/deps/gone/hooks", ".git/modules/deps/gone/config", ".git/worktrees/wt/commondir",
	"deps/lib/.git", "wt/.git", ".githooks", "shared.gitconfig", "vendor/x/.git/hooks",
	"vendor/x/.git/config", ".vscode", ".envrc", ".gitmodules", "tools/ci.sh",
}

// snapshot is every file under the protected paths with its mode and content hash.
func snapshot(t *testing.T, ws string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, p := range protectedOnHost {
		err := filepath.WalkDir(filepath.Join(ws, p), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(ws, path)
			fi, err := os.Lstat(path)
			if err != nil {
				return err
			}
			v := fi.Mode().String()
			if fi.Mode().IsRegular() {
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				sum := sha256.Sum256(b)
				v += " " + hex.EncodeToString(sum[:8])
			}
			m[rel] = v
			return nil
		})
		if err != nil {
			t.Fatalf("snapshot %s: %v", p, err)
		}
	}
	return m
}

// hostToolsAttacks are shell commands that would plant something the host runs; each
// prints ESCAPED when it succeeds. pwned is the host path a planted hook would create.
func hostToolsAttacks(pwned string) []string {
	hook := "#!/bin/sh\\ntouch " + pwned + "\\n"
	a := []string{}
	add := func(cmd string) {
		a = append(a, "("+cmd+") 2>/dev/null && printf 'ESCAPED: %s\\n' '"+strings.ReplaceAll(cmd, "'", "")+"'")
	}
	for _, gd := range []string{".git", ".git/modules/deps/lib", ".git/modules/deps/gone", "vendor/x/.git"} {
		add("printf '" + hook + "' > " + gd + "/hooks/post-checkout")
		add("printf '" + hook + "' > " + gd + "/hooks/new-hook")
		add("printf '[core]\\n\\tfsmonitor = touch " + pwned + "\\n' >> " + gd + "/config")
		add("rm -rf " + gd + "/hooks")
		add("mv " + gd + "/hooks " + gd + "/hooks.old")
		add("mv " + gd + "/config " + gd + "/config.old")
		add("rm -f " + gd + "/config")
		add("mv " + gd + " " + gd + ".old")
	}
	for _, cmd := range []string{
		"git config core.fsmonitor 'touch " + pwned + "'",
		"git config core.hooksPath /workspace/evil",
		"mv .git/modules .git/modules.old",
		"mv vendor vendor.old", "mv vendor/x vendor/y",
		"mv deps deps.old", "mv deps/lib deps/lib.old",
		"echo 'gitdir: /workspace/evil' > deps/lib/.git", "rm -f deps/lib/.git", "mv deps/lib/.git deps/lib/git",
		"echo 'gitdir: /workspace/evil' > wt/.git", "mv wt wt.old",
		"echo ../../../evil > .git/worktrees/wt/commondir",
		"printf '" + hook + "' > .githooks/pre-commit", "printf '" + hook + "' > .githooks/post-checkout",
		"rm -rf .githooks", "mv .githooks hooks.old",
		"printf '[core]\\n\\tfsmonitor = x\\n' >> shared.gitconfig", "mv shared.gitconfig s.old",
		"echo '{}' > .vscode/tasks.json", "echo '{}' > .vscode/settings.json", "rm -rf .vscode",
		"echo 'touch " + pwned + "' >> .envrc", "mv .envrc envrc.old",
		"echo 'touch " + pwned + "' >> tools/ci.sh", "mv tools tools.old", "rm -f tools/ci.sh",
		"echo '[submodule \"x\"]' >> .gitmodules",
	} {
		add(cmd)
	}
	return a
}

// gitWork is ordinary git work that must still succeed in a protected workspace.
const gitWork = `set -e
export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@sandbox GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@sandbox
cd /workspace
echo change >> README && git add README && git commit -qm 'from the sandbox'
git branch feature && git checkout -q feature && git commit -q --allow-empty -m 'on feature' && git checkout -q main
git tag v1 && git stash list >/dev/null && git status --short >/dev/null
git log --oneline | head -1
(cd deps/lib && git commit -q --allow-empty -m 'in the submodule')
(cd wt && git commit -q --allow-empty -m 'in the worktree')
(cd vendor/x && git commit -q --allow-empty -m 'in the nested repository')
echo GIT-WORK-OK
`

// checkHostGitRunsNothing runs the host's git in each repository of the workspace (the
// checkout and status that ran the planted hook and fsmonitor in the finding) and checks
// that nothing the sandbox planted ran.
func checkHostGitRunsNothing(t *testing.T, ws, pwned string) {
	t.Helper()
	for _, dir := range []string{".", "deps/lib", "wt", "vendor/x"} {
		d := filepath.Join(ws, dir)
		hostGit(t, d, "-c", "safe.directory=*", "status", "--short")
		hostGit(t, d, "-c", "safe.directory=*", "checkout", "-q", "-B", "host-check")
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Errorf("the host's git ran something the sandbox planted (%s exists)", pwned)
	}
}

func TestHostToolsFilesAreReadOnly(t *testing.T) {
	for _, mode := range []sandbox.WorkspaceMode{sandbox.WorkspaceRW, sandbox.WorkspaceCoW} {
		t.Run(string(mode), func(t *testing.T) {
			ws := hostToolsWorkspace(t)
			before := snapshot(t, ws)
			pwned := filepath.Join(t.TempDir(), "PWNED")
			s := newSandbox(t, sandbox.Options{Workspace: ws, WorkspaceMode: mode, Pids: 128,
				ProtectedPaths: append(slices.Clone(sandbox.DefaultProtectedPaths), "tools/ci.sh")})
			res := run(t, s, "cd /workspace; "+strings.Join(hostToolsAttacks(pwned), "; ")+"; true")
			for _, line := range strings.Split(string(res.Stdout), "\n") {
				if strings.HasPrefix(line, "ESCAPED") {
					t.Errorf("%s", line)
				}
			}
			work := run(t, s, gitWork)
			if !strings.Contains(string(work.Stdout), "GIT-WORK-OK") {
				t.Errorf("git work in the workspace failed: exit %d\n%s%s", work.ExitCode, work.Stdout, work.Stderr)
			}
			if mode == sandbox.WorkspaceCoW {
				for _, c := range mustChanges(t, s) {
					for _, p := range protectedOnHost {
						if c.Path == p || strings.HasPrefix(c.Path, p+"/") {
							t.Errorf("the copy-on-write changes carry %s (%s)", c.Path, c.Kind)
						}
					}
				}
			}
			if err := s.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			after := snapshot(t, ws)
			for k, v := range before {
				if after[k] != v {
					t.Errorf("host %s: %q, was %q", k, after[k], v)
				}
			}
			for k := range after {
				if _, ok := before[k]; !ok {
					t.Errorf("host %s: new", k)
				}
			}
			if mode == sandbox.WorkspaceRW {
				// The sandbox's commits are the host's: the workspace stays writable.
				if got := hostGit(t, ws, "log", "-1", "--format=%s", "main"); got != "from the sandbox" {
					t.Errorf("host main is at %q, want the sandbox's commit", got)
				}
			}
			checkHostGitRunsNothing(t, ws, pwned)
		})
	}
}

func mustChanges(t *testing.T, s *sandbox.Sandbox) []sandbox.Change {
	t.Helper()
	c, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
