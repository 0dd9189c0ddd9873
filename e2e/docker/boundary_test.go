//go:build e2e

package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/sandbox/sandboxtest"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// The Docker backend gets the same seccomp allowlist (rendered for runc and libseccomp)
// and the same workspace protections (read-only binds) as the native one; these are the
// native suite's boundary tests (testkit/e2etest) against containers.

// ownedWorkspace is a workspace owned by the container's default user, which it runs as
// (a root-owned workspace would be read-only to it).
func ownedWorkspace(t *testing.T, ws string) string {
	t.Helper()
	err := filepath.Walk(ws, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, 1000, 1000)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// TestDockerSyscallBoundary: through libseccomp, an architecture list holding only the
// native one kills every i386 and x32 call (checked here, not assumed), and the native
// refusals carry the same errors as in a native sandbox.
func TestDockerSyscallBoundary(t *testing.T) {
	b := newBackend(t, docker.Options{Mode: docker.ModeNetNS})
	ws := ownedWorkspace(t, t.TempDir())
	s := newSandbox(t, sandbox.Options{ID: "sbx-docker-syscalls", Backend: b, Proxy: sandboxtest.NewProxy(),
		Workspace: ws, Pids: 64})
	bin := filepath.Join(probeDir, "sysprobe")
	var out strings.Builder
	for _, script := range e2etest.ProbeScripts(bin, "/workspace") {
		o, _ := run(t, s, script)
		out.WriteString(o)
	}
	e2etest.CheckSyscallResults(t, bin, e2etest.ProbeResults(out.String()))
	e2etest.CheckNoSetIDOnHost(t, ws)
}

// TestDockerSetIDFiles: busybox's ways to leave a set-ID file in the workspace all fail;
// the container user owns the workspace here, so a set-user-ID file would run as that
// user on the host.
func TestDockerSetIDFiles(t *testing.T) {
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "setid.tar"), e2etest.SetIDArchive(t), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "sgid"), 0o775); err != nil {
		t.Fatal(err)
	}
	ownedWorkspace(t, ws)
	if err := unix.Chmod(filepath.Join(ws, "sgid"), 0o2775); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, docker.Options{Mode: docker.ModeNetNS})
	s := newSandbox(t, sandbox.Options{ID: "sbx-docker-setid", Backend: b, Proxy: sandboxtest.NewProxy(), Workspace: ws})
	out, _ := run(t, s, "cd /workspace; "+strings.Join([]string{
		"touch a b c && chmod 4755 a; chmod u+s b; chmod g+s c",
		"install -m 4755 /bin/busybox inst",
		"mkdir -m 2755 dir-sgid; mkdir -m 4755 dir-suid",
		"mkfifo -m 4644 fifo; mknod -m 2644 fifo2 p",
		"mkdir x && tar -xpf setid.tar -C x",
		"touch sgid/f && chmod 755 sgid/f; cp /bin/busybox sgid/t; mkdir sgid/sub; chmod g+s sgid/f",
		"cp -a x/t copied",
	}, "; ")+"; true")
	t.Logf("attempts: %s", out)
	e2etest.CheckNoSetIDOnHost(t, ws, "sgid")
	out, _ = run(t, s, "cd /workspace && touch plain && chmod 755 plain && mkdir -m 1777 sticky && "+
		"tar -cf /tmp/t.tar plain && mkdir -p /tmp/u && tar -xpf /tmp/t.tar -C /tmp/u && cp -a plain /tmp/ && echo ORDINARY-OK")
	if !strings.Contains(out, "ORDINARY-OK") {
		t.Errorf("ordinary chmod, tar and cp failed: %s", out)
	}
}

// TestDockerHostToolsFilesAreReadOnly: git's hooks and config (of the repository, its
// submodules, worktree and a nested repository), the core.hooksPath directory, an
// included config, editor settings and a configured extra path are read-only binds in
// the container; the host's copy is unchanged and the host's git runs nothing planted.
func TestDockerHostToolsFilesAreReadOnly(t *testing.T) {
	ws := ownedWorkspace(t, e2etest.HostToolsWorkspace(t))
	before := e2etest.Snapshot(t, ws)
	pwned := filepath.Join(t.TempDir(), "PWNED")
	b := newBackend(t, docker.Options{Mode: docker.ModeNetNS})
	s := newSandbox(t, sandbox.Options{ID: "sbx-docker-hosttools", Backend: b, Proxy: sandboxtest.NewProxy(),
		Workspace: ws, ProtectedPaths: append(slices.Clone(sandbox.DefaultProtectedPaths), "tools/ci.sh")})
	out, _ := run(t, s, "cd /workspace; "+strings.Join(e2etest.HostToolsAttacks(pwned), "; ")+"; true")
	for _, e := range e2etest.Escaped(out) {
		t.Error(e)
	}
	if o, code := run(t, s, "cd /workspace && "+e2etest.GitPointerAttacks(pwned)); code != 0 {
		t.Fatalf("planting git pointers: exit %d\n%s", code, o)
	}
	if o, code := run(t, s, "cd /workspace && "+e2etest.GitDirAttacks(pwned)+" && "+e2etest.GitSpecialAttacks); code != 0 {
		t.Fatalf("planting git directories and FIFOs: exit %d\n%s", code, o)
	}
	// The rest of the workspace, git's objects and refs included, stays writable.
	if o, _ := run(t, s, "cd /workspace && echo x > new-file && touch .git/refs/heads/x.lock && rm .git/refs/heads/x.lock && echo WRITABLE"); !strings.Contains(o, "WRITABLE") {
		t.Errorf("the workspace is not writable: %s", o)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(slices.Clone(e2etest.SweptPointers), e2etest.SweptGitDirs...) {
		if !slices.Contains(s.Report().Removed, p) {
			t.Errorf("%s was not moved aside (removed: %v)", p, s.Report().Removed)
		}
	}
	e2etest.SameSnapshot(t, before, e2etest.Snapshot(t, ws))
	e2etest.CheckHostGitRunsNothing(t, ws, pwned, "sub", "m")
}

// TestDockerFilterKillsForeignABIs reads back the filter runc and libseccomp installed in
// a sandbox container (PTRACE_SECCOMP_GET_FILTER) and runs it on golang.org/x/net/bpf's
// VM: every i386 and x32 call number is killed, whatever the kernel can run (this
// project's CI kernel runs no i386 at all, so TestDockerSyscallBoundary cannot show it
// there), and native calls get the allowlist's answers.
func TestDockerFilterKillsForeignABIs(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("x86_64 only")
	}
	b := newBackend(t, docker.Options{Mode: docker.ModeNetNS})
	newSandbox(t, sandbox.Options{ID: "sbx-docker-filter", Backend: b, Proxy: sandboxtest.NewProxy()})
	st, err := dockerClient(t).ContainerInspect(context.Background(), "airlock-sbx-docker-filter")
	if err != nil {
		t.Fatal(err)
	}
	e2etest.CheckInstalledFilter(t, st.State.Pid)
}
