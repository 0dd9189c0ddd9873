package native

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The holder is pid 1 of a sandbox's PID namespace. It runs as root of the initial user
// namespace (it builds the mount tree, which only that root may do with idmapped mounts) and
// executes no sandboxed code itself: every command runs in a child it starts in a fresh user
// and PID namespace, which drops every privilege before exec. When the parent closes the
// control socket or dies (Pdeathsig), the holder exits and the kernel kills every process
// left in the sandbox.
//
// With cgo the holder is C code run before the Go runtime starts (stage_linux.c), which
// makes a sandbox several times faster to create; this Go holder, with the exec stage in
// shim_linux.go, is what a binary built without cgo runs. Both read the same messages.

const holderCtrlFD = 3

func runHolder() error {
	ctrl := holderCtrlFD
	f, files, err := recvFields(ctrl)
	closeFiles(files)
	if err != nil {
		return fmt.Errorf("read setup: %w", err)
	}
	setup, err := parseSetup(f)
	if err != nil {
		_ = sendJSON(ctrl, holderReply{Error: err.Error()})
		return err
	}
	if reply := applySetup(setup); reply.Error != "" {
		_ = sendJSON(ctrl, reply)
		return reply.err()
	}
	if err := sendJSON(ctrl, holderReply{}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for {
		f, files, err := recvFields(ctrl)
		if errors.Is(err, os.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		req, err := parseRun(f)
		if err != nil {
			if len(files) > 0 {
				_ = sendJSON(int(files[0].Fd()), runMessage{Exited: true, Error: err.Error()})
			}
			closeFiles(files)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveRun(setup, req, files)
		}()
	}
}

func parseSetup(f [][]byte) (*setupMessage, error) {
	if len(f) < 7 || string(f[0]) != "setup" {
		return nil, errors.New("malformed setup message")
	}
	m := &setupMessage{Hostname: string(f[1]), Seccomp: f[3]}
	var err error
	if m.UIDBase, err = strconv.Atoi(string(f[2])); err != nil {
		return nil, fmt.Errorf("setup: uid base: %w", err)
	}
	if m.Landlock.HandledFS, err = strconv.ParseUint(string(f[4]), 10, 64); err != nil {
		return nil, fmt.Errorf("setup: landlock: %w", err)
	}
	if m.Landlock.Scoped, err = strconv.ParseUint(string(f[5]), 10, 64); err != nil {
		return nil, fmt.Errorf("setup: landlock: %w", err)
	}
	if len(f[6]) > 0 {
		for _, s := range strings.Split(string(f[6]), ",") {
			fd, err := strconv.Atoi(s)
			if err != nil {
				return nil, fmt.Errorf("setup: cgroup descriptor: %w", err)
			}
			m.CgroupFDs = append(m.CgroupFDs, fd)
		}
	}
	for rest := f[7:]; len(rest) > 0; {
		if len(rest) < 2 {
			return nil, errors.New("setup: truncated mount op")
		}
		kind := string(rest[0])
		n, ok := opArgs[kind]
		if !ok || len(rest) < 2+n {
			return nil, fmt.Errorf("setup: bad mount op %q", kind)
		}
		op := mountOp{Kind: kind, Desc: string(rest[1])}
		for _, a := range rest[2 : 2+n] {
			op.Args = append(op.Args, string(a))
		}
		m.Ops = append(m.Ops, op)
		rest = rest[2+n:]
	}
	return m, nil
}

func parseRun(f [][]byte) (*runRequest, error) {
	if len(f) < 6 || string(f[0]) != "run" {
		return nil, errors.New("malformed run request")
	}
	r := &runRequest{Dir: string(f[1]), CgroupProcs: string(f[2]) == "1", TTY: string(f[3]) == "1"}
	strs := func(b [][]byte) []string {
		s := make([]string, len(b))
		for i := range b {
			s[i] = string(b[i])
		}
		return s
	}
	n, err := strconv.Atoi(string(f[4]))
	if err != nil || n < 1 || n >= len(f)-5 {
		return nil, errors.New("malformed run request")
	}
	r.Args = strs(f[5 : 5+n])
	rest := f[5+n:]
	w, err := strconv.Atoi(string(rest[0]))
	if err != nil || w < 0 || w > len(rest)-1 {
		return nil, errors.New("malformed run request")
	}
	r.Writable = strs(rest[1 : 1+w])
	r.Env = strs(rest[1+w:])
	return r, nil
}

// applySetup makes the holder non-dumpable, names the host and carries out the mount plan.
func applySetup(m *setupMessage) holderReply {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return replyOf("set non-dumpable", err)
	}
	if err := unix.Sethostname([]byte(m.Hostname)); err != nil {
		return replyOf("set hostname", err)
	}
	for _, op := range m.Ops {
		if err := applyOp(op); err != nil {
			return replyOf(op.Desc, err)
		}
	}
	return holderReply{}
}

func replyOf(desc string, err error) holderReply {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return holderReply{Error: desc, Errno: int(errno)}
	}
	return holderReply{Error: fmt.Sprintf("%s: %v", desc, err)}
}

func applyOp(op mountOp) error {
	a := op.Args
	switch op.Kind {
	case "mount":
		flags, err := strconv.ParseUint(a[3], 10, 64)
		if err != nil {
			return err
		}
		return unix.Mount(a[0], a[1], a[2], uintptr(flags), a[4])
	case "mkdir":
		return os.MkdirAll(a[0], 0o755)
	case "touch":
		return touch(a[0])
	case "symlink":
		return os.Symlink(a[0], a[1])
	case "write":
		if err := os.MkdirAll(filepath.Dir(a[0]), 0o755); err != nil {
			return err
		}
		return os.WriteFile(a[0], []byte(a[1]), 0o644)
	case "tree":
		attr, err1 := strconv.ParseUint(a[2], 10, 64)
		fd, err2 := strconv.Atoi(a[3])
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		return moveTree(a[0], a[1], attr, fd)
	case "mknod":
		mode, err1 := strconv.ParseUint(a[1], 10, 32)
		dev, err2 := strconv.ParseUint(a[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		if err := unix.Mknod(a[0], uint32(mode), int(dev)); err != nil {
			return err
		}
		return unix.Chmod(a[0], uint32(mode)&0o7777)
	case "pivot":
		return pivot(a[0])
	}
	return fmt.Errorf("unknown op %q", op.Kind)
}

// moveTree attaches a clone of src at dst with the given mount attributes. src is
// resolved with no symbolic link in any component (see move_tree in stage_linux.c).
func moveTree(src, dst string, attrSet uint64, usernsFD int) error {
	dir, err := openNoSymlinks(src)
	if err != nil {
		return err
	}
	tree, err := unix.OpenTree(dir, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	unix.Close(dir)
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: attrSet}
	if usernsFD >= 0 {
		attr.Userns_fd = uint64(usernsFD)
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return unix.MoveMount(tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return err
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return err
	}
	return unix.Chdir("/")
}

func touch(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// execConfig is what the Go holder tells a command's exec stage (as its argv[1]).
type execConfig struct {
	Args     []string      `json:"args"`
	Dir      string        `json:"dir"`
	Writable []string      `json:"writable"`
	Landlock landlockRules `json:"landlock"`
	Seccomp  []byte        `json:"seccomp"`
	UIDBase  int           `json:"uid_base"` // the sandbox's host uid range (for runSpawn)
	TTY      bool          `json:"tty"`      // stdin is the command's controlling terminal
}

func serveRun(setup *setupMessage, req *runRequest, files []*os.File) {
	defer closeFiles(files)
	want := 4
	if req.CgroupProcs {
		want = 5
	}
	if len(files) != want {
		if len(files) > 0 {
			_ = sendJSON(int(files[0].Fd()), runMessage{Exited: true, Error: "malformed run request"})
		}
		return
	}
	conn := int(files[0].Fd())
	report := func(m runMessage) { _ = sendJSON(conn, m) }
	fail := func(desc string, err error) {
		r := replyOf(desc, err)
		report(runMessage{Exited: true, Error: r.Error, Errno: r.Errno})
	}

	goR, goW, err := os.Pipe()
	if err != nil {
		fail("pipe", err)
		return
	}
	defer goR.Close()
	defer goW.Close()
	stR, stW, err := os.Pipe() // the init's report of the command's wait status
	if err != nil {
		fail("pipe", err)
		return
	}
	defer stR.Close()
	defer stW.Close()
	pidR, pidW, err := os.Pipe() // the spawn stage's report of the exec stage's pid
	if err != nil {
		fail("pipe", err)
		return
	}
	defer pidR.Close()
	defer pidW.Close()
	ec, err := json.Marshal(execConfig{Args: req.Args, Dir: req.Dir, Writable: req.Writable,
		Landlock: setup.Landlock, Seccomp: setup.Seccomp, UIDBase: setup.UIDBase, TTY: req.TTY})
	if err != nil {
		fail("encode exec stage", err)
		return
	}
	// The spawn stage runs as the sandbox's host uid and starts the exec stage in the run's
	// namespaces (runSpawn); it keeps the capabilities it needs to map the namespace's
	// whole uid range (and that some security modules want of a namespace's creator).
	base := uint32(setup.UIDBase)
	spawn := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{stageSpawn, string(ec)},
		Env:        req.Env,
		Stdin:      files[1],
		Stdout:     files[2],
		Stderr:     files[3],
		ExtraFiles: []*os.File{goR, stW, pidW}, // descriptors 3, execStatusFD, spawnPidFD
		SysProcAttr: &syscall.SysProcAttr{
			Credential:  &syscall.Credential{Uid: base, Gid: base},
			AmbientCaps: []uintptr{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_SETFCAP, unix.CAP_SYS_ADMIN},
			Pdeathsig:   syscall.SIGKILL,
		},
	}
	if err := spawn.Start(); err != nil {
		fail("start command", err)
		return
	}
	goR.Close()
	stW.Close()
	pidW.Close()
	procs := setup.CgroupFDs
	if req.CgroupProcs {
		procs = append(append([]int(nil), procs...), int(files[4].Fd()))
	}
	spid := []byte(strconv.Itoa(spawn.Process.Pid))
	for _, fd := range procs {
		if _, err := unix.Pwrite(fd, spid, 0); err != nil {
			_ = spawn.Process.Kill()
			_ = spawn.Wait()
			fail("join cgroup", err)
			return
		}
	}
	if _, err := goW.Write([]byte{1}); err != nil {
		_ = spawn.Process.Kill()
	}
	goW.Close()
	// The spawn stage has exited once it wrote the pid: the exec stage is this holder's
	// child from then on (orphans go to the PID namespace's init).
	var b [4]byte
	_, rerr := io.ReadFull(pidR, b[:])
	werr := spawn.Wait()
	if rerr != nil || werr != nil {
		fail("start command", fmt.Errorf("the spawn stage failed: %w", errors.Join(werr, rerr)))
		return
	}
	pid := int(binary.NativeEndian.Uint32(b[:]))
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		fail("start command", err)
		return
	}
	defer unix.Close(pidfd)
	report(runMessage{Started: true})

	watched := make(chan struct{})
	go func() {
		// Any message ("kill") or a closed connection ends the run's whole PID namespace.
		// The pidfd names the init even once it has been reaped: no other process is hit.
		defer close(watched)
		_, fs, _ := recvFields(conn)
		closeFiles(fs)
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
	}()
	var ws syscall.WaitStatus
	var ru syscall.Rusage
	for {
		if _, err := syscall.Wait4(pid, &ws, 0, &ru); err != syscall.EINTR {
			break
		}
	}
	m := exitMessage(ws, &ru)
	// The command's own status, if the init lived to write it (not when the run was killed:
	// then the init's SIGKILL is the answer).
	if n, _ := io.ReadFull(stR, b[:]); n == 4 {
		m.setStatus(syscall.WaitStatus(binary.NativeEndian.Uint32(b[:])))
	}
	report(m)
	_ = unix.Shutdown(conn, unix.SHUT_RDWR)
	<-watched
}

func exitMessage(ws syscall.WaitStatus, ru *syscall.Rusage) runMessage {
	m := runMessage{Exited: true}
	m.setStatus(ws)
	m.UserNS = syscall.TimevalToNsec(ru.Utime)
	m.SysNS = syscall.TimevalToNsec(ru.Stime)
	m.MaxRSS = ru.Maxrss * 1024
	return m
}

// runUserNSKeeper holds a user namespace open until its stdin closes; the parent uses the
// namespace as the id map of the workspace mount.
func runUserNSKeeper() error {
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// setStatus sets the exit code (128+n for signal n) and signal of a wait status.
func (m *runMessage) setStatus(ws syscall.WaitStatus) {
	m.Signum, m.ExitCode = 0, ws.ExitStatus()
	if ws.Signaled() {
		m.Signum = int(ws.Signal())
		m.ExitCode = 128 + int(ws.Signal())
	}
}
