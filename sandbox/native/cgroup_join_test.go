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

// The holder joins the sandbox's v1 groups, so that each command is born in them rather
// than moved (docs/performance.md): one more process in the pids group, which its limit
// and its report leave out.
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
		if len(f) == 3 && (f[1] == "pids" || f[1] == "memory") {
			joined++
			if !strings.HasSuffix(f[2], "/airlock/"+s.ID()) {
				t.Errorf("holder's %s group %s, want .../airlock/%s", f[1], f[2], s.ID())
			}
		}
	}
	if joined == 0 {
		t.Errorf("holder in no v1 pids or memory group:\n%s", b)
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

// An OOM inside the sandbox ends the command, not the sandbox, though the holder is in the
// memory group too and, when the memory is in no process's RSS (an unlinked file on the
// sandbox's tmpfs), the group's largest process: every command has oom_score_adj 1000
// (the red team's finding: the holder was killed, and with it every later run).
func TestOOMSparesTheHolder(t *testing.T) {
	s := newSandbox(t, sandbox.Options{Memory: 48 << 20, Timeout: 60 * time.Second})
	v1Group(t, "memory", s.ID())
	holder := native.HolderPID(s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", "cat /proc/self/oom_score_adj; exec 3>/tmp/fill; rm /tmp/fill; head -c 100M /dev/zero >&3; echo wrote $?"}})
	if err != nil {
		t.Fatalf("Run at the memory limit: %v; want the command OOM-killed, reported, and the sandbox alive", err)
	}
	if !res.Usage.OOMKilled {
		t.Errorf("Run at the memory limit: exit %d, oom %v; want an OOM kill reported", res.ExitCode, res.Usage.OOMKilled)
	}
	if got := strings.TrimSpace(string(res.Stdout)); !strings.HasPrefix(got, "1000") {
		t.Errorf("the command's oom_score_adj: %q, want 1000", got)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", holder)); err != nil {
		t.Errorf("the holder (pid %d) died of the sandbox's OOM", holder)
	}
	res, err = s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", "echo alive"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "alive" {
		t.Errorf("next run after the OOM: %v, exit %d, stdout %q; want the sandbox still usable", err, res.ExitCode, res.Stdout)
	}
}
