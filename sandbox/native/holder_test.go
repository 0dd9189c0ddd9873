package native

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// These tests speak the holder protocol directly to whichever holder this binary has: the C
// one with cgo (stage_linux.c), the Go one without.

type testHolder struct {
	cmd  *exec.Cmd
	ctrl *os.File
}

func startTestHolder(t *testing.T) *testHolder {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the holder needs root (CI runs as root)")
	}
	parent, child, err := seqpacketPair()
	if err != nil {
		t.Fatal(err)
	}
	h := &testHolder{ctrl: parent, cmd: &exec.Cmd{
		Path: "/proc/self/exe", Args: []string{stageHolder}, Env: []string{},
		ExtraFiles: []*os.File{child},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
				syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
			Pdeathsig: syscall.SIGKILL,
		},
	}}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child.Close()
	t.Cleanup(func() {
		parent.Close()
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
	})
	return h
}

func (h *testHolder) setup(t *testing.T, ops ...mountOp) error {
	t.Helper()
	prog, err := seccompProgram(sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := &setupMessage{Hostname: "holder-test", UIDBase: 100000 + 31999*65536, Seccomp: prog, Landlock: landlockSupport(), Ops: ops}
	return h.setupFields(t, m.fields())
}

func (h *testHolder) setupFields(t *testing.T, f [][]byte) error {
	t.Helper()
	if err := sendFields(int(h.ctrl.Fd()), f); err != nil {
		t.Fatal(err)
	}
	var reply holderReply
	if err := recvJSON(int(h.ctrl.Fd()), &reply); err != nil {
		t.Fatalf("no reply to setup: %v", err)
	}
	return reply.err()
}

func TestHolderReportsTheFailingStepWithItsErrno(t *testing.T) {
	h := startTestHolder(t)
	dir := t.TempDir()
	err := h.setup(t,
		mountOp{Kind: "mount", Desc: "make mounts private", Args: []string{"", "/", "", "278528", ""}},
		mountOp{Kind: "mkdir", Desc: "create mount point", Args: []string{filepath.Join(dir, "a/b")}},
		mountOp{Kind: "mount", Desc: "mount nosuchfs on a/b", Args: []string{"x", filepath.Join(dir, "a/b"), "airlock-nosuchfs", "0", ""}},
		mountOp{Kind: "mkdir", Desc: "never reached", Args: []string{filepath.Join(dir, "c")}},
	)
	if err == nil || !strings.HasPrefix(err.Error(), "mount nosuchfs on a/b: ") || !errors.Is(err, unix.ENODEV) {
		t.Fatalf("setup error = %v, want the failing step and ENODEV", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "c")); !os.IsNotExist(err) {
		t.Errorf("a step after the failure ran (stat: %v)", err)
	}
}

func TestHolderRefusesMalformedSetup(t *testing.T) {
	for name, f := range map[string][][]byte{
		"too few fields": {[]byte("setup"), []byte("h")},
		"wrong kind":     {[]byte("run"), []byte("h"), []byte("1"), []byte("12345678"), []byte("0"), []byte("0"), nil},
		"bad uid base":   {[]byte("setup"), []byte("h"), []byte("x"), []byte("12345678"), []byte("0"), []byte("0"), nil},
		"unknown op":     {[]byte("setup"), []byte("h"), []byte("1"), []byte("12345678"), []byte("0"), []byte("0"), nil, []byte("format"), []byte("d"), []byte("/")},
		"truncated op":   {[]byte("setup"), []byte("h"), []byte("1"), []byte("12345678"), []byte("0"), []byte("0"), nil, []byte("mkdir"), []byte("d")},
	} {
		t.Run(name, func(t *testing.T) {
			h := startTestHolder(t)
			if err := h.setupFields(t, f); err == nil {
				t.Fatal("malformed setup accepted")
			}
		})
	}
}

func TestHolderAnswersAMalformedRunOnItsConnection(t *testing.T) {
	h := startTestHolder(t)
	if err := h.setup(t); err != nil {
		t.Fatal(err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	f := func(s ...string) [][]byte {
		b := make([][]byte, len(s))
		for i := range s {
			b[i] = []byte(s[i])
		}
		return b
	}
	for name, bad := range map[string][][]byte{
		"no arguments":            f("run", "/", "0", "0", "0", "0"),
		"no tty flag":             f("run", "/", "0", "1", "sh", "0"),
		"argument count too big":  f("run", "/", "0", "0", "9223372036854775807", "sh", "0"),
		"negative argument count": f("run", "/", "0", "0", "-1", "sh", "0"),
		"writable count too big":  f("run", "/", "0", "0", "1", "sh", "9223372036854775807", "/tmp"),
		"no writable count":       f("run", "/", "0", "0", "1", "sh"),
		"missing cgroup":          f("run", "/", "1", "0", "1", "true", "0"),
	} {
		connParent, connChild, err := seqpacketPair()
		if err != nil {
			t.Fatal(err)
		}
		fds := []int{int(connChild.Fd()), int(null.Fd()), int(null.Fd()), int(null.Fd())}
		if err := sendFields(int(h.ctrl.Fd()), bad, fds...); err != nil {
			t.Fatal(err)
		}
		connChild.Close()
		var m runMessage
		if err := recvJSON(int(connParent.Fd()), &m); err != nil {
			t.Errorf("%s: no answer on the run connection: %v", name, err)
		} else if !m.Exited || !strings.Contains(m.Error, "malformed run request") {
			t.Errorf("%s: answer = %+v, want exited with a malformed-request error", name, m)
		}
		connParent.Close()
	}
	// The holder still serves: its control socket is open and it is alive.
	if err := h.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("holder gone after malformed requests: %v", err)
	}
}

func TestHolderIsCWithCgoAndGoWithout(t *testing.T) {
	h := startTestHolder(t)
	if err := h.setup(t); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(h.cmd.Process.Pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	var threads string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			threads = strings.TrimSpace(v)
		}
	}
	// The C holder runs before the Go runtime starts: one thread. The Go holder has the
	// runtime's threads.
	if cHolder && threads != "1" {
		t.Errorf("cgo build: holder has %s threads, want 1 (is the C constructor linked?)", threads)
	}
	if !cHolder && threads == "1" {
		t.Errorf("build without cgo: holder has one thread, want the Go runtime's")
	}
}
