//go:build e2e

package clients_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
)

// TestGitInAProtectedWorkspace: a repository cloned on the host is the read-write
// workspace, so its hooks and config are read-only inside; git still fetches through
// airlock, branches, checks out and commits there, and the host sees the commits.
func TestGitInAProtectedWorkspace(t *testing.T) {
	e := newEnv(t)
	ws := filepath.Join(t.TempDir(), "repo")
	git(t, filepath.Dir(ws), "clone", "-q", filepath.Join(e.git.root, "app.git"), ws)
	git(t, ws, "remote", "set-url", "origin", e.url("git.test", "/app.git"))
	if err := os.WriteFile(filepath.Join(ws, ".git", "hooks", "post-checkout"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile(filepath.Join(ws, ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}
	head := e.git.commitOnHost(t, "news for the fetch")
	ctx := context.Background()
	sb := newSandbox(t, sandbox.Options{ID: "sbx-clients-ws", Proxy: e.proxy, CABundle: e.bundle,
		Workspace: ws, Timeout: 2 * time.Minute})
	res, err := sb.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", `set -e
export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@sandbox GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@sandbox
git fetch -q origin
git checkout -q --no-track -b feature origin/main
echo work > WORK && git add WORK && git commit -qm 'from the sandbox'
git checkout -q main && git merge -q --ff-only feature
git rev-parse HEAD~1
if echo x >> .git/config 2>/dev/null || echo x > .git/hooks/post-checkout 2>/dev/null; then echo WRITABLE; fi`}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("git in the workspace: %v exit %d\n%s%s", err, res.ExitCode, res.Stdout, res.Stderr)
	}
	out := string(res.Stdout)
	if !strings.Contains(out, head) {
		t.Errorf("fetched main is not %s: %s", head, out)
	}
	if strings.Contains(out, "WRITABLE") {
		t.Error("the repository's config or hooks were writable inside")
	}
	if got := git(t, ws, "log", "-1", "--format=%s", "main"); got != "from the sandbox" {
		t.Errorf("host main at %q, want the sandbox's commit", got)
	}
	if now, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(now) != string(config) {
		t.Errorf("host .git/config changed:\n%s", now)
	}
	if !e.reached("git.test GET /app.git/info/refs") {
		t.Error("the fetch did not reach the git server through airlock")
	}
}
