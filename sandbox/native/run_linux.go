package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-proxy/airlock/internal/output"
	"github.com/airlock-proxy/airlock/sandbox"

	"golang.org/x/sys/unix"
)

// Run starts cmd (its environment already built) in the sandbox and waits for it.
func (in *nativeInstance) Run(ctx context.Context, cmd sandbox.Command) (sandbox.Result, error) {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return sandbox.Result{}, sandbox.ErrClosed
	}
	in.runs++
	n := in.runs
	in.mu.Unlock()
	res, err := in.run(ctx, cmd, n)
	if err != nil {
		// A Close during the run fails it in whichever step it reached (a cgroup gone, the
		// control socket shut): say what happened rather than which step noticed.
		in.mu.Lock()
		closed := in.closed
		in.mu.Unlock()
		if closed {
			return res, fmt.Errorf("run %s: %w", cmd.Args[0], sandbox.ErrClosed)
		}
	}
	return res, err
}

func (in *nativeInstance) run(ctx context.Context, cmd sandbox.Command, n int) (sandbox.Result, error) {
	runDir, err := in.cg.runGroup(n)
	if err != nil {
		return sandbox.Result{}, err
	}
	if runDir != "" {
		defer func() { _ = rmdirRetry(runDir) }()
	}
	in.cg.resetPeaks()
	oomBefore := in.cg.oomKills()

	var st *stdio
	if cmd.TTY != nil {
		st, err = in.newTTYStdio(cmd)
	} else {
		st, err = newStdio(cmd)
	}
	if err != nil {
		return sandbox.Result{}, err
	}
	defer st.closeAll()
	connParent, connChild, err := seqpacketPair()
	if err != nil {
		return sandbox.Result{}, err
	}
	defer connParent.Close()
	files := []*os.File{connChild, st.stdinR, st.stdoutW, st.stderrW}
	req := runRequest{Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, Writable: in.writable(), TTY: cmd.TTY != nil}
	if runDir != "" {
		procs, err := os.OpenFile(filepath.Join(runDir, "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			connChild.Close()
			return sandbox.Result{}, fmt.Errorf("open run cgroup: %w", err)
		}
		defer procs.Close()
		req.CgroupProcs = true
		files = append(files, procs)
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	in.ctrlMu.Lock()
	if in.ctrl == nil {
		err = sandbox.ErrClosed
	} else {
		err = sendFields(int(in.ctrl.Fd()), req.fields(), fds...)
	}
	in.ctrlMu.Unlock()
	connChild.Close()
	st.closeChildEnds()
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("start command: %w", err)
	}
	res := sandbox.Result{Start: time.Now()}
	st.copy()
	if cmd.TTY != nil && cmd.TTY.Resize != nil {
		stop := make(chan struct{})
		defer close(stop) // before st.closeAll
		go resizeLoop(st.master, cmd.TTY.Resize, stop)
	}

	conn := int(connParent.Fd())
	msgs := make(chan runMessage, 2)
	go func() {
		defer close(msgs)
		for {
			var m runMessage
			if err := recvJSON(conn, &m); err != nil {
				return
			}
			msgs <- m
			if m.Exited {
				return
			}
		}
	}()
	kill := func() {
		_ = sendFields(conn, [][]byte{[]byte("kill")})
		if runDir != "" {
			_ = os.WriteFile(filepath.Join(runDir, "cgroup.kill"), []byte("1"), 0)
		}
	}
	var timeout <-chan time.Time
	if cmd.Timeout > 0 {
		t := time.NewTimer(cmd.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var exit runMessage
	var ctxErr error
wait:
	for {
		select {
		case m, ok := <-msgs:
			in.warm.halt() // this run's processes are in their groups, or will not be
			if !ok {
				ctxErr = errors.New("sandbox ended during the command")
				break wait
			}
			if m.Exited {
				exit = m
				break wait
			}
		case <-timeout:
			res.TimedOut = true
			timeout = nil
			kill()
		case <-ctx.Done():
			if ctxErr == nil {
				ctxErr = ctx.Err()
				kill()
			}
		}
	}
	_ = unix.Shutdown(conn, unix.SHUT_RDWR)
	st.wait()
	res.End = time.Now()
	res.Stdout, res.Stderr, res.Truncated = st.stdout.Bytes(), st.stderr.Bytes(), st.truncated()
	res.ExitCode = exit.ExitCode
	if exit.Signum > 0 {
		res.Signal = unix.SignalName(syscall.Signal(exit.Signum))
	}
	res.Usage = sandbox.Usage{
		PeakMemory: in.cg.peakMemory(),
		CPU:        time.Duration(exit.UserNS + exit.SysNS),
		Pids:       in.cg.peakPids(),
		OOMKilled:  in.cg.oomKills() > oomBefore,
	}
	if res.Usage.PeakMemory == 0 {
		res.Usage.PeakMemory = exit.MaxRSS
	}
	if res.TimedOut {
		res.ExitCode = sandbox.ExitTimeout
	}
	if ctxErr != nil {
		return res, fmt.Errorf("run %s: %w", cmd.Args[0], ctxErr)
	}
	if err := holderError(exit.Error, exit.Errno); err != nil {
		return res, fmt.Errorf("run %s: %w", cmd.Args[0], err)
	}
	return res, nil
}

// writable lists the directories a command may write beneath (for Landlock).
func (in *nativeInstance) writable() []string {
	w := []string{"/tmp", homeDir, "/dev"}
	if in.opts.Workspace != "" && in.opts.WorkspaceMode != sandbox.WorkspaceRO {
		w = append(w, workspaceDir)
	}
	return w
}

// stdio is the parent's side of one run's standard streams: three pipes, or a terminal
// (master) whose slave is all three.
type stdio struct {
	stdinR, stdinW   *os.File
	stdoutR, stdoutW *os.File
	stderrR, stderrW *os.File
	master           *os.File // with a TTY: stdinW and stdoutR
	stdin            io.Reader
	stdout, stderr   *output.Capture
	done             chan struct{}
	pending          int
}

func newStdio(cmd sandbox.Command) (*stdio, error) {
	st := newCaptures(cmd)
	var err error
	if cmd.Stdin == nil {
		st.stdinR, err = os.Open(os.DevNull)
	} else {
		st.stdinR, st.stdinW, err = os.Pipe()
	}
	if err == nil {
		st.stdoutR, st.stdoutW, err = os.Pipe()
	}
	if err == nil {
		st.stderrR, st.stderrW, err = os.Pipe()
	}
	if err != nil {
		st.closeAll()
		return nil, fmt.Errorf("create pipes: %w", err)
	}
	return st, nil
}

// newCaptures is a stdio with no files yet: what captures cmd's output.
func newCaptures(cmd sandbox.Command) *stdio {
	limit := cmd.OutputLimit
	if limit <= 0 {
		limit = sandbox.DefaultOutputLimit
	}
	return &stdio{stdin: cmd.Stdin, stdout: &output.Capture{W: cmd.Stdout, Limit: limit},
		stderr: &output.Capture{W: cmd.Stderr, Limit: limit}, done: make(chan struct{}, 3)}
}

// newTTYStdio gives the run a terminal of the sandbox's devpts (see TTY).
func (in *nativeInstance) newTTYStdio(cmd sandbox.Command) (*stdio, error) {
	uid, gid := in.uidBase+sandboxUID, in.uidBase+sandboxGID
	if in.rootless { // the sandbox user is the caller on the host
		uid, gid = os.Geteuid(), os.Getegid()
	}
	master, slave, err := openPty(in.holderPID, uid, gid, cmd.TTY.Size)
	if err != nil {
		return nil, err
	}
	st := newCaptures(cmd)
	st.master = master
	st.stdinR, st.stdoutW, st.stderrW = slave, slave, slave
	st.stdoutR, st.stderrR = master, nil
	if cmd.Stdin != nil {
		st.stdinW = master
	}
	return st, nil
}

// resizeLoop passes sizes to the terminal until stop.
func resizeLoop(master *os.File, sizes <-chan sandbox.WindowSize, stop <-chan struct{}) {
	for {
		select {
		case s, ok := <-sizes:
			if !ok {
				return
			}
			_ = setPtySize(master, s)
		case <-stop:
			return
		}
	}
}

func (st *stdio) copy() {
	if st.stdinW != nil {
		go func() {
			_, _ = io.Copy(st.stdinW, st.stdin)
			if st.master == nil {
				// A pipe's end is the command's end of input; a terminal's input has
				// none (the EOF character is the typist's), and closing the master
				// would hang the terminal up.
				st.stdinW.Close()
			}
		}()
	}
	for _, p := range []struct {
		r *os.File
		c *output.Capture
	}{{st.stdoutR, st.stdout}, {st.stderrR, st.stderr}} {
		if p.r == nil {
			continue
		}
		st.pending++
		go func() {
			_, _ = io.Copy(p.c, p.r)
			st.done <- struct{}{}
		}()
	}
}

func (st *stdio) wait() {
	for ; st.pending > 0; st.pending-- {
		<-st.done
	}
}

func (st *stdio) truncated() bool { return st.stdout.Dropped() || st.stderr.Dropped() }

func (st *stdio) closeChildEnds() {
	closeFiles([]*os.File{st.stdinR, st.stdoutW, st.stderrW})
	st.stdinR, st.stdoutW, st.stderrW = nil, nil, nil
}

func (st *stdio) closeAll() {
	closeFiles([]*os.File{st.stdinR, st.stdinW, st.stdoutW, st.stderrW, st.stdoutR, st.stderrR, st.master})
}
