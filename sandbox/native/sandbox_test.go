package native_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

func TestRunOutputExitAndUser(t *testing.T) {
	s := newSandbox(t, sandbox.Options{})
	res := run(t, s, "echo hello; echo oops >&2; id -u; exit 3")
	if got, want := string(res.Stdout), "hello\n1000\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := string(res.Stderr), "oops\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	if res.ExitCode != 3 || res.TimedOut {
		t.Errorf("exit = %d timed out %v, want 3 false", res.ExitCode, res.TimedOut)
	}
}

func TestCommandsRunInTheSandboxCgroups(t *testing.T) {
	s := newSandbox(t, sandbox.Options{})
	for n := 1; n <= 2; n++ {
		res := run(t, s, "cat /proc/self/cgroup")
		want := 0
		for _, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
			// hierarchy-id:controllers:path; v2 is "0::path", v1 names its controllers.
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				t.Fatalf("/proc/self/cgroup line %q", line)
			}
			switch {
			case f[1] == "":
				want++
				if suffix := fmt.Sprintf("/airlock/%s/run-%d", s.ID(), n); !strings.HasSuffix(f[2], suffix) {
					t.Errorf("run %d: v2 group %s, want .../%s", n, f[2], suffix)
				}
			case strings.Contains(","+f[1]+",", ",memory,") || strings.Contains(","+f[1]+",", ",pids,"):
				want++
				if suffix := "/airlock/" + s.ID(); !strings.HasSuffix(f[2], suffix) {
					t.Errorf("run %d: v1 %s group %s, want .../%s", n, f[1], f[2], suffix)
				}
			}
		}
		if want == 0 {
			t.Fatalf("no v2, memory or pids group in %q", res.Stdout)
		}
	}
}

func TestCommandThatCannotStart(t *testing.T) {
	s := newSandbox(t, sandbox.Options{})
	run(t, s, `printf '#!/nonexistent/interpreter\n' > /tmp/script && chmod +x /tmp/script`)
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"airlock-no-such-command"}, 127, `exec: "airlock-no-such-command": executable file not found in $PATH`},
		{[]string{"/etc/passwd"}, 127, `exec: "/etc/passwd": `},
		{[]string{"/tmp/script"}, 126, "exec /tmp/script: "},
	} {
		res, err := s.Run(context.Background(), sandbox.Command{Args: c.args})
		if err != nil {
			t.Fatalf("Run %v: %v", c.args, err)
		}
		if res.ExitCode != c.code || !strings.Contains(string(res.Stderr), c.stderr) {
			t.Errorf("Run %v: exit %d stderr %q, want %d and %q", c.args, res.ExitCode, res.Stderr, c.code, c.stderr)
		}
	}
}

func TestStreamsStdinAndBoundsOutput(t *testing.T) {
	s := newSandbox(t, sandbox.Options{})
	var streamed strings.Builder
	res, err := s.Run(context.Background(), sandbox.Command{
		Args: []string{"sh", "-c", "cat; head -c 5000 /dev/zero | tr '\\0' x"}, Stdin: strings.NewReader("in\n"),
		Stdout: &streamed, OutputLimit: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(res.Stdout), 100; got != want || !res.Truncated {
		t.Errorf("captured %d bytes truncated %v, want %d true", got, res.Truncated, want)
	}
	if got, want := streamed.Len(), 5003; got != want {
		t.Errorf("streamed %d bytes, want %d", got, want)
	}
	if !strings.HasPrefix(string(res.Stdout), "in\nxx") {
		t.Errorf("stdout starts %q, want the input then x", res.Stdout[:10])
	}
}

func TestEnvironmentIsBuiltNotInherited(t *testing.T) {
	const canary = "canary-7d1f0b9e"
	t.Setenv("AIRLOCK_TEST_CANARY", canary)
	s := newSandbox(t, sandbox.Options{CABundle: []byte("-----PEM-----\n"), Env: []string{"FOO=bar", "LANG=de_DE.UTF-8"}})
	res := run(t, s, "env; cat /run/airlock/ca-bundle.pem; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'")
	out := string(res.Stdout)
	if strings.Contains(out, canary) {
		t.Errorf("parent's canary visible inside:\n%s", out)
	}
	for _, want := range []string{
		"PATH=" + sandbox.DefaultPath, "HOME=/home/sandbox", "LANG=de_DE.UTF-8", "FOO=bar",
		"HTTP_PROXY=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128", "NO_PROXY=\n",
		"NODE_USE_ENV_PROXY=1", "SSL_CERT_FILE=/run/airlock/ca-bundle.pem", "PIP_CERT=/run/airlock/ca-bundle.pem",
		"GIT_SSL_CAINFO=/run/airlock/ca-bundle.pem", "npm_config_cafile=/run/airlock/ca-bundle.pem", "-----PEM-----",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("environment lacks %q:\n%s", want, out)
		}
	}
}

// TestCommandEnvironmentIsExactlyItsOwn: the setting the Go stages start their init with
// (GOMAXPROCS, shim_linux.go) never reaches the command, and a GOMAXPROCS of the command's
// own arrives as given, wherever it is in the environment (an image's environment comes
// first), with either holder.
func TestCommandEnvironmentIsExactlyItsOwn(t *testing.T) {
	s := newSandbox(t, sandbox.Options{})
	if res := run(t, s, "env"); strings.Contains(string(res.Stdout), "GOMAXPROCS") {
		t.Errorf("the command's environment has a GOMAXPROCS it was not given:\n%s", res.Stdout)
	}
	for _, o := range []sandbox.Options{
		{Env: []string{"GOMAXPROCS=7"}},
		{Env: []string{"GOMAXPROCS=1"}},
		{Image: &sandbox.ImageConfig{Env: []string{"GOMAXPROCS=1", "AAA=first"}}},
		{Image: &sandbox.ImageConfig{Env: []string{"GOMAXPROCS=64", "AAA=first"}}},
	} {
		want, script := o.Env, "env | grep -E '^(GOMAXPROCS|AAA)=' | sort"
		if o.Image != nil {
			o.Rootfs, want = busyboxRoot(t), o.Image.Env
			script = "busybox env | busybox grep -E '^(GOMAXPROCS|AAA)=' | busybox sort"
		}
		res := run(t, newSandbox(t, o), script)
		if got, w := strings.Fields(string(res.Stdout)), slices.Sorted(slices.Values(want)); !slices.Equal(got, w) {
			t.Errorf("environment %q arrived as %q, want %q", want, got, w)
		}
	}
}

// TestInitEnvironmentIsItsOwn: the Go twin's init (the run's pid 1, whose threads count
// against the pids limit) starts with GOMAXPROCS=1 and nothing of the command's
// environment, so a command's GOMAXPROCS=64 cannot make it keep more threads (it had 21 in
// the airlock binary when it shared the command's environment). The C init has no Go
// runtime: nothing to check there.
func TestInitEnvironmentIsItsOwn(t *testing.T) {
	s := newSandbox(t, sandbox.Options{Env: []string{"GOMAXPROCS=64", "SECRET_LOOKING=x"}})
	done := make(chan sandbox.Result, 1)
	go func() { done <- run(t, s, "sleep 2") }()
	deadline := time.Now().Add(1500 * time.Millisecond)
	found := 0
	for time.Now().Before(deadline) && found == 0 {
		time.Sleep(100 * time.Millisecond)
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			cmdline, _ := os.ReadFile(d + "/cmdline")
			if !bytes.HasPrefix(cmdline, []byte(native.StageExecForTest+"\x00")) {
				continue
			}
			env, err := os.ReadFile(d + "/environ")
			if err != nil {
				continue // gone meanwhile
			}
			found++
			if string(env) != "GOMAXPROCS=1\x00" {
				t.Errorf("the init's environment is %q; want only GOMAXPROCS=1", env)
			}
		}
	}
	<-done
	if found == 0 && !native.CStages {
		t.Error("no exec stage seen while the command ran")
	}
}

func TestWorkspaceModes(t *testing.T) {
	tests := []struct {
		mode      sandbox.WorkspaceMode
		wantWrite bool // the write succeeds inside
		wantHost  bool // and reaches the host directory
	}{
		{sandbox.WorkspaceRW, true, true},
		{sandbox.WorkspaceRO, false, false},
		{sandbox.WorkspaceCoW, true, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			ws := t.TempDir()
			if err := os.WriteFile(filepath.Join(ws, "keep.txt"), []byte("one\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			s := newSandbox(t, sandbox.Options{Workspace: ws, WorkspaceMode: tt.mode})
			res := run(t, s, "cat keep.txt && echo new > new.txt && echo two >> keep.txt")
			if got := res.ExitCode == 0; got != tt.wantWrite {
				t.Fatalf("write succeeded = %v, want %v (stderr %q)", got, tt.wantWrite, res.Stderr)
			}
			_, err := os.Stat(filepath.Join(ws, "new.txt"))
			if got := err == nil; got != tt.wantHost {
				t.Errorf("new.txt on host = %v, want %v", got, tt.wantHost)
			}
			if tt.wantHost {
				var st syscall.Stat_t
				if err := syscall.Stat(filepath.Join(ws, "new.txt"), &st); err != nil {
					t.Fatal(err)
				}
				if int(st.Uid) != os.Geteuid() {
					t.Errorf("new.txt owned by uid %d on host, want the workspace owner %d", st.Uid, os.Geteuid())
				}
			}
		})
	}
}

func TestCopyOnWriteChangesAndPatch(t *testing.T) {
	ws := t.TempDir()
	for name, body := range map[string]string{"keep.txt": "same\n", "edit.txt": "old\n", "gone.txt": "bye\n"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := newSandbox(t, sandbox.Options{Workspace: ws, WorkspaceMode: sandbox.WorkspaceCoW})
	if res := run(t, s, "echo new > edit.txt && rm gone.txt && mkdir d && echo hi > d/add.txt"); res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	changes, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	want := []sandbox.Change{{Path: "d/", Kind: "added"}, {Path: "d/add.txt", Kind: "added"}, {Path: "edit.txt", Kind: "modified"}, {Path: "gone.txt", Kind: "deleted"}}
	if len(changes) != len(want) {
		t.Fatalf("changes = %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Errorf("change %d = %v, want %v", i, changes[i], want[i])
		}
	}
	patch, err := s.Patch()
	if err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{"--- a/edit.txt", "+++ b/edit.txt", "-old", "+new", "+++ b/d/add.txt", "+hi", "--- a/gone.txt", "-bye"} {
		if !strings.Contains(string(patch), frag) {
			t.Errorf("patch lacks %q:\n%s", frag, patch)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "edit.txt")); string(b) != "old\n" {
		t.Errorf("host edit.txt = %q, want it untouched", b)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	after, err := s.Changes()
	if err != nil || len(after) != len(want) {
		t.Errorf("Changes after Close = %v, %v; want the %d changes", after, err, len(want))
	}
	if rep := s.Report(); len(rep.Changes) != len(want) {
		t.Errorf("report changes = %v, want %d", rep.Changes, len(want))
	}
}

func TestTimeoutKillsWholeTree(t *testing.T) {
	s := newSandbox(t, sandbox.Options{Timeout: 2 * time.Second})
	start := time.Now()
	res := run(t, s, "(setsid sh -c 'sleep 1000' &); sleep 1000")
	if !res.TimedOut || res.ExitCode != sandbox.ExitTimeout {
		t.Fatalf("timed out %v exit %d, want true %d", res.TimedOut, res.ExitCode, sandbox.ExitTimeout)
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("run took %v after a 2s timeout", time.Since(start))
	}
	res = run(t, s, "ps -eo comm=")
	if strings.Contains(string(res.Stdout), "sleep") {
		t.Errorf("a process survived the timeout:\n%s", res.Stdout)
	}
}

func TestPidsLimitBoundsForkBomb(t *testing.T) {
	s := newSandbox(t, sandbox.Options{Pids: 16, Timeout: 30 * time.Second})
	res := run(t, s, `exec python3 -c '
import subprocess
ok = failed = 0
procs = []
for i in range(40):
    try:
        procs.append(subprocess.Popen(["sleep", "30"]))
        ok += 1
    except OSError:
        failed += 1
for p in procs:
    p.kill()
print(ok, failed)
'`)
	var ok, failed int
	if _, err := fmt.Sscan(string(res.Stdout), &ok, &failed); err != nil {
		t.Fatalf("output %q (stderr %q): %v", res.Stdout, res.Stderr, err)
	}
	if ok >= 16 || failed == 0 {
		t.Errorf("started %d, refused %d of 40 processes under pids=16; want fewer than 16 started", ok, failed)
	}
}

func TestMemoryLimit(t *testing.T) {
	s := newSandbox(t, sandbox.Options{Memory: 64 << 20})
	res := run(t, s, "exec python3 -c 'b = bytearray(300 << 20); print(len(b))'")
	if res.ExitCode == 0 {
		t.Fatalf("allocating 300 MB under a 64 MB limit succeeded: %s", res.Stdout)
	}
	if !res.Usage.OOMKilled && res.Signal != "SIGKILL" {
		t.Errorf("exit %d signal %q oom %v, want an OOM kill", res.ExitCode, res.Signal, res.Usage.OOMKilled)
	}
}

// TestCommandHasAnInit: a command runs under an init of its own (pid 1 of its PID
// namespace, as docker run --init): orphans it leaves behind are reaped instead of piling up
// as zombies against the pids limit, and a command killed by a signal, even one it sent
// itself, is reported as killed by that signal.
func TestCommandHasAnInit(t *testing.T) {
	s := newSandbox(t, sandbox.Options{})
	// python does not reap children it did not start; 20 orphans exit while it sleeps.
	script := `exec python3 -c '
import os, subprocess, time
for _ in range(20):
    subprocess.Popen(["sh", "-c", "sleep 0.1 &"]).wait()
time.sleep(1)
zombies = 0
for p in os.listdir("/proc"):
    try:
        if p.isdigit() and open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[0] == "Z":
            zombies += 1
    except OSError:
        pass
print("zombies", zombies)
print("pid", os.getpid())
'`
	res := run(t, s, script)
	if !strings.Contains(string(res.Stdout), "zombies 0\n") {
		t.Errorf("orphans were not reaped: %q (stderr %q)", res.Stdout, res.Stderr)
	}
	if strings.Contains(string(res.Stdout), "pid 1\n") {
		t.Errorf("the command is pid 1 of its namespace: %q", res.Stdout)
	}
	res = run(t, s, "kill -KILL $$")
	if res.ExitCode != 137 || res.Signal != "SIGKILL" {
		t.Errorf("command that killed itself: exit %d signal %q, want 137 SIGKILL", res.ExitCode, res.Signal)
	}
}

// TestSandboxOutlivesTheThreadThatCreatedIt: a parent-death signal follows the thread that
// forked the child. A sandbox created from a goroutine that then ends locked to its OS
// thread (which the Go runtime terminates) must keep running.
func TestSandboxOutlivesTheThreadThatCreatedIt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("native sandboxes need root (CI runs as root)")
	}
	var s *sandbox.Sandbox
	var err error
	for s == nil && err == nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			if syscall.Gettid() == os.Getpid() {
				// The main thread is never terminated (the runtime parks it): try again
				// on another.
				runtime.UnlockOSThread()
				return
			}
			// Never unlocked: the runtime terminates this thread when the goroutine ends.
			s, err = sandbox.New(context.Background(), sandbox.Options{Backend: &native.Native{StateDir: testState}})
		}()
		<-done
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	time.Sleep(200 * time.Millisecond) // the thread's exit, and any signal it sends
	if res := run(t, s, "echo alive"); string(res.Stdout) != "alive\n" {
		t.Errorf("sandbox after its creating thread ended: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}

// TestInitIgnoresSignalsFromInside: the init ignores what a command sends pid 1, as any
// init does, with both holders; the command goes on.
func TestInitIgnoresSignalsFromInside(t *testing.T) {
	s := newSandbox(t, sandbox.Options{})
	res := run(t, s, "for s in INT TERM HUP QUIT USR1 USR2 ABRT TRAP SYS PIPE ALRM; do kill -$s 1; done; sleep 0.2; echo still here")
	if string(res.Stdout) != "still here\n" || res.ExitCode != 0 {
		t.Errorf("after signalling pid 1: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// Nor can the command reach the init's descriptors (its status pipe among them).
	// /proc shows the sandbox's PID namespace; the init is the shell's parent there.
	res = run(t, s, `read -r pid comm state init rest < /proc/self/stat; echo "init $init"; ls -l /proc/$init/fd/ 2>&1; echo x > /proc/$init/fd/3 && echo WROTE`)
	if strings.Contains(string(res.Stdout), "WROTE") {
		t.Errorf("the command wrote to its init's status pipe: %q", res.Stdout)
	}
}

// TestHiddenPaths: airlock's config and secret files, and its home, read nothing inside
// wherever the sandbox would see them (the workspace, whose owner's files it may read; a
// read-only path), through a link too, and cannot be written; the rest stays readable.
func TestHiddenPaths(t *testing.T) {
	ws := t.TempDir()
	ro, err := os.MkdirTemp("/mnt", "airlock-hidden-") // a read-only path outside /tmp, which the sandbox's own hides
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(ro) })
	for p, body := range map[string]string{".airlock/airlock.yaml": "approvals: {}\n", ".airlock/token": "SECRET-TOKEN\n",
		"README": "readable\n"} {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(ws, p)), 0o700))
		must(t, os.WriteFile(filepath.Join(ws, p), []byte(body), 0o600))
	}
	must(t, os.Symlink(".airlock/token", filepath.Join(ws, "token-link")))
	must(t, os.MkdirAll(filepath.Join(ro, "home", "ca"), 0o700))
	must(t, os.WriteFile(filepath.Join(ro, "home", "ca", "ca-key.pem"), []byte("SECRET-KEY\n"), 0o600))
	for _, mode := range []sandbox.WorkspaceMode{sandbox.WorkspaceRW, sandbox.WorkspaceCoW} {
		t.Run(string(mode), func(t *testing.T) {
			s := newSandbox(t, sandbox.Options{Workspace: ws, WorkspaceMode: mode, ReadOnlyPaths: []string{ro},
				HiddenPaths: []string{filepath.Join(ws, ".airlock", "airlock.yaml"), filepath.Join(ws, "token-link"),
					filepath.Join(ro, "home"), "/nonexistent/airlock.yaml"}})
			res := run(t, s, "cd /workspace; cat .airlock/airlock.yaml .airlock/token token-link "+ro+"/home/ca/ca-key.pem; ls -A "+ro+"/home; "+
				"echo x > .airlock/token && echo WROTE; cat README")
			out := string(res.Stdout)
			if strings.Contains(out, "SECRET") || strings.Contains(out, "approvals") || strings.Contains(out, "WROTE") || strings.Contains(out, "ca") {
				t.Errorf("the sandbox read or wrote what airlock hides:\n%s%s", out, res.Stderr)
			}
			if !strings.Contains(out, "readable") {
				t.Errorf("the rest of the workspace is not readable:\n%s%s", out, res.Stderr)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".airlock", "token")); string(b) != "SECRET-TOKEN\n" {
		t.Errorf("the host's file changed: %q", b)
	}
}
