package e2etest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The host runs what a read-write workspace holds: git hooks and config, editor tasks.
// HostToolsWorkspace builds a workspace with a repository, a submodule (and one whose
// checkout is gone), a linked worktree, a nested repository, a core.hooksPath directory,
// an included config file, editor settings and tools/ci.sh (for a configured extra path);
// the suites let a sandbox attack it (HostToolsAttacks) and check the host's copy
// (Snapshot) and what the host's git runs (CheckHostGitRunsNothing).

// HostGit runs git on the host in dir, with no user or system config; it fails the test
// when git fails or takes more than a minute (a FIFO where git reads blocks it).
func HostGit(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := hostGit(dir, args...)
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return out
}

func hostGit(dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main",
		"-c", "user.name=host", "-c", "user.email=host@example.com", "-c", "safe.directory=*"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("git did not finish in a minute: %w", ctx.Err())
	}
	return strings.TrimSpace(string(out)), err
}

func writeFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// HostToolsWorkspace builds the workspace on the host (see above).
func HostToolsWorkspace(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	ws, origin := t.TempDir(), t.TempDir()
	HostGit(t, origin, "init", "-q")
	HostGit(t, origin, "commit", "-q", "--allow-empty", "-m", "lib")
	HostGit(t, ws, "init", "-q")
	writeFile(t, filepath.Join(ws, "README"), "hello\n", 0o644)
	HostGit(t, ws, "add", "README")
	HostGit(t, ws, "commit", "-q", "-m", "first")
	HostGit(t, ws, "submodule", "add", "-q", origin, "deps/lib")
	HostGit(t, ws, "submodule", "add", "-q", origin, "deps/gone")
	HostGit(t, ws, "commit", "-q", "-m", "submodules")
	HostGit(t, ws, "submodule", "deinit", "-q", "-f", "deps/gone")
	HostGit(t, ws, "worktree", "add", "-q", "wt")
	// git 2.39 writes the host's absolute path in a worktree's .git file, which does not
	// exist inside the sandbox; a relative one works on both sides.
	writeFile(t, filepath.Join(ws, "wt", ".git"), "gitdir: ../.git/worktrees/wt\n", 0o644)
	HostGit(t, ws, "config", "core.hooksPath", ".githooks")
	writeFile(t, filepath.Join(ws, ".githooks", "pre-commit"), "#!/bin/sh\n", 0o755)
	writeFile(t, filepath.Join(ws, "shared.gitconfig"), "[user]\n\tname = shared\n", 0o644)
	HostGit(t, ws, "config", "include.path", "../shared.gitconfig")
	if err := os.MkdirAll(filepath.Join(ws, "vendor", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	HostGit(t, filepath.Join(ws, "vendor", "x"), "init", "-q")
	HostGit(t, filepath.Join(ws, "vendor", "x"), "commit", "-q", "--allow-empty", "-m", "x")
	writeFile(t, filepath.Join(ws, ".vscode", "tasks.json"), "{}\n", 0o644)
	writeFile(t, filepath.Join(ws, ".envrc"), "export A=1\n", 0o644)
	writeFile(t, filepath.Join(ws, "tools", "ci.sh"), "#!/bin/sh\n", 0o755)
	return ws
}

// ProtectedOnHost are HostToolsWorkspace's paths whose content and names must not change
// (tools/ci.sh when the sandbox's ProtectedPaths add it).
var ProtectedOnHost = []string{
	".git/hooks", ".git/config", ".git/modules/deps/lib/hooks", ".git/modules/deps/lib/config",
	".git/modules/deps/gone/hooks", ".git/modules/deps/gone/config", ".git/worktrees/wt/commondir",
	"deps/lib/.git", "wt/.git", ".githooks", "shared.gitconfig", "vendor/x/.git/hooks",
	"vendor/x/.git/config", ".vscode", ".envrc", ".gitmodules", "tools/ci.sh",
}

// Snapshot is every file under ProtectedOnHost with its mode and content hash.
func Snapshot(t testing.TB, ws string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, p := range ProtectedOnHost {
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

// SameSnapshot reports every difference between two snapshots.
func SameSnapshot(t testing.TB, before, after map[string]string) {
	t.Helper()
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
}

// HostToolsAttacks are shell commands, run in the workspace, that would plant something
// the host runs; each prints "ESCAPED: ..." when it succeeds. pwned is the host path a
// planted hook or fsmonitor would create.
func HostToolsAttacks(pwned string) []string {
	hook := "#!/bin/sh\\ntouch " + pwned + "\\n"
	var a []string
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

// GitPointerAttacks plant, in the workspace, a git directory of the sandbox's (evil/, with
// a hook and an fsmonitor that create pwned) and point the repositories' git directories
// at it through files git reads there but that did not exist at start, so no bind covers
// them: commondir (config and hooks from evil/), config.worktree, a hooks directory where
// there was none (the worktree's). They succeed inside; the sandbox's end moves them aside
// , and SweptPointers lists what must have been moved.
func GitPointerAttacks(pwned string) string {
	return strings.Join([]string{
		"mkdir -p evil/hooks && cp -a .git/objects .git/refs .git/HEAD evil/",
		`printf '#!/bin/sh\ntouch ` + pwned + `\n' > evil/hooks/post-checkout && chmod +x evil/hooks/post-checkout`,
		`printf '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch ` + pwned + `\n' > evil/config`,
		"echo ../evil > .git/commondir",
		"echo ../../../../evil > .git/modules/deps/lib/commondir",
		"echo ../../../evil > vendor/x/.git/commondir",
		`printf '[core]\n\tfsmonitor = touch ` + pwned + `\n' > .git/config.worktree`,
		"mkdir -p .git/worktrees/wt/hooks && cp evil/hooks/post-checkout .git/worktrees/wt/hooks/",
	}, " && ")
}

// SweptPointers are the paths GitPointerAttacks makes that must have been moved aside.
var SweptPointers = []string{".git/commondir", ".git/modules/deps/lib/commondir", "vendor/x/.git/commondir",
	".git/config.worktree", ".git/worktrees/wt/hooks"}

// GitDirAttacks make, with a shell alone, what the host's git would run where the start's
// protections could not reach (each was a finding): every predictable name the sweep once
// moved things aside to, taken (so that a planted .git/commondir would stay); a new
// repository (sub/) with an fsmonitor in its config; a new submodule git directory under
// .git/modules with an fsmonitor, and a checkout's .git file pointing at it (m/). Run
// after GitPointerAttacks. SweptGitDirs must have been moved aside.
func GitDirAttacks(pwned string) string {
	monitor := `printf '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch ` + pwned + `\n'`
	return strings.Join([]string{
		"i=0; while [ $i -le 120 ]; do n=.git/commondir.airlock-removed; [ $i -gt 0 ] && n=$n-$i; mkdir -p $n; i=$((i+1)); done",
		"mkdir -p sub/.git && cp -a .git/objects .git/refs .git/HEAD sub/.git/ && " + monitor + " > sub/.git/config",
		"mkdir -p .git/modules/m m && cp -a .git/objects .git/refs .git/HEAD .git/modules/m/ && " + monitor +
			" > .git/modules/m/config && printf '\tworktree = ../../../m\n' >> .git/modules/m/config",
		"echo 'gitdir: ../.git/modules/m' > m/.git",
	}, " && ")
}

// GitlinkAttack adds sub/ to the protected repository's index as a gitlink, so that the
// host's git status there looks into it (needs git in the sandbox; after GitDirAttacks).
const GitlinkAttack = "git -c safe.directory='*' update-index --add --cacheinfo 160000,$(git -c safe.directory='*' -C sub rev-parse HEAD),sub"

// GitSpecialAttacks put FIFOs and links where the host's git reads (it would block or
// follow them): the object alternates, a tag, packed-refs, a branch linked to /dev/zero,
// in the repository and a submodule's git directory. Run last: git blocks on them inside
// too.
const GitSpecialAttacks = "mkfifo .git/objects/info/alternates .git/refs/tags/fifo .git/modules/deps/lib/refs/tags/fifo && " +
	"rm -f .git/packed-refs && mkfifo .git/packed-refs && ln -s /dev/zero .git/refs/heads/zero"

// SweptGitDirs are the paths GitDirAttacks and GitSpecialAttacks make that the sweep must
// have moved aside or removed.
var SweptGitDirs = []string{"sub/.git/config", ".git/modules/m/config", "m/.git", ".git/objects/info/alternates",
	".git/refs/tags/fifo", ".git/modules/deps/lib/refs/tags/fifo", ".git/packed-refs", ".git/refs/heads/zero"}

// Escaped lists the "ESCAPED: ..." lines of out.
func Escaped(out string) []string {
	var e []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "ESCAPED") {
			e = append(e, line)
		}
	}
	return e
}

// CheckHostGitRunsNothing runs the host's git in each repository of the workspace (status
// and checkout, which ran the planted hook and fsmonitor in the finding), and status in
// the extra directories (what GitDirAttacks made: git may refuse them, but must finish),
// and checks that nothing the sandbox planted ran.
func CheckHostGitRunsNothing(t testing.TB, ws, pwned string, extra ...string) {
	t.Helper()
	for _, dir := range []string{".", "deps/lib", "wt", "vendor/x"} {
		d := filepath.Join(ws, dir)
		HostGit(t, d, "status", "--short")
		HostGit(t, d, "checkout", "-q", "-B", "host-check")
	}
	for _, dir := range extra {
		if out, err := hostGit(filepath.Join(ws, dir), "status", "--short"); err != nil && strings.Contains(err.Error(), "did not finish") {
			t.Errorf("git status in %s: %v\n%s", dir, err, out)
		}
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Errorf("the host's git ran something the sandbox planted (%s exists)", pwned)
	}
}
