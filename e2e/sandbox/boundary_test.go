//go:build e2e

package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/internal/e2etest"
	"github.com/airlock-proxy/airlock/sandbox"
)

// The syscall boundary: every call through a foreign ABI (i386 `int $0x80`, x32) kills the
// process, native calls outside the allowlist are refused, and no file the sandbox writes
// to the workspace carries a set-user-ID or set-group-ID bit or a file capability.

// buildSysprobe builds e2e/sysprobe static into a new directory and returns its path.
func buildSysprobe(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sysprobe")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/airlock-proxy/airlock/e2e/sysprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build sysprobe: %v\n%s", err, out)
	}
	return bin
}

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

// syscallProbe is one call of the 64-bit escape tests, what the sandbox must answer, and
// whether the same call succeeds on the host (a control proving the probe can tell).
type syscallProbe struct {
	item        string // sysprobe's CALL[=ARG]; $P is a sibling process's pid
	errno       int    // the refusal inside, through the native ABI
	hostControl bool
}

// syscallProbes are the calls the sandbox refuses, each made through every ABI. Paths are
// relative to the workspace; ABI is replaced by the ABI's name, so that each ABI has its
// own files.
var syscallProbes = []syscallProbe{
	{"chmod-setuid=f-ABI", 1, true},
	{"fchmodat-setuid=f-ABI", 1, true},
	{"creat-setuid=creat-ABI", 1, true},
	{"openat-setuid=open-ABI", 1, true},
	{"mknod-setuid=fifo-ABI", 1, true},
	{"setcap=f-ABI", 95, true},
	{"socket=40,1", 97, false}, // AF_VSOCK: not confined by the network namespace
	{"socket=40,2", 97, false},
	{"socket=16,3", 97, true},  // AF_NETLINK
	{"socket=17,3", 97, false}, // AF_PACKET
	{"ptrace-attach=$P", 1, false},
	{"process_vm_readv=$P", 1, false},
	{"keyctl", 1, true},
	{"add_key", 1, true},
	{"io_uring_setup", 1, true},
	{"io_setup", 38, true},
	{"bpf", 1, false},
	{"perf_event_open", 1, false},
	{"userfaultfd", 1, false},
	{"unshare-user", 1, true},
	{"setns", 1, false},
	{"clone-newuser", 1, true},
	{"mount-tmpfs=/tmp", 1, false},
}

// probeScript runs sysprobe (at bin) through abi for every probe, in dir, beside a
// sibling process to trace.
func probeScript(bin, dir, abi string, extra ...string) string {
	items := append([]string{"getpid"}, extra...)
	for _, p := range syscallProbes {
		items = append(items, strings.ReplaceAll(p.item, "ABI", abi))
	}
	return "cd " + dir + " && touch f-" + abi + " && sleep 30 & P=$!; sleep 0.2; " + bin + " " + abi + " " +
		strings.Join(items, " ") + "; kill $P"
}

// probeResults maps "ABI ITEM" to its outcome in sysprobe's output.
func probeResults(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			if call, arg, ok := strings.Cut(k, "="); ok && strings.Trim(arg, "0123456789") == "" {
				k = call + "=$P" // the sibling's pid
			}
			m[k] = v
		}
	}
	return m
}

// abiAvailable says whether the host kernel runs calls of abi (getpid through it
// succeeds), and the outcome otherwise.
func abiAvailable(t *testing.T, bin, abi string) (bool, string) {
	t.Helper()
	out, _ := exec.Command(bin, abi, "getpid").CombinedOutput()
	res := probeResults(string(out))[abi+" getpid"]
	return strings.HasPrefix(res, "ESCAPED"), res
}

// checkForeignABIs checks the outcomes of the i386 and x32 runs: on a kernel that runs
// the ABI, every call must be killed by SIGSYS; x32 calls must be killed on any x86_64
// kernel (seccomp sees them before the kernel finds it has no x32 table); an ABI the kernel
// cannot run is reported, and then only "nothing got through" is checked.
func checkForeignABIs(t *testing.T, bin string, results map[string]string) {
	t.Helper()
	for _, abi := range []string{"i386", "x32"} {
		avail, how := abiAvailable(t, bin, abi)
		mustKill := avail || abi == "x32"
		switch {
		case !avail && abi == "x32":
			t.Logf("the x32 ABI is unavailable on this kernel (getpid through it on the host: %s); "+
				"seccomp still sees x32 calls before the kernel refuses them, so the kills checked here are the filter's", how)
		case !avail:
			t.Logf("the %s ABI is unavailable on this kernel (getpid through it on the host: %s): only that nothing "+
				"got through is checked here; sandbox/seccomp TestForeignABIsAreKilled proves the filter kills it", abi, how)
		}
		n := 0
		for key, res := range results {
			if !strings.HasPrefix(key, abi+" ") {
				continue
			}
			n++
			switch {
			case strings.HasPrefix(res, "ESCAPED"):
				t.Errorf("%s: %s", key, res)
			case mustKill && res != "killed by SIGSYS":
				t.Errorf("%s: %s, want killed by SIGSYS", key, res)
			}
		}
		if n < len(syscallProbes) {
			t.Errorf("%s: %d results, want %d", abi, n, len(syscallProbes)+1)
		}
	}
}

// checkNoSetIDOnHost walks the workspace on the host: no regular file, FIFO or directory
// outside allowSGID carries a set-user-ID or set-group-ID bit, and nothing carries a
// file capability.
func checkNoSetIDOnHost(t *testing.T, ws string, allowSGID ...string) {
	t.Helper()
	err := filepath.WalkDir(ws, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(ws, path)
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil
		}
		setid := fi.Mode() & (fs.ModeSetuid | fs.ModeSetgid)
		if fi.IsDir() && fi.Mode()&fs.ModeSetuid == 0 {
			for _, a := range allowSGID {
				if rel == a || strings.HasPrefix(rel, a+"/") {
					setid = 0 // inherited from a set-group-ID directory of the host
				}
			}
		}
		if setid != 0 {
			t.Errorf("host file %s has mode %v", rel, fi.Mode())
		}
		if _, err := unix.Lgetxattr(path, "security.capability", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
			t.Errorf("host file %s: security.capability: %v, want none", rel, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSyscallBoundary runs every refused call through the native ABI (each refused with
// its errno), i386 and x32 (each killing the process) in a sandbox whose workspace is
// owned by root, and checks the host files.
func TestSyscallBoundary(t *testing.T) {
	bin := buildSysprobe(t)
	ws := t.TempDir() // owned by root: what the sandbox writes there is root's on the host
	copyFile(t, bin, filepath.Join(ws, "sysprobe"), 0o755)
	s := newSandbox(t, sandbox.Options{Workspace: ws, Pids: 64})
	var out strings.Builder
	for _, abi := range []string{"x86_64", "i386", "x32"} {
		extra := []string(nil)
		if abi == "i386" {
			extra = []string{"socketcall=40,1", "socketcall=16,3"} // i386's other way to a socket
		}
		res := run(t, s, probeScript("./sysprobe", "/workspace", abi, extra...))
		out.Write(res.Stdout)
		if len(res.Stderr) > 0 {
			t.Logf("%s stderr: %s", abi, res.Stderr)
		}
	}
	results := probeResults(out.String())
	if got := results["x86_64 getpid"]; !strings.HasPrefix(got, "ESCAPED") {
		t.Fatalf("the probe does not work in the sandbox: getpid %q\n%s", got, out.String())
	}
	for _, p := range syscallProbes {
		key := "x86_64 " + strings.ReplaceAll(p.item, "ABI", "x86_64")
		want := "refused: errno " + strconv.Itoa(p.errno) + " "
		if got := results[key]; !strings.HasPrefix(got, want) {
			t.Errorf("%s: %q, want %q...", key, got, want)
		}
	}
	checkForeignABIs(t, bin, results)
	checkNoSetIDOnHost(t, ws)

	// Controls: the same calls succeed on the host, so the probe can tell.
	host := t.TempDir()
	var items []string
	for _, p := range syscallProbes {
		if p.hostControl {
			items = append(items, strings.ReplaceAll(p.item, "ABI", "x86_64"))
		}
	}
	e2etest.HostControl(t, "cd "+host+" && touch f-x86_64 && "+bin+" x86_64 "+strings.Join(items, " ")+" | grep -v ESCAPED || echo ESCAPED")
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

// setIDArchive is a tar archive whose entries carry set-user-ID and set-group-ID bits.
func setIDArchive(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range []*tar.Header{
		{Name: "t/", Typeflag: tar.TypeDir, Mode: 0o2775},
		{Name: "t/suid", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 3},
		{Name: "t/sgid", Typeflag: tar.TypeReg, Mode: 0o2755, Size: 3},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("#!\n"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestSetIDFilesNeverReachTheHost: every way the sandbox may try to leave a set-user-ID or
// set-group-ID file (or a file capability) in a root-owned read-write workspace fails,
// while the same tools' ordinary work goes through.
func TestSetIDFilesNeverReachTheHost(t *testing.T) {
	suid := setuidBinary(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "setid.tar"), setIDArchive(t), 0o644); err != nil {
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
	checkNoSetIDOnHost(t, ws, "sgid")
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
	bin := airlockBinary(t)
	probe := buildSysprobe(t)
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
