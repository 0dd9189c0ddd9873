//go:build e2e

package sandbox_test

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// The syscall boundary (testkit/e2etest/sysprobe.go): every call through a foreign ABI
// kills the process, native calls outside the allowlist are refused, and no file the
// sandbox writes to the workspace carries a set-ID bit or a file capability.

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

// TestSyscallBoundary runs every refused call through the native ABI (each refused with
// its errno), i386 and x32 (each killing the process) in a sandbox whose workspace is
// owned by root, and checks the host files.
func TestSyscallBoundary(t *testing.T) {
	bin := e2etest.BuildSysprobe(t)
	ws := t.TempDir() // owned by root: what the sandbox writes there is root's on the host
	copyFile(t, bin, filepath.Join(ws, "sysprobe"), 0o755)
	s := newSandbox(t, sandbox.Options{Workspace: ws, Pids: 64})
	var out strings.Builder
	for _, script := range e2etest.ProbeScripts("./sysprobe", "/workspace") {
		res := run(t, s, script)
		out.Write(res.Stdout)
		if len(res.Stderr) > 0 {
			t.Logf("stderr: %s", res.Stderr)
		}
	}
	e2etest.CheckSyscallResults(t, bin, e2etest.ProbeResults(out.String()))
	e2etest.CheckNoSetIDOnHost(t, ws)
	e2etest.SyscallHostControl(t, bin)
}

// TestInstalledFilterKillsForeignABIs reads back the filter the holder installed in a
// sandboxed command (PTRACE_SECCOMP_GET_FILTER) and runs every i386 and x32 call number
// through it: this kernel may run no i386 at all, where real calls cannot show the kill.
func TestInstalledFilterKillsForeignABIs(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("x86_64 only")
	}
	if e2etest.Rootless() {
		t.Skip("reading a process's filter back needs CAP_SYS_ADMIN; rootless commands load the same filter bytes (TestSyscallBoundary runs the calls)")
	}
	s := newSandbox(t, sandbox.Options{})
	marker := "123" + strconv.Itoa(os.Getpid()%1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Run(context.Background(), sandbox.Command{Args: []string{"sleep", marker}, Timeout: time.Minute})
	}()
	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
		if pid = findProcess("sleep\x00" + marker + "\x00"); pid == 0 && time.Now().After(deadline) {
			t.Fatal("the sandboxed sleep never appeared")
		}
	}
	e2etest.CheckInstalledFilter(t, pid)
	syscall.Kill(pid, syscall.SIGKILL)
	<-done
}

// setuidBinary is a set-user-ID program of the host's (read-only) root, for copy and link
// attempts.
func setuidBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/passwd", "/usr/bin/su", "/usr/bin/mount", "/bin/su", "/usr/bin/newgrp"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&fs.ModeSetuid != 0 {
			return p
		}
	}
	t.Skip("no set-user-ID program on this host to copy")
	return ""
}

// TestSetIDFilesNeverReachTheHost: every way the sandbox may try to leave a set-user-ID or
// set-group-ID file (or a file capability) in a root-owned read-write workspace fails,
// while the same tools' ordinary work goes through.
func TestSetIDFilesNeverReachTheHost(t *testing.T) {
	suid := setuidBinary(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "setid.tar"), e2etest.SetIDArchive(t), 0o644); err != nil {
		t.Fatal(err)
	}
	// A set-group-ID directory of the host: directories made in it inherit the bit (a
	// directory cannot be run); files must not.
	if err := os.Mkdir(filepath.Join(ws, "sgid"), 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(ws, "sgid"), 0o775|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "with-xattr"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(ws, "with-xattr"), "user.origin", []byte("host"), 0); err != nil {
		t.Skipf("the workspace's file system takes no user xattrs: %v", err)
	}
	s := newSandbox(t, sandbox.Options{Workspace: ws, Pids: 64})
	attempts := strings.Join([]string{
		"touch a b c && chmod 4755 a; chmod u+s b; chmod g+s c",
		"install -m 4755 /bin/true inst",
		"mkdir -m 2755 dir-sgid; mkdir -m 4755 dir-suid",
		"cp -a " + suid + " copied; cp -p " + suid + " copied-p",
		"ln " + suid + " hardlink",
		"mkfifo -m 4644 fifo",
		"mkdir x && tar -xpf setid.tar -C x",
		"touch sgid/f && chmod 755 sgid/f; cp /bin/true sgid/t; mkdir sgid/sub; chmod g+s sgid/f",
		"setcap cap_setuid+ep a",
		py(`import os; fd = os.open("py-open", os.O_CREAT | os.O_WRONLY, 0o4755); os.close(fd)`),
		py(`import os; open("py-chmod", "w").close(); os.chmod("py-chmod", 0o6755)`),
		py(`import os; fd = os.open("py-fchmod", os.O_CREAT | os.O_WRONLY, 0o755); os.fchmod(fd, 0o4755)`),
		py(`import os; fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o4755); os.link("/proc/self/fd/%d" % fd, "py-tmpfile")`),
		py(`import os; os.setxattr("a", "security.capability", bytes.fromhex("0100000280000000000000000000000000000000"))`),
		py(`import os; os.mknod("py-fifo", 0o10000 | 0o2644)`),
		"mv " + suid + " moved",
	}, "; ")
	res := run(t, s, "cd /workspace; "+attempts+"; true")
	t.Logf("attempts: %s", res.Stderr)
	e2etest.CheckNoSetIDOnHost(t, ws, "sgid")
	if _, err := os.Lstat(filepath.Join(ws, "hardlink")); err == nil {
		t.Errorf("a hard link to %s was made in the workspace", suid)
	}

	// Ordinary work with the same tools: modes without set-ID bits, copies that preserve
	// what they can (xattrs are not carried: setting one fails as where unsupported).
	ok := run(t, s, `cd /workspace && touch plain && chmod 755 plain && mkdir -m 1777 sticky && chmod 700 sticky && echo CHMOD-OK
cp -a with-xattr /tmp/copy-a && echo CP-A-OK
mkdir -p tree/sub && cp -a tree with-xattr /tmp/ && echo CP-A-DIR-OK
tar -cf /tmp/ws.tar plain with-xattr && mkdir -p /tmp/untar && tar -xpf /tmp/ws.tar -C /tmp/untar && echo TAR-OK
`+py(`import shutil; shutil.copy2("with-xattr", "copy2"); print("COPY2-OK")`)+`
install -m 755 /bin/true installed && echo INSTALL-OK
mkfifo -m 600 plain-fifo && echo MKFIFO-OK`)
	for _, want := range []string{"CHMOD-OK", "CP-A-OK", "CP-A-DIR-OK", "TAR-OK", "COPY2-OK", "INSTALL-OK", "MKFIFO-OK"} {
		if !strings.Contains(string(res.Stdout)+string(ok.Stdout), want) {
			t.Errorf("%s missing: stdout %q stderr %q", want, ok.Stdout, ok.Stderr)
		}
	}
}

// TestAllowAIOFlag: io_setup is refused (ENOSYS) unless `sandbox run --allow-aio` or the
// config's sandbox.allow_aio permits it.
func TestAllowAIOFlag(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	bin := e2etest.AirlockBinary(t)
	probe := e2etest.BuildSysprobe(t)
	ws := t.TempDir()
	copyFile(t, probe, filepath.Join(ws, "sysprobe"), 0o755)
	home := t.TempDir()
	cfg := filepath.Join(home, "airlock.yaml")
	if err := os.WriteFile(cfg, []byte("sandbox:\n  allow_aio: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		flags []string
		want  string
	}{
		{nil, "refused: errno 38"},
		{[]string{"--allow-aio"}, "ESCAPED"},
		{[]string{"--config", cfg}, "ESCAPED"},
	} {
		args := append([]string{"sandbox", "run", "--workspace", ws}, tt.flags...)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, append(args, "--", "/workspace/sysprobe", "x86_64", "io_setup")...)
		cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), "x86_64 io_setup: "+tt.want) {
			t.Errorf("sandbox run %v: %v, want io_setup %s\n%s", tt.flags, err, tt.want, out)
		}
	}
}
