package native_test

import (
	"context"
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

// Pids bounds the commands' processes alone: the holder and its spawner take none of them.
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
		t.Errorf("pids peak %d, want 8", res.Usage.Pids)
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

// A warming moves airlock into the groups it is already in: never into a sandbox's, whose
// limits it would then share.
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

// A warming ends when told, and by itself when no run comes.
func TestWarmingEnds(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a warming moves airlock within its own cgroup: root")
	}
	done, end := native.StartWarmingForTest(native.DefaultCgroupRoot)
	if done == nil {
		t.Skip("airlock is in no v1 memory, pids or cpu group here")
	}
	end()
	select {
	case <-done:
	default:
		t.Fatal("end returned before the warming ended")
	}
	done, _ = native.StartWarmingForTest(native.DefaultCgroupRoot)
	select {
	case <-done:
	case <-time.After(native.WarmForTest + 10*time.Second):
		t.Fatalf("a warming no run followed went on past %v", native.WarmForTest)
	}
	if done, end := native.StartWarmingForTest(os.TempDir()); done != nil {
		end()
		t.Error("a warming started with no group of its own to move within")
	}
}

// An OOM inside the sandbox ends the command, not the sandbox: the holder is not in the
// memory group (the red team's finding when a version put it there: an unlinked file on
// the sandbox's tmpfs filled the group and the OOM killer took the holder).
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
// take the holder, its only candidate were it in the group.
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
