package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The holder is pid 1 of a sandbox's PID namespace. It runs as root of the initial user
// namespace (it builds the mount tree, which only that root may do with idmapped mounts) and
// executes no sandboxed code itself: every command runs in a child it starts in a fresh user
// and PID namespace, which drops every privilege before exec (see shim_linux.go). When the
// parent closes the control socket or dies (Pdeathsig), the holder exits and the kernel kills
// every process left in the sandbox.

const holderCtrlFD = 3

func runHolder() error {
	ctrl := holderCtrlFD
	var cfg holderConfig
	files, err := recvMsg(ctrl, &cfg)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	closeFiles(files)
	if err := setupHolder(&cfg); err != nil {
		_ = sendMsg(ctrl, holderReply{Error: err.Error()})
		return err
	}
	if err := sendMsg(ctrl, holderReply{}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for {
		var req runRequest
		files, err := recvMsg(ctrl, &req)
		if errors.Is(err, os.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveRun(&cfg, &req, files)
		}()
	}
}

func setupHolder(cfg *holderConfig) error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set non-dumpable: %w", err)
	}
	if err := unix.Sethostname([]byte(cfg.ID)); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	return buildRoot(cfg)
}

// execConfig is what the holder tells a command's shim (as its argv[1]).
type execConfig struct {
	Args     []string `json:"args"`
	Dir      string   `json:"dir"`
	Writable []string `json:"writable"`
}

func serveRun(cfg *holderConfig, req *runRequest, files []*os.File) {
	defer closeFiles(files)
	want := 4
	if req.CgroupProcs {
		want = 5
	}
	if len(files) != want {
		return
	}
	conn := int(files[0].Fd())
	report := func(m runMessage) { _ = sendMsg(conn, m) }

	goR, goW, err := os.Pipe()
	if err != nil {
		report(runMessage{Exited: true, Error: fmt.Sprintf("pipe: %v", err)})
		return
	}
	defer goR.Close()
	defer goW.Close()
	ec, err := json.Marshal(execConfig{Args: req.Args, Dir: req.Dir, Writable: req.Writable})
	if err != nil {
		report(runMessage{Exited: true, Error: err.Error()})
		return
	}
	idmap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: cfg.UIDBase, Size: uidRangeSize}}
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{stageExec, string(ec)},
		Env:        req.Env,
		Stdin:      files[1],
		Stdout:     files[2],
		Stderr:     files[3],
		ExtraFiles: []*os.File{goR},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
			UidMappings:                idmap,
			GidMappings:                idmap,
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
			Setsid:                     true,
			Pdeathsig:                  syscall.SIGKILL,
		},
	}
	if err := cmd.Start(); err != nil {
		report(runMessage{Exited: true, Error: fmt.Sprintf("start: %v", err)})
		return
	}
	goR.Close()
	procs := cfg.CgroupFDs
	if req.CgroupProcs {
		procs = append(append([]int(nil), procs...), int(files[4].Fd()))
	}
	pid := []byte(strconv.Itoa(cmd.Process.Pid))
	for _, fd := range procs {
		if _, err := unix.Pwrite(fd, pid, 0); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			report(runMessage{Exited: true, Error: fmt.Sprintf("join cgroup: %v", err)})
			return
		}
	}
	if _, err := goW.Write([]byte{1}); err != nil {
		_ = cmd.Process.Kill()
	}
	goW.Close()
	report(runMessage{Started: true})

	watched := make(chan struct{})
	go func() {
		// A kill request or a closed connection ends the run's whole PID namespace.
		defer close(watched)
		for {
			var m runMessage
			fs, err := recvMsg(conn, &m)
			closeFiles(fs)
			if err != nil || m.Kill {
				_ = cmd.Process.Kill()
				return
			}
		}
	}()
	_ = cmd.Wait()
	report(exitMessage(cmd.ProcessState))
	_ = unix.Shutdown(conn, unix.SHUT_RDWR)
	<-watched
}

func exitMessage(ps *os.ProcessState) runMessage {
	m := runMessage{Exited: true}
	if ps == nil {
		m.Error = "no process state"
		return m
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		m.Signal = unix.SignalName(ws.Signal())
		m.ExitCode = 128 + int(ws.Signal())
	default:
		m.ExitCode = ws.ExitStatus()
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		m.UserNS = syscall.TimevalToNsec(ru.Utime)
		m.SysNS = syscall.TimevalToNsec(ru.Stime)
		m.MaxRSS = ru.Maxrss * 1024
	}
	return m
}

// runUserNSKeeper holds a user namespace open until its stdin closes; the parent uses the
// namespace as the id map of the workspace mount.
func runUserNSKeeper() error {
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}
