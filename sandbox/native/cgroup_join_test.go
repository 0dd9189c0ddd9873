package native_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

// v1Group is the sandbox id's group in the v1 hierarchy of controller, "" without one.
func v1Group(t *testing.T, controller, id string) string {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup", controller, "airlock", id)
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("no v1 %s group for the sandbox (%v)", controller, err)
	}
	return dir
}

// The holder joins the sandbox's v1 pids and cpu groups, so that each command is born in
// them rather than moved (docs/performance.md): one more process in the pids group, which
// its limit and its report leave out. It stays out of the memory group.
func TestHolderJoinsTheV1Groups(t *testing.T) {
	if !native.CStages {
		t.Skip("the Go holder (a build without cgo) moves each command into the groups instead")
	}
	s := newSandbox(t, sandbox.Options{Pids: 8})
	dir := v1Group(t, "pids", s.ID())
	run(t, s, "true") // a run waits until the holder has joined
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", native.HolderPID(s)))
	if err != nil {
		t.Fatal(err)
	}
	joined := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		in := strings.HasSuffix(f[2], "/airlock/"+s.ID())
		switch f[1] {
		case "pids":
			joined++
			if !in {
				t.Errorf("holder's pids group %s, want .../airlock/%s", f[2], s.ID())
			}
		case "memory":
			// Memory that outlives its processes could leave the holder the OOM killer's
			// only choice there (TestOOMSparesTheHolderWhenNoCommandIsLeft).
			if in {
				t.Errorf("holder in the sandbox's memory group %s", f[2])
			}
		}
	}
	if joined == 0 {
		t.Errorf("holder in no v1 pids group:\n%s", b)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "pids.max")); strings.TrimSpace(string(got)) != "9" {
		t.Errorf("pids.max %q, want 9 (8 for the commands, 1 for the holder)", got)
	}
}

// Pids bounds the commands' processes alone: the holder in the group takes none of them.
func TestPidsLimitIsTheCommandsOwn(t *testing.T) {
	if !native.CStages {
		t.Skip("the Go holder's run init is a Go process, whose threads count as pids")
	}
	s := newSandbox(t, sandbox.Options{Pids: 8, Timeout: 30 * time.Second})
	v1Group(t, "pids", s.ID())
	// The run's init and python are two of the eight; each child sleeps until killed.
	res := run(t, s, `exec python3 -c '
import os, signal
kids = []
for i in range(20):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    kids.append(pid)
print(len(kids))
for k in kids:
    os.kill(k, signal.SIGKILL)
    os.waitpid(k, 0)
'`)
	n, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("output %q (stderr %q)", res.Stdout, res.Stderr)
	}
	if n != 6 {
		t.Errorf("forked %d children under pids=8 (init and python are the other two), want 6", n)
	}
	if res.Usage.Pids != 8 {
		t.Errorf("pids peak %d, want 8 (the holder is not a command's)", res.Usage.Pids)
	}
}

// A holder that could not join the sandbox's groups starts nothing: a command would run
// outside its limits.
func TestNoCommandStartsOutsideItsGroups(t *testing.T) {
	s := newSandbox(t, sandbox.Options{})
	cause := errors.New("join cgroup: test")
	native.FailJoinForTest(s, cause)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 {
		res, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", "echo ran"}})
		if !errors.Is(err, cause) || len(res.Stdout) != 0 {
			t.Fatalf("Run after a failed join: %v, stdout %q; want the join's error and nothing run", err, res.Stdout)
		}
	}
}

func TestV1PathReadsAControllersGroup(t *testing.T) {
	listing := "12:pids:/user.slice/u1\n4:cpu,cpuacct:/a/b\n1:name=systemd:/x\n0::/y\n"
	for _, c := range []struct {
		controller, want string
		ok               bool
	}{
		{"pids", "/user.slice/u1", true},
		{"cpu", "/a/b", true},
		{"cpuacct", "/a/b", true},
		{"memory", "", false},
		{"systemd", "", false},
		{"", "", false},
	} {
		got, ok := native.V1PathForTest(listing, c.controller)
		if got != c.want || ok != c.ok {
			t.Errorf("v1Path(%q) = %q, %v; want %q, %v", c.controller, got, ok, c.want, c.ok)
		}
	}
}

// The join's warming moves airlock into the groups it is already in: never into a
// sandbox's, whose limits it would then share.
func TestAirlockStaysInItsOwnGroups(t *testing.T) {
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s := newSandbox(t, sandbox.Options{})
		run(t, s, "true")
		after, _ := os.ReadFile("/proc/self/cgroup")
		if string(after) != string(before) {
			t.Fatalf("airlock's groups changed when a sandbox was made:\nbefore\n%s\nafter\n%s", before, after)
		}
	}
}

// A Create that fails before its holder starts ends the join's warming, which then says
// why no holder joined.
func TestJoinEndsWithoutAHolder(t *testing.T) {
	done := make(chan error, 1)
	go func() { done <- native.JoinWithoutHolderForTest(t.TempDir()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no holder") {
			t.Errorf("join without a holder: %v, want a no-holder error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the join kept waiting for a holder that never started")
	}
}

// An OOM inside the sandbox ends the command, not the sandbox: the holder is not in the
// memory group (the red team's finding, when it was: an unlinked file on the sandbox's
// tmpfs filled the group and the OOM killer took the holder, its largest process).
func TestOOMSparesTheHolder(t *testing.T) {
	s := newSandbox(t, sandbox.Options{Memory: 48 << 20, Timeout: 60 * time.Second})
	v1Group(t, "memory", s.ID())
	holder := native.HolderPID(s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", "exec 3>/tmp/fill; rm /tmp/fill; head -c 100M /dev/zero >&3; echo wrote $?"}})
	if err != nil {
		t.Fatalf("Run at the memory limit: %v; want the command OOM-killed, reported, and the sandbox alive", err)
	}
	if !res.Usage.OOMKilled {
		t.Errorf("Run at the memory limit: exit %d, oom %v; want an OOM kill reported", res.ExitCode, res.Usage.OOMKilled)
	}
	if !processAlive(holder) {
		t.Errorf("the holder (pid %d) died of the sandbox's OOM", holder)
	}
	res, err = s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", "echo alive"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "alive" {
		t.Errorf("next run after the OOM: %v, exit %d, stdout %q; want the sandbox still usable", err, res.ExitCode, res.Stdout)
	}
}

// processAlive reports whether pid is a live (not zombie) process.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// The red team's second pass: memory that outlives its processes (a file on the sandbox's
// tmpfs) fills the group with no command left in it; the next run's request, whose
// arguments the holder copies into pages it had not touched, must not make the OOM killer
// take the holder, its only candidate if it were in the group.
func TestOOMSparesTheHolderWhenNoCommandIsLeft(t *testing.T) {
	holderSurvivesAFullGroup(t, 0, "head -c 100M /dev/zero > /tmp/fill")
}

// The same with most of the memory in System V shared memory segments, which outlive their
// processes too, and the last few MB in an 8 MB /tmp.
func TestOOMSparesTheHolderAfterSysVShm(t *testing.T) {
	holderSurvivesAFullGroup(t, 8<<20, `for i in 1 2 3; do python3 -c '
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
sz = 60 << 20
a = libc.shmat(libc.shmget(1, sz, 0o1600), None, 0)
for off in range(0, sz, 4096):
    ctypes.memset(a + off, 1, 1)
'; done; head -c 100M /dev/zero > /tmp/fill`)
}

func holderSurvivesAFullGroup(t *testing.T, tmpSize int64, fill string) {
	s := newSandbox(t, sandbox.Options{Memory: 48 << 20, TmpSize: tmpSize, Timeout: 60 * time.Second})
	v1Group(t, "memory", s.ID())
	holder := native.HolderPID(s)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Fill until the group's limit kills the writer: what it wrote stays.
	res, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", fill}})
	t.Logf("fill: err %v exit %d oom %v", err, res.ExitCode, res.Usage.OOMKilled)
	big := strings.Repeat("x", 120<<10) // under 128 KiB, for the Go holder too
	var errs []string
	for range 6 {
		// Top up what the last kill freed, with a process too small to free much itself.
		_, _ = s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", "exec head -c 100M /dev/zero >>/tmp/fill"}})
		if _, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", "echo alive", "sh", big}}); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for i := 0; i < 20 && processAlive(holder); i++ { // a killed pid 1 takes a moment to go
		time.Sleep(50 * time.Millisecond)
	}
	if !processAlive(holder) {
		t.Errorf("the holder (pid %d) was OOM-killed with no command in the group, and the sandbox with it; later runs: %s",
			holder, strings.Join(errs, "; "))
	}
}
