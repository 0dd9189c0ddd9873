package native_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
)

// holdAtBound runs a Python program in s that drives it to a bound and then prints
// "AT-BOUND ..." and sleeps; it returns the fields after AT-BOUND. The program is killed at
// cleanup (or when stop is called).
func holdAtBound(t *testing.T, s *sandbox.Sandbox, program string, args ...string) (fields []string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	pr, pw := io.Pipe()
	done := make(chan sandbox.Result, 1)
	var stderr strings.Builder
	go func() {
		res, _ := s.Run(ctx, sandbox.Command{Args: append([]string{"python3", "-c", program}, args...), Stdout: pw, Stderr: &stderr})
		pw.Close()
		done <- res
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	})
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 && f[0] == "AT-BOUND" {
			go io.Copy(io.Discard, pr)
			return f[1:], stop
		}
	}
	stop()
	t.Fatalf("the program never reached its bound (stderr %q)", stderr.String())
	return nil, nil
}

// TestOpenFilesBound: each process's open-file limit is the sandbox's, soft and hard, and
// cannot be raised; many processes each opening files up to it hold at most nofile × pids
// of the host's file table, and meanwhile the host and a second sandbox open files freely.
func TestOpenFilesBound(t *testing.T) {
	s := newSandbox(t, sandbox.Options{Nofile: 64, Pids: 16})
	const program = `
import os, resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard * 2, hard * 2)); raised = "raised"
except (ValueError, OSError):
    raised = "kept"
r, w = os.pipe()
kids = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        n = 0
        try:
            while True:
                os.open("/dev/null", os.O_RDONLY); n += 1
        except OSError:
            pass
        os.write(w, b"%d\n" % n)
        time.sleep(600)
    kids += 1
os.close(w)
f = os.fdopen(r)
total = sum(int(f.readline()) for _ in range(kids))
print("AT-BOUND", soft, hard, raised, kids, total, flush=True)
time.sleep(600)
`
	f, _ := holdAtBound(t, s, program)
	if f[0] != "64" || f[1] != "64" || f[2] != "kept" {
		t.Errorf("open-file limit soft %s hard %s (%s); want 64, 64, kept", f[0], f[1], f[2])
	}
	var kids, total int
	fmt.Sscan(f[3], &kids)
	fmt.Sscan(f[4], &total)
	if kids < 5 || kids > 16 || total > 64*16 || total < kids*50 {
		t.Errorf("%d processes held %d files; want several processes each at its limit, at most 64 × 16 in all", kids, total)
	}
	// The host and another sandbox are unaffected.
	var held []*os.File
	for range 200 {
		fh, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatalf("the host cannot open files while a sandbox is at its bound: %v", err)
		}
		held = append(held, fh)
	}
	for _, fh := range held {
		fh.Close()
	}
	other := newSandbox(t, sandbox.Options{})
	if res := run(t, other, `python3 -c 'import os; [os.open("/dev/null", os.O_RDONLY) for _ in range(500)]; print("ok")'`); strings.TrimSpace(string(res.Stdout)) != "ok" {
		t.Errorf("a second sandbox cannot open 500 files: %s %s", res.Stdout, res.Stderr)
	}
}

// TestPtyBound: the sandbox's private devpts holds at most Ptys terminals; at that bound,
// opening one more fails with ENOSPC inside, and a second sandbox and the host still get
// terminals.
func TestPtyBound(t *testing.T) {
	s := newSandbox(t, sandbox.Options{Ptys: 4})
	const program = `
import os, time
fds = []
err = 0
try:
    while len(fds) < 1000:
        fds.append(os.openpty())
except OSError as e:
    err = e.errno
print("AT-BOUND", len(fds), err, flush=True)
time.sleep(600)
`
	f, _ := holdAtBound(t, s, program)
	if f[0] != "4" || f[1] != fmt.Sprint(int(syscall.ENOSPC)) {
		t.Errorf("the sandbox opened %s terminals (then errno %s); want 4, then ENOSPC", f[0], f[1])
	}
	other := newSandbox(t, sandbox.Options{})
	if res := run(t, other, `python3 -c 'import os; [os.openpty() for _ in range(8)]; print("ok")'`); strings.TrimSpace(string(res.Stdout)) != "ok" {
		t.Errorf("a second sandbox cannot open terminals: %s %s", res.Stdout, res.Stderr)
	}
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("the host cannot open a terminal: %v", err)
	}
	ptmx.Close()
}

// TestTmpfsInodeBound: every writable tmpfs has at most Inodes inodes; past that, creating
// a file fails with ENOSPC inside, whatever the room left.
func TestTmpfsInodeBound(t *testing.T) {
	s := newSandbox(t, sandbox.Options{Inodes: 200})
	res := run(t, s, `for d in /tmp "$HOME" /dev/shm; do i=0; while printf "" > "$d/f$i"; do i=$((i+1)); [ $i -gt 5000 ] && break; done; echo "$d $i"; done`)
	out := string(res.Stdout)
	for _, d := range []string{"/tmp", "/home/sandbox", "/dev/shm"} {
		var n int
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == d {
				fmt.Sscan(f[1], &n)
			}
		}
		if n < 150 || n > 200 {
			t.Errorf("%s took %d files, want close to and at most 200:\n%s%s", d, n, out, res.Stderr)
		}
	}
	if !strings.Contains(string(res.Stderr), "No space left on device") {
		t.Errorf("the failure was not ENOSPC: %s", res.Stderr)
	}
}

// TestProcMasked: what /proc tells of the host and the sandbox does not need reads empty.
func TestProcMasked(t *testing.T) {
	s := newSandbox(t, sandbox.Options{})
	for _, name := range sandbox.MaskedProcFiles {
		if _, err := os.Stat("/proc/" + name); err != nil || name == "kcore" {
			continue
		}
		res := run(t, s, "head -c 100 /proc/"+name+" 2>/dev/null | wc -c; echo x > /proc/"+name+" 2>/dev/null && echo written")
		if strings.TrimSpace(string(res.Stdout)) != "0" {
			t.Errorf("/proc/%s: %q, want nothing to read and nothing written", name, res.Stdout)
		}
	}
	for _, name := range sandbox.MaskedProcDirs {
		if _, err := os.Stat("/proc/" + name); err != nil {
			continue
		}
		if res := run(t, s, "ls -A /proc/"+name+" | wc -l"); strings.TrimSpace(string(res.Stdout)) != "0" {
			t.Errorf("/proc/%s lists %s entries, want none", name, res.Stdout)
		}
	}
	// Still there: what programs need.
	if res := run(t, s, "head -1 /proc/meminfo; cat /proc/self/status | grep -c Pid"); res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "MemTotal") {
		t.Errorf("/proc/meminfo and /proc/self: %s %s", res.Stdout, res.Stderr)
	}
}

// TestDiskBound: a copy-on-write workspace's layer is a file system of Disk bytes: writing
// past it fails inside with ENOSPC, the host's disk holds at most that much of it, and it
// goes (mount, loop device, image) with the sandbox.
func TestDiskBound(t *testing.T) {
	ws := t.TempDir()
	must(t, os.WriteFile(filepath.Join(ws, "keep.txt"), []byte("host\n"), 0o644))
	s := newSandbox(t, sandbox.Options{Workspace: ws, WorkspaceMode: sandbox.WorkspaceCoW, Disk: 64 << 20, ID: "sbx-disk-bound"})
	res := run(t, s, `dd if=/dev/zero of=/workspace/big bs=1M count=100 2>&1; echo status $?; echo small > /workspace/small.txt 2>&1 || echo small failed`)
	out := string(res.Stdout)
	if !strings.Contains(out, "No space left on device") || strings.Contains(out, "status 0") {
		t.Errorf("writing 100 MiB into a 64 MiB disk: %s", out)
	}
	dir := filepath.Join(testState, "sandboxes", "sbx-disk-bound")
	var st syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(dir, "disk.img"), &st))
	if used := st.Blocks * 512; used > 66<<20 {
		t.Errorf("the disk image takes %d bytes of the host's disk, want at most about 64 MiB", used)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "keep.txt")); string(b) != "host\n" {
		t.Errorf("the host workspace changed")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the sandbox's state (and disk image) is still there: %v", err)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), dir) {
		t.Errorf("the sandbox's disk is still mounted")
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		if b, _ := os.ReadFile(l); strings.Contains(string(b), dir) {
			t.Errorf("a loop device still holds the image: %s", l)
		}
	}
}
