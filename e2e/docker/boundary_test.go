//go:build e2e

package docker_test

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/internal/e2etest"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/sandbox/sandboxtest"
)

// The Docker backend gets the same seccomp allowlist (rendered for runc and libseccomp)
// and the same workspace protections (read-only binds) as the native one; these are the
// native suite's boundary tests (internal/e2etest) against containers.

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
	// The rest of the workspace, git's objects and refs included, stays writable.
	if o, _ := run(t, s, "cd /workspace && echo x > new-file && touch .git/refs/heads/x.lock && rm .git/refs/heads/x.lock && echo WRITABLE"); !strings.Contains(o, "WRITABLE") {
		t.Errorf("the workspace is not writable: %s", o)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, p := range e2etest.SweptPointers {
		if !slices.Contains(s.Report().Removed, p) {
			t.Errorf("%s was not moved aside (removed: %v)", p, s.Report().Removed)
		}
	}
	e2etest.SameSnapshot(t, before, e2etest.Snapshot(t, ws))
	e2etest.CheckHostGitRunsNothing(t, ws, pwned)
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
	vm := installedFilter(t, st.State.Pid)
	const (
		auditI386   = 0x40000003
		auditX86_64 = 0xc000003e
		killThread  = 0x00000000
		killProcess = 0x80000000
		allow       = 0x7fff0000
		errno       = 0x00050000
	)
	killed := func(r uint32) bool { return r == killThread || r == killProcess }
	for nr := uint32(0); nr < 600; nr++ {
		if r := vm.run(t, auditI386, nr, [6]uint64{}); !killed(r) {
			t.Fatalf("i386 call %d: filter returns %#x, want a kill", nr, r)
		}
		if r := vm.run(t, auditX86_64, 0x40000000|nr, [6]uint64{}); !killed(r) {
			t.Fatalf("x32 call %d: filter returns %#x, want a kill", nr, r)
		}
	}
	for _, c := range []struct {
		nr   uint32
		args [6]uint64
		want uint32
	}{
		{39, [6]uint64{}, allow},               // getpid
		{90, [6]uint64{0, 0o755}, allow},       // chmod
		{90, [6]uint64{0, 0o4755}, errno | 1},  // chmod, set-user-ID
		{41, [6]uint64{40, 1}, errno | 97},     // socket(AF_VSOCK)
		{101, [6]uint64{16, 1}, errno | 1},     // ptrace
		{425, [6]uint64{}, errno | 1},          // io_uring_setup
		{206, [6]uint64{}, errno | 38},         // io_setup
		{188, [6]uint64{}, errno | 95},         // setxattr
		{56, [6]uint64{0x10000011}, errno | 1}, // clone(CLONE_NEWUSER)
		{435, [6]uint64{}, errno | 38},         // clone3
	} {
		if r := vm.run(t, auditX86_64, c.nr, c.args); r != c.want {
			t.Errorf("x86_64 call %d %#o: filter returns %#x, want %#x", c.nr, c.args[:2], r, c.want)
		}
	}
}

type filterVM struct{ vm *bpf.VM }

// installedFilter reads the seccomp filter of process pid (one filter: runc installs one).
func installedFilter(t *testing.T, pid int) *filterVM {
	t.Helper()
	runtime.LockOSThread() // ptrace requests come from the tracing thread
	defer runtime.UnlockOSThread()
	if err := unix.PtraceAttach(pid); err != nil {
		t.Fatalf("attach to the container's process %d: %v", pid, err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		t.Fatal(err)
	}
	defer unix.PtraceDetach(pid)
	n, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), 0, 0, 0, 0)
	if e != 0 || n == 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %d instructions, %v", n, e)
	}
	prog := make([]unix.SockFilter, n)
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), 0,
		uintptr(unsafe.Pointer(&prog[0])), 0, 0); e != 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %v", e)
	}
	raw := make([]bpf.RawInstruction, len(prog))
	for i, f := range prog {
		raw[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the filter has instructions x/net/bpf cannot run")
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	return &filterVM{vm: vm}
}

// run evaluates one call (the VM reads big-endian words: each 32-bit word of seccomp_data
// is written big-endian where the little-endian kernel has it).
func (f *filterVM) run(t *testing.T, audit, nr uint32, args [6]uint64) uint32 {
	t.Helper()
	var b [64]byte
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], audit)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
	}
	r, err := f.vm.Run(b[:])
	if err != nil {
		t.Fatal(err)
	}
	return uint32(r)
}
