package docker

import (
	"context"
	"errors"
	"fmt"
	"github.com/airlock-proxy/airlock/internal/output"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/airlock-proxy/airlock/sandbox"
)

// Run execs cmd (environment already built) in the container and waits for it. On timeout
// or cancellation the command's process tree is killed (with a local daemon, through
// /proc; otherwise the whole container is killed and the sandbox is unusable after).
func (in *instance) Run(ctx context.Context, cmd sandbox.Command) (sandbox.Result, error) {
	if in.teardown.Closed() {
		return sandbox.Result{}, sandbox.ErrClosed
	}
	in.mu.Lock()
	dead := in.dead
	in.mu.Unlock()
	if dead != nil {
		return sandbox.Result{}, dead
	}
	env := cmd.Env
	if len(in.proxyEnv) > 0 {
		env = sandbox.MergeEnv(env, in.proxyEnv)
	}
	opts := container.ExecOptions{
		User: in.user, Env: env, WorkingDir: cmd.Dir, Cmd: cmd.Args,
		AttachStdin: cmd.Stdin != nil, AttachStdout: true, AttachStderr: true,
	}
	var attach container.ExecAttachOptions
	if cmd.TTY != nil {
		// runc opens the terminal inside the container, through its /dev/ptmx: the
		// sandbox's private devpts when airlock mounted one (mountPts), else Docker's
		// own per-container devpts; never the host's. Its output is one stream.
		opts.Tty = true
		if s := cmd.TTY.Size; s.Rows > 0 && s.Cols > 0 {
			opts.ConsoleSize = &[2]uint{uint(s.Rows), uint(s.Cols)}
		}
		attach = container.ExecAttachOptions{Tty: true, ConsoleSize: opts.ConsoleSize}
	}
	ex, err := in.b.cli.ContainerExecCreate(ctx, in.id, opts)
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("run %s: create exec: %w", cmd.Args[0], err)
	}
	att, err := in.b.cli.ContainerExecAttach(ctx, ex.ID, attach)
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("run %s: attach exec: %w", cmd.Args[0], err)
	}
	defer att.Close()
	res := sandbox.Result{Start: time.Now()}
	limit := cmd.OutputLimit
	if limit <= 0 {
		limit = sandbox.DefaultOutputLimit
	}
	stdout, stderr := &output.Capture{W: cmd.Stdout, Limit: limit}, &output.Capture{W: cmd.Stderr, Limit: limit}
	if cmd.Stdin != nil {
		go func() {
			_, _ = io.Copy(att.Conn, cmd.Stdin)
			if cmd.TTY == nil {
				// A terminal's input has no end but the EOF character the typist sends.
				_ = att.CloseWrite()
			}
		}()
	}
	copied := make(chan error, 1)
	go func() {
		var err error
		if cmd.TTY != nil {
			_, err = io.Copy(stdout, att.Reader)
		} else {
			_, err = stdcopy.StdCopy(stdout, stderr, att.Reader)
		}
		copied <- err
	}()
	if cmd.TTY != nil && opts.ConsoleSize != nil {
		// Engines before API 1.42 ignore the exec's ConsoleSize: the size follows the
		// start, as the docker CLI sends it.
		in.resizeExec(ex.ID, cmd.TTY.Size)
	}
	if cmd.TTY != nil && cmd.TTY.Resize != nil {
		stop := make(chan struct{})
		defer close(stop)
		go in.resizeLoop(ex.ID, cmd.TTY.Resize, stop)
	}
	var timeout <-chan time.Time
	if cmd.Timeout > 0 {
		t := time.NewTimer(cmd.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var runErr error
	killed := false
	select {
	case <-copied:
	case <-timeout:
		res.TimedOut = true
		killed = true
	case <-ctx.Done():
		runErr = ctx.Err()
		killed = true
	}
	if killed {
		if err := in.killExec(ex.ID); err != nil {
			runErr = errors.Join(runErr, err)
		}
		att.Close()
		<-copied
	}
	res.End = time.Now()
	res.Stdout, res.Stderr = stdout.Bytes(), stderr.Bytes()
	res.Truncated = stdout.Dropped() || stderr.Dropped()
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	info, err := in.waitExec(ictx, ex.ID)
	if err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("inspect exec: %w", err))
	}
	res.ExitCode = info.ExitCode
	if killed {
		res.Signal = "SIGKILL"
		res.ExitCode = 128 + int(syscall.SIGKILL)
	}
	if res.TimedOut {
		res.ExitCode = sandbox.ExitTimeout
	}
	if runErr != nil {
		return res, fmt.Errorf("run %s: %w", cmd.Args[0], runErr)
	}
	return res, nil
}

// resizeLoop passes sizes to the exec's terminal until stop.
func (in *instance) resizeLoop(execID string, sizes <-chan sandbox.WindowSize, stop <-chan struct{}) {
	for {
		select {
		case s, ok := <-sizes:
			if !ok {
				return
			}
			in.resizeExec(execID, s)
		case <-stop:
			return
		}
	}
}

// resizeExec sets the exec's terminal size, trying again briefly while the daemon has
// not yet started its process.
func (in *instance) resizeExec(execID string, s sandbox.WindowSize) {
	for try := 0; try < 10; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := in.b.cli.ContainerExecResize(ctx, execID, container.ResizeOptions{Height: uint(s.Rows), Width: uint(s.Cols)})
		cancel()
		if err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitExec inspects the exec until it is no longer running: its output can end just
// before its status is recorded.
func (in *instance) waitExec(ctx context.Context, id string) (container.ExecInspect, error) {
	for {
		info, err := in.b.cli.ContainerExecInspect(ctx, id)
		if err != nil || !info.Running {
			return info, err
		}
		select {
		case <-ctx.Done():
			return info, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// killExec kills the exec'd process and its descendants. With a local daemon airlock sees
// their host pids; otherwise the only kill the Engine API offers is the container's.
func (in *instance) killExec(execID string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := in.b.cli.ContainerExecInspect(ctx, execID)
	if err == nil && info.Pid > 0 && in.b.local {
		// The whole tree is stopped before any of it is killed: a parent outliving its
		// killed child would run on past the timeout (a shell's next command, CI saw).
		tree := append([]int{info.Pid}, descendants(info.Pid)...)
		for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
			for _, pid := range tree {
				_ = syscall.Kill(pid, sig)
			}
		}
		return nil
	}
	in.mu.Lock()
	in.dead = errors.New("sandbox was killed: a command outlived its timeout and the daemon cannot kill one command")
	in.mu.Unlock()
	if err := in.b.cli.ContainerKill(ctx, in.id, "KILL"); err != nil {
		return fmt.Errorf("kill container: %w", err)
	}
	return nil
}

// descendants lists the pids whose parent chain reaches pid, from /proc.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			parent[p] = pp
		}
	}
	var out []int
	for p := range parent {
		for q, depth := parent[p], 0; q > 1 && depth < 256; q, depth = parent[q], depth+1 {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}
