//go:build e2e

package sandbox_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// gitWork is ordinary git work that must still succeed in a protected workspace.
const gitWork = `set -e
export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@sandbox GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@sandbox
cd /workspace
echo change >> README && git add README && git commit -qm 'from the sandbox'
git branch feature && git checkout -q feature && git commit -q --allow-empty -m 'on feature' && git checkout -q main
git tag v1 && git stash list >/dev/null && git status --short >/dev/null
(cd deps/lib && git commit -q --allow-empty -m 'in the submodule')
(cd wt && git commit -q --allow-empty -m 'in the worktree')
(cd vendor/x && git commit -q --allow-empty -m 'in the nested repository')
echo GIT-WORK-OK
`

// TestHostToolsFilesAreReadOnly: in read-write and copy-on-write workspaces, a sandbox
// cannot change, remove or rename away git's hooks and config (of the repository, its
// submodules, worktree and a nested repository), the core.hooksPath directory, an
// included config, editor settings or a configured extra path; the host's copy is
// unchanged and the host's git runs nothing planted (pointers to a git directory of the
// sandbox's, made where nothing was at start, are moved aside when it ends), while git
// work inside succeeds.
func TestHostToolsFilesAreReadOnly(t *testing.T) {
	for _, mode := range []sandbox.WorkspaceMode{sandbox.WorkspaceRW, sandbox.WorkspaceCoW} {
		t.Run(string(mode), func(t *testing.T) {
			ws := e2etest.HostToolsWorkspace(t)
			before := e2etest.Snapshot(t, ws)
			pwned := filepath.Join(t.TempDir(), "PWNED")
			s := newSandbox(t, sandbox.Options{Workspace: ws, WorkspaceMode: mode, Pids: 128,
				ProtectedPaths: append(slices.Clone(sandbox.DefaultProtectedPaths), "tools/ci.sh")})
			res := run(t, s, "cd /workspace; "+strings.Join(e2etest.HostToolsAttacks(pwned), "; ")+"; true")
			for _, e := range e2etest.Escaped(string(res.Stdout)) {
				t.Error(e)
			}
			work := run(t, s, gitWork)
			if !strings.Contains(string(work.Stdout), "GIT-WORK-OK") {
				t.Errorf("git work in the workspace failed: exit %d\n%s%s", work.ExitCode, work.Stdout, work.Stderr)
			}
			if planted := run(t, s, "cd /workspace && "+e2etest.GitPointerAttacks(pwned)); planted.ExitCode != 0 {
				t.Fatalf("planting git pointers: exit %d\n%s", planted.ExitCode, planted.Stderr)
			}
			if planted := run(t, s, "cd /workspace && "+e2etest.GitDirAttacks(pwned)+" && "+e2etest.GitlinkAttack+" && "+
				e2etest.GitSpecialAttacks); planted.ExitCode != 0 {
				t.Fatalf("planting git directories and FIFOs: exit %d\n%s", planted.ExitCode, planted.Stderr)
			}
			if mode == sandbox.WorkspaceCoW {
				changes, err := s.Changes()
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range changes {
					for _, p := range e2etest.ProtectedOnHost {
						if c.Path == p || strings.HasPrefix(c.Path, p+"/") {
							t.Errorf("the copy-on-write changes carry %s (%s)", c.Path, c.Kind)
						}
					}
				}
			}
			if err := s.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			e2etest.SameSnapshot(t, before, e2etest.Snapshot(t, ws))
			if mode == sandbox.WorkspaceRW {
				// What git would read where nothing was at start has been moved aside.
				removed := s.Report().Removed
				for _, p := range append(slices.Clone(e2etest.SweptPointers), e2etest.SweptGitDirs...) {
					if !slices.Contains(removed, p) {
						t.Errorf("%s was not moved aside (removed: %v)", p, removed)
					}
				}
				// The sandbox's commits are the host's: the workspace stays writable.
				if got := e2etest.HostGit(t, ws, "log", "-1", "--format=%s", "main"); got != "from the sandbox" {
					t.Errorf("host main is at %q, want the sandbox's commit", got)
				}
			}
			e2etest.CheckHostGitRunsNothing(t, ws, pwned, "sub", "m")
		})
	}
}
