package native

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/airlock-proxy/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// runExec (without cgo; see stage_linux.c otherwise) is the last stage before a sandboxed
// command: pid 1 of the run's PID namespace and root of its fresh user namespace (mapped to
// the sandbox's host uid range, and owned by its first uid: runSpawn). On one locked
// thread it waits until the holder has placed it in its cgroups, sets the namespace's
// maxima (no nested namespaces, few inotify watches), drops to the sandbox user, clears every capability (bounding set included),
// sets no_new_privs, applies Landlock and seccomp, and forks the command from that same
// thread, so it inherits the credentials and filters of that thread; this process then
// stays as the namespace's init (beInit).
func runExec() error {
	runtime.LockOSThread()
	if len(os.Args) < 2 {
		return errors.New("exec stage: missing config")
	}
	var cfg execConfig
	if err := json.Unmarshal([]byte(os.Args[1]), &cfg); err != nil {
		return fmt.Errorf("exec stage: decode config: %w", err)
	}
	if len(cfg.Args) == 0 {
		return errors.New("exec stage: empty command")
	}
	gate := os.NewFile(3, "gate")
	var b [1]byte
	if n, _ := gate.Read(b[:]); n != 1 {
		return errors.New("exec stage: holder did not release the command")
	}
	gate.Close()
	env, err := readCommandEnv()
	if err != nil {
		return err
	}
	// The command is looked up in the command's PATH (the exec stage's own has none).
	os.Unsetenv("PATH")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			os.Setenv("PATH", v)
		}
	}
	if err := setUserNSMaxima(); err != nil {
		return err
	}
	if err := dropPrivileges(); err != nil {
		return err
	}
	if cfg.Dir != "" {
		if err := unix.Chdir(cfg.Dir); err != nil {
			return fmt.Errorf("chdir %s: %w", cfg.Dir, err)
		}
	}
	path, err := exec.LookPath(cfg.Args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock sandbox: %v\n", err)
		os.Exit(127)
	}
	if err := restrictLandlock(cfg.Landlock, cfg.Writable); err != nil {
		return err
	}
	if err := loadSeccomp(cfg.Seccomp); err != nil {
		return err
	}
	// The command is forked, not exec'd into: this process stays as the namespace's init.
	// As the C init, which installs no handler, it takes no action on any signal the
	// sandbox may send pid 1 (the Go runtime would exit on SIGINT or SIGTERM and crash on
	// SIGABRT, ending the command with it). Handled signals are reset by the command's
	// exec. And it is not dumpable, so that the command cannot reach its descriptors
	// through /proc/1/fd.
	signal.Notify(make(chan os.Signal, 1))
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set init not dumpable: %w", err)
	}
	syscall.CloseOnExec(execStatusFD)
	attr := &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}}
	if cfg.TTY {
		// The command leads a session of its own with the terminal as its controlling
		// terminal: its foreground process group gets what the keys for interrupt,
		// suspend and quit send, and job control works. The init stays outside it.
		attr.Sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	child, err := syscall.ForkExec(path, cfg.Args, attr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock sandbox: exec %s: %v\n", cfg.Args[0], err)
		os.Exit(126)
	}
	beInit(child)
	return nil
}

// runSpawn (without cgo) starts a command's exec stage in a fresh user and PID namespace
// and exits. It runs as the sandbox's host uid, so that the namespace is owned by it rather
// than by the holder's uid, the host's root: the kernel counts what the sandbox makes per
// user against the namespace's owner at the host's level (sandbox/usercounts.go). It waits for the
// holder's gate (it is in the run's cgroups then, and so is what it starts), maps the
// namespace's ids (with the capabilities the holder left it), writes the exec stage's pid
// to spawnPidFD and exits: the exec stage is then the holder's child (orphans go to the
// PID namespace's init), which waits for it and kills it, as the C holder does.
func runSpawn() error {
	if len(os.Args) < 2 {
		return errors.New("spawn stage: missing config")
	}
	var cfg execConfig
	if err := json.Unmarshal([]byte(os.Args[1]), &cfg); err != nil {
		return fmt.Errorf("spawn stage: decode config: %w", err)
	}
	gate := os.NewFile(3, "gate")
	var b [1]byte
	if n, _ := gate.Read(b[:]); n != 1 {
		return errors.New("spawn stage: holder did not release the command")
	}
	gate.Close()
	open, release, err := os.Pipe() // the exec stage's gate, open once its ids are mapped
	if err != nil {
		return fmt.Errorf("spawn stage: %w", err)
	}
	if _, err := release.Write([]byte{1}); err != nil {
		return fmt.Errorf("spawn stage: %w", err)
	}
	release.Close()
	envR, envW, err := os.Pipe() // the command's environment (execEnvFD)
	if err != nil {
		return fmt.Errorf("spawn stage: %w", err)
	}
	defer envW.Close()
	idmap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: cfg.UIDBase, Size: sandbox.UIDRangeSize}}
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{stageExec, os.Args[1]},
		Env:        []string{execStageGOMAXPROCS},
		Stdin:      os.Stdin,
		Stdout:     os.Stdout,
		Stderr:     os.Stderr,
		ExtraFiles: []*os.File{open, os.NewFile(execStatusFD, "status"), envR},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
			UidMappings:                idmap,
			GidMappings:                idmap,
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
			Setsid:                     true,
		},
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start command: %w", err)
	}
	envR.Close()
	if _, err := envW.Write(encodeEnv(os.Environ())); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("spawn stage: hand over the command's environment: %w", err)
	}
	envW.Close()
	var pid [4]byte
	binary.NativeEndian.PutUint32(pid[:], uint32(cmd.Process.Pid))
	if _, err := unix.Write(spawnPidFD, pid[:]); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("spawn stage: report the command's pid: %w", err)
	}
	return nil
}

// The exec stage stays as the run's init, in the run's pids cgroup: every thread of its Go
// runtime counts against the sandbox's pids limit (with the default GOMAXPROCS of a 2-core
// machine, 7 to 11 of them, seen by TestOpenFilesBound). Started with one P, it keeps
// fewer. Its environment is only that setting: the command's own environment, whatever it
// holds (a GOMAXPROCS of its own, duplicates), comes through a pipe (execEnvFD), so that
// neither can change the other.
const execStageGOMAXPROCS = "GOMAXPROCS=1"

// execEnvFD is where the exec stage reads the command's environment, each entry ended by
// a NUL (entries passed through execve hold none).
const execEnvFD = 5

func encodeEnv(env []string) []byte {
	var b []byte
	for _, kv := range env {
		b = append(append(b, kv...), 0)
	}
	return b
}

func decodeEnv(b []byte) []string {
	if len(b) == 0 {
		return []string{}
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// readCommandEnv reads the command's environment from execEnvFD and closes it.
func readCommandEnv() ([]string, error) {
	f := os.NewFile(execEnvFD, "env")
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("exec stage: read the command's environment: %w", err)
	}
	return decodeEnv(b), nil
}

// spawnPidFD is where the spawn stage writes the exec stage's pid.
const spawnPidFD = 5

// execStatusFD is where the exec stage, as init, writes the command's wait status.
const execStatusFD = 4

// beInit is pid 1 of the run's PID namespace once the command is forked (as be_init in
// stage_linux.c): it reaps whatever is reparented to it and ends when the command does,
// writing the command's raw wait status to execStatusFD first, since pid 1 cannot die of
// a signal it sends itself.
func beInit(child int) {
	for _, f := range []*os.File{os.Stdin, os.Stdout, os.Stderr} {
		f.Close()
	}
	var ws syscall.WaitStatus
	for {
		p, err := syscall.Wait4(-1, &ws, 0, nil)
		if p == child {
			break
		}
		if err != nil && err != syscall.EINTR {
			os.Exit(125)
		}
	}
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], uint32(ws))
	_, _ = unix.Write(execStatusFD, b[:])
	if ws.Signaled() {
		os.Exit(128 + int(ws.Signal()))
	}
	os.Exit(ws.ExitStatus())
}

// dropPrivileges switches the calling thread to the sandbox user with no capabilities.
func dropPrivileges() error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("clear groups: %w", e)
	}
	last := lastCap()
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, sandboxGID, sandboxGID, sandboxGID); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, sandboxUID, sandboxUID, sandboxUID); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 63
	}
	n := 0
	for _, c := range b {
		if c >= '0' && c <= '9' {
			n = n*10 + int(c-'0')
		}
	}
	return n
}
