//go:build e2e

package docker_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/sandbox/sandboxtest"
)

// atBound runs script in s until it prints a line starting with "DONE"; it returns the
// lines printed before that, and leaves the script running (holding what it took) until
// the test ends.
func atBound(t *testing.T, s *sandbox.Sandbox, script string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", script}, Stdout: pw, Stderr: pw})
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	})
	var lines []string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "DONE") {
			go io.Copy(io.Discard, pr)
			return lines
		}
		lines = append(lines, sc.Text())
	}
	t.Fatalf("the script never finished filling: %q", lines)
	return nil
}

// TestHostBounds: a Docker sandbox's open files (per process, not raisable), terminals
// (its own devpts with a max), tmpfs inodes and /proc are bounded as the native backend's;
// while one sandbox sits at its bounds, the host and a second sandbox are unaffected.
func TestHostBounds(t *testing.T) {
	b := newBackend(t, docker.Options{Mode: docker.ModeNetNS})
	s := newSandbox(t, sandbox.Options{ID: "sbx-docker-bounds", Backend: b, Nofile: 64, Pids: 64, Ptys: 4, Inodes: 200})
	lines := atBound(t, s, `export GOMAXPROCS=1; for i in 1 2 3 4; do `+probe("fill", "fds", "100000", "hold")+` & done
sleep 1; `+probe("fill", "ptys", "1000", "hold")+` & sleep 1; echo DONE; wait`)
	fds, ptys := 0, 0
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 6 || f[0] != "AT-BOUND" {
			continue
		}
		if f[3] != "64" || f[4] != "64" || f[5] != "kept" {
			t.Errorf("open-file limit: %q, want soft and hard 64, not raisable", l)
		}
		if f[1] == "4" && f[2] == fmt.Sprint(int(syscall.ENOSPC)) {
			ptys++
		} else if f[2] == fmt.Sprint(int(syscall.EMFILE)) {
			fds++
		}
	}
	if fds != 4 || ptys != 1 {
		t.Fatalf("want 4 processes at their open-file limit and one at 4 terminals (ENOSPC): %.2000q", lines)
	}
	// The host and a second sandbox are unaffected.
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("the host cannot open a terminal: %v", err)
	}
	ptmx.Close()
	other := newSandbox(t, sandbox.Options{ID: "sbx-docker-bounds-2", Backend: b})
	if out, _ := run(t, other, probe("fill", "ptys", "8")+"; "+probe("fill", "fds", "500")); strings.Count(out, "AT-BOUND 8 0") != 1 || strings.Count(out, "AT-BOUND 500 0") != 1 {
		t.Errorf("a second sandbox cannot open terminals or files: %q", out)
	}
	out, _ := run(t, s, `for d in /tmp "$HOME" /dev/shm; do i=0; while touch "$d/f$i" 2>/dev/null; do i=$((i+1)); [ $i -gt 5000 ] && break; done; echo "$d $i"; done
head -c 100 /proc/cmdline | wc -c; head -c 100 /proc/keys 2>/dev/null | wc -c`)
	for _, d := range []string{"/tmp", "/home/sandbox", "/dev/shm"} {
		n := -1
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == d {
				fmt.Sscan(f[1], &n)
			}
		}
		if n < 150 || n > 200 {
			t.Errorf("%s took %d files, want close to and at most 200:\n%s", d, n, out)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "0\n0") {
		t.Errorf("/proc/cmdline or /proc/keys readable: %q", out)
	}
}

// containerPid is the host pid of a sandbox container's init.
func containerPid(t *testing.T, id string) int {
	t.Helper()
	st, err := dockerClient(t).ContainerInspect(context.Background(), "airlock-"+id)
	if err != nil {
		t.Fatal(err)
	}
	return st.State.Pid
}

// hostTimers creates n POSIX timers in this (the host's root) process, each holding a
// queued signal, and deletes them; it reports the first error.
func hostTimers(n int) error {
	var ev [64]byte
	ev[12] = 1 // sigev_notify = SIGEV_NONE
	var ids []int32
	defer func() {
		for _, id := range ids {
			unix.Syscall(unix.SYS_TIMER_DELETE, uintptr(id), 0, 0)
		}
	}()
	for range n {
		var id int32
		if _, _, e := unix.Syscall(unix.SYS_TIMER_CREATE, 1, uintptr(unsafe.Pointer(&ev)), uintptr(unsafe.Pointer(&id))); e != 0 {
			return e
		}
		ids = append(ids, id)
	}
	return nil
}

// TestDockerUserCounts: a container without a read-write workspace runs as a uid of its
// own (from a reserved range), never a user of the host, with low sigpending and msgqueue
// limits; at its inotify and queued-signal bounds, the host's root and a second sandbox
// take theirs.
func TestDockerUserCounts(t *testing.T) {
	b := newBackend(t, docker.Options{Mode: docker.ModeNetNS})
	s := newSandbox(t, sandbox.Options{ID: "sbx-docker-ucounts", Backend: b})
	out, _ := run(t, s, "id -u; "+probe("limits"))
	f := strings.Fields(out)
	var uid int
	fmt.Sscan(f[0], &uid)
	if uid < 100000+65536 || len(f) != 6 || f[1] != "LIMITS" || f[2] != fmt.Sprint(sandbox.SigpendingLimit) || f[3] != f[2] ||
		f[4] != fmt.Sprint(sandbox.MsgqueueLimit) || f[5] != f[4] {
		// Checked before filling anything: a shared uid would take a real user's counts.
		t.Fatalf("uid and limits %q: want a reserved uid and sigpending %d, msgqueue %d", out, sandbox.SigpendingLimit, sandbox.MsgqueueLimit)
	}
	maxInst, _ := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	lines := atBound(t, s, probe("usercounts", "100000", "1000", "100000", "hold")+" & sleep 2; echo DONE; wait")
	if len(lines) != 1 {
		t.Fatalf("usercounts: %q", lines)
	}
	n := strings.Fields(lines[0])
	if n[1] != strings.TrimSpace(string(maxInst)) || n[2] != fmt.Sprint(int(syscall.EMFILE)) || n[3] != "1000" || n[4] != "0" {
		t.Errorf("inotify %q: want the host's per-user %s instances for the sandbox's own uid, then EMFILE, and watches", lines[0], maxInst)
	}
	var timers int
	fmt.Sscan(n[5], &timers)
	if timers > sandbox.SigpendingLimit || timers < sandbox.SigpendingLimit-64 || n[6] != fmt.Sprint(int(syscall.EAGAIN)) {
		t.Errorf("timers %q: want about %d, then EAGAIN", lines[0], sandbox.SigpendingLimit)
	}
	for range 16 {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			t.Fatalf("the host's root cannot make an inotify instance: %v", err)
		}
		defer unix.Close(fd)
	}
	if err := hostTimers(200); err != nil {
		t.Errorf("the host's root cannot queue signals: %v", err)
	}
	other := newSandbox(t, sandbox.Options{ID: "sbx-docker-ucounts-2", Backend: b})
	if out, _ := run(t, other, probe("usercounts", "16", "100", "200")); !strings.HasPrefix(out, "AT-BOUND 16 0 100 0 200 0") {
		t.Errorf("a second sandbox: %q", out)
	}
	if out2, _ := run(t, other, "id -u"); strings.TrimSpace(out2) == fmt.Sprint(uid) {
		t.Errorf("two sandboxes run as the same uid %d", uid)
	}
	// A read-write workspace is written as its owner, whose per-user counts it shares:
	// the per-process limits still hold.
	rw := newSandbox(t, sandbox.Options{ID: "sbx-docker-ucounts-rw", Backend: b, Workspace: ownedWorkspace(t, t.TempDir())})
	if out, _ := run(t, rw, "id -u; "+probe("limits")); out != fmt.Sprintf("1000\nLIMITS %d %d %d %d\n", sandbox.SigpendingLimit, sandbox.SigpendingLimit, sandbox.MsgqueueLimit, sandbox.MsgqueueLimit) {
		t.Errorf("read-write workspace: %q", out)
	}
}

// TestDockerSocketMemoryBound: a container's socket buffers are charged to its cgroup
// (kmem.tcp on cgroup v1, set before its commands start) and each socket's are bounded in
// its network namespace; a container that sets no memory limit gets DefaultMemory.
func TestDockerSocketMemoryBound(t *testing.T) {
	b := newBackend(t, docker.Options{Mode: docker.ModeNetNS})
	s := newSandbox(t, sandbox.Options{ID: "sbx-docker-tcp", Backend: b, Memory: 64 << 20, Proxy: sandboxtest.NewProxy()})
	limit := sandbox.TCPMemoryLimit(64 << 20)
	pid := containerPid(t, "sbx-docker-tcp")
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, line := range strings.Split(string(cg), "\n") {
		if p := strings.SplitN(line, ":", 3); len(p) == 3 && p[1] == "memory" {
			got, err := os.ReadFile("/sys/fs/cgroup/memory" + p[2] + "/memory.kmem.tcp.limit_in_bytes")
			if err != nil || strings.TrimSpace(string(got)) != fmt.Sprint(limit) {
				t.Fatalf("the container's kmem.tcp limit: %q %v, want %d", got, err, limit)
			}
		}
	}
	lines := atBound(t, s, probe("tcpfill", "100", "hold")+" & sleep 3; echo DONE; wait")
	if len(lines) != 1 {
		t.Fatalf("tcpfill: %q", lines)
	}
	var total, rmem, wmem int64
	fmt.Sscan(strings.Fields(lines[0])[1], &total)
	fmt.Sscan(strings.Fields(lines[0])[2], &rmem)
	fmt.Sscan(strings.Fields(lines[0])[3], &wmem)
	const progress = 192 << 10 // what the kernel lets each connection past any limit
	if rmem > sandbox.TCPBufferMax || wmem > sandbox.TCPBufferMax || total > limit+100*progress || total < 1<<20 {
		t.Errorf("%q: want at most %d buffered, each socket at most %d", lines[0], limit+100*progress, sandbox.TCPBufferMax)
	}
	d := newSandbox(t, sandbox.Options{ID: "sbx-docker-default-memory", Backend: b})
	_ = d
	st, err := dockerClient(t).ContainerInspect(context.Background(), "airlock-sbx-docker-default-memory")
	if err != nil || st.HostConfig.Memory != sandbox.DefaultMemory() {
		t.Errorf("memory of a container that sets none: %v %v, want DefaultMemory %d", st.HostConfig.Memory, err, sandbox.DefaultMemory())
	}
}

// TestDockerHiddenPaths: airlock's secret files and config in a workspace the container
// writes as its owner read nothing inside.
func TestDockerHiddenPaths(t *testing.T) {
	ws := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(ws+"/.airlock", 0o700))
	must(os.WriteFile(ws+"/.airlock/token", []byte("TOKEN-CANARY\n"), 0o600))
	must(os.WriteFile(ws+"/.airlock/airlock.yaml", []byte("approvals: {}\n"), 0o600))
	must(os.WriteFile(ws+"/README", []byte("readable\n"), 0o600))
	ownedWorkspace(t, ws)
	b := newBackend(t, docker.Options{Mode: docker.ModeNetNS})
	s := newSandbox(t, sandbox.Options{ID: "sbx-docker-hidden", Backend: b, Workspace: ws,
		HiddenPaths: []string{ws + "/.airlock/token", ws + "/.airlock/airlock.yaml"}})
	out, _ := run(t, s, "cat /workspace/.airlock/token /workspace/.airlock/airlock.yaml /workspace/README 2>&1")
	if strings.Contains(out, "CANARY") || strings.Contains(out, "approvals") || !strings.Contains(out, "readable") {
		t.Errorf("the container read what airlock hides, or not the rest: %q", out)
	}
}
