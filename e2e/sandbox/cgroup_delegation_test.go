//go:build e2e

package sandbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
	"golang.org/x/sys/unix"
)

// TestRootlessDelegatedCgroup: root delegates a cgroup v2 subtree to an ordinary user once
// (`airlock sandbox delegate-cgroup`); that user's `airlock sandbox run`, started inside the
// subtree with sandbox.cgroup_parent naming it, puts the sandbox in a fresh child cgroup:
// its processes, a setsid'd double fork included, are in it; the timeout kills that whole
// tree; the child is gone when airlock exits. A memory or CPU limit the parent's
// controllers cannot enforce is refused, or listed as unenforced when that is accepted. The
// cgroup of an airlock killed mid-run is removed by the user's next run.
func TestRootlessDelegatedCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to delegate a cgroup and switch to another user")
	}
	v2 := native.CgroupV2Mount()
	if v2 == "" {
		t.Skip("no cgroup v2 hierarchy")
	}
	u := rootlessAccount(t)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	bin := e2etest.AirlockBinary(t)
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(v2, fmt.Sprintf("airlock-e2e-%d", os.Getpid()))
	out, err := exec.Command(bin, "sandbox", "delegate-cgroup", "--user", u.Username, "--path", parent).CombinedOutput()
	if err != nil {
		t.Fatalf("delegate-cgroup: %v\n%s", err, out)
	}
	session := filepath.Join(parent, "session")
	t.Cleanup(func() {
		_ = syscall.Rmdir(session)
		if err := syscall.Rmdir(parent); err != nil {
			t.Errorf("remove the delegated cgroup %s: %v (a sandbox's cgroup left in it?)", parent, err)
		}
	})
	if !strings.Contains(string(out), "cgroup_parent: "+parent+"\n") {
		t.Errorf("delegate-cgroup does not print the config line for %s:\n%s", parent, out)
	}
	for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(parent, f), &st); err != nil || int(st.Uid) != uid {
			t.Errorf("%s/%s: owner %d (%v), want %s's uid %d", parent, f, st.Uid, err, u.Username, uid)
		}
	}
	// What starts the user's airlock puts it in the subtree (here a leaf root makes).
	if err := os.Mkdir(session, 0o755); err != nil {
		t.Fatal(err)
	}
	sessionFD, err := syscall.Open(session, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(sessionFD)
	home := t.TempDir()
	if err := os.Chmod(filepath.Dir(home), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, uid, gid); err != nil {
		t.Fatal(err)
	}
	airlock := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, append([]string{"sandbox", "run", "--cgroup-parent", parent}, args...)...)
		cmd.Env = []string{"AIRLOCK_HOME=" + home, "HOME=" + home, "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
			UseCgroupFD: true, CgroupFD: sessionFD}
		return cmd
	}
	exitOf := func(cmd *exec.Cmd, err error) int {
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode()
	}
	offered := strings.Fields(readFile(filepath.Join(parent, "cgroup.subtree_control")))

	t.Run("timeout kills the tree in the sandbox's cgroup", func(t *testing.T) {
		marker := fmt.Sprint(200000 + rand.IntN(700000))
		id := "sbx-deleg-" + marker
		report := filepath.Join(home, "report.json")
		// A double fork into a new session: its sleep's parent is the command's init.
		script := fmt.Sprintf("setsid sh -c '(sleep %s &)'; sleep 1000", marker)
		cmd := airlock("--id", id, "--timeout", "4s", "--report", report, "--", "sh", "-c", script)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var pid int
		for deadline := time.Now().Add(30 * time.Second); pid == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			pid = findProcess("sleep\x00" + marker + "\x00")
		}
		if pid == 0 {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the double-forked sleep never appeared\n%s", stderr.String())
		}
		want := "0::/" + strings.TrimPrefix(filepath.Join(parent, id, "run-1"), v2+"/") + "\n"
		if got := readFile(fmt.Sprintf("/proc/%d/cgroup", pid)); !strings.HasSuffix(got, want) {
			t.Errorf("the setsid'd double-forked sleep's cgroup:\n%s\nwant %s", got, want)
		}
		if code := exitOf(cmd, cmd.Wait()); code != 124 {
			t.Errorf("exit %d, want 124 (timeout)\n%s", code, stderr.String())
		}
		if processAlive(pid, marker) {
			t.Errorf("the double-forked sleep (pid %d) outlived the timeout", pid)
		}
		if _, err := os.Stat(filepath.Join(parent, id)); !os.IsNotExist(err) {
			t.Errorf("the sandbox's cgroup %s is still there (stat: %v)", filepath.Join(parent, id), err)
		}
		var rep struct {
			Unenforced []string `json:"unenforced"`
		}
		if err := json.Unmarshal([]byte(readFile(report)), &rep); err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{"memory", "pids"} {
			listed := strings.Contains(strings.Join(rep.Unenforced, "\n"), "offers no "+c+" controller")
			if listed == slices.Contains(offered, c) {
				t.Errorf("report lists %s as unenforced: %v; the parent's controllers are %v\n%q", c, listed, offered, rep.Unenforced)
			}
		}
	})

	t.Run("limits the parent cannot enforce", func(t *testing.T) {
		if slices.Contains(offered, "memory") {
			t.Skip("the parent offers the memory controller")
		}
		cmd := airlock("--memory", "64M", "--", "true")
		b, err := cmd.CombinedOutput()
		if code := exitOf(cmd, err); code != 1 || !strings.Contains(string(b), "a memory limit cannot be enforced in this rootless native sandbox (the cgroup parent "+parent+" offers no such controller)") ||
			!strings.Contains(string(b), "--allow-unenforced-limits") {
			t.Errorf("--memory 64M: exit %d, want 1 saying the parent cannot enforce it and how to accept that\n%s", code, b)
		}
		report := filepath.Join(home, "report2.json")
		cmd = airlock("--memory", "64M", "--allow-unenforced-limits", "--report", report, "--", "true")
		b, err = cmd.CombinedOutput()
		if code := exitOf(cmd, err); code != 0 {
			t.Fatalf("--memory 64M --allow-unenforced-limits: exit %d, want 0\n%s", code, b)
		}
		want := "memory limit of 67108864 bytes not enforced (the cgroup parent " + parent + " offers no memory controller)"
		if !strings.Contains(readFile(report), want) || strings.Count(string(b), want) != 1 {
			t.Errorf("report and notice (once) should say %q\nreport: %s\noutput: %s", want, readFile(report), b)
		}
	})

	t.Run("a crashed airlock's cgroup is removed by the next run", func(t *testing.T) {
		marker := fmt.Sprint(200000 + rand.IntN(700000))
		id := "sbx-deleg-crash-" + marker
		cmd := airlock("--id", id, "--", "sleep", marker)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var pid int
		for deadline := time.Now().Add(30 * time.Second); pid == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			pid = findProcess("sleep\x00" + marker + "\x00")
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if pid == 0 {
			t.Fatal("the sandboxed sleep never appeared")
		}
		for deadline := time.Now().Add(10 * time.Second); processAlive(pid, marker) && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		}
		if processAlive(pid, marker) {
			t.Errorf("the sandboxed sleep (pid %d) outlived the killed airlock", pid)
		}
		if _, err := os.Stat(filepath.Join(parent, id)); err != nil {
			t.Fatalf("no cgroup %s left by the killed airlock for the next run to remove: %v", filepath.Join(parent, id), err)
		}
		next := airlock("--", "true")
		if b, err := next.CombinedOutput(); exitOf(next, err) != 0 {
			t.Fatalf("the next run: %s", b)
		}
		if _, err := os.Stat(filepath.Join(parent, id)); !os.IsNotExist(err) {
			t.Errorf("the crashed sandbox's cgroup %s is still there after the next run (stat: %v)", filepath.Join(parent, id), err)
		}
	})

	if left, _ := filepath.Glob(filepath.Join(parent, "sbx-*")); len(left) > 0 {
		t.Errorf("sandbox cgroups left in the parent: %v", left)
	}
}

// rootlessAccount is e2etest.RootlessUser, made if missing.
func rootlessAccount(t *testing.T) *user.User {
	t.Helper()
	u, err := user.Lookup(e2etest.RootlessUser)
	if err != nil {
		if out, err := exec.Command("useradd", "--create-home", "--shell", "/bin/sh", e2etest.RootlessUser).CombinedOutput(); err != nil {
			t.Fatalf("useradd: %v\n%s", err, out)
		}
		if u, err = user.Lookup(e2etest.RootlessUser); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
