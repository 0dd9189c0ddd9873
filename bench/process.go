package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Process is a proxy under test running as its own process, so that its CPU time and
// memory can be read from /proc.
type Process struct {
	Name string
	Addr string // the proxy's listen address
	// CAPEM is the certificate clients must trust when the proxy intercepts TLS; nil if it does not.
	CAPEM []byte
	// PprofAddr serves net/http/pprof when the process was started with it; "" otherwise.
	PprofAddr string

	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// startProcess runs argv with env (nothing inherited but what is passed), logging to
// dir/name.log, and waits until addr accepts connections.
func startProcess(ctx context.Context, name, dir, addr string, argv, env []string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Its own process group, so that stopping it reaches any helper it starts; and it dies
	// with the harness.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Addr: addr, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	if err := p.waitListening(ctx, addr, 3*time.Minute); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

func (p *Process) waitListening(ctx context.Context, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited before listening on %s (%v); its log ends:\n%s", p.Name, addr, p.waitErr, p.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w on %s after %s; its log ends:\n%s", p.Name, errNotReady, addr, limit, p.logTail())
		}
	}
}

// Alive reports an error if the process has exited.
func (p *Process) Alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited (%v); its log ends:\n%s", p.Name, p.waitErr, p.logTail())
	default:
		return nil
	}
}

func (p *Process) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// Stop sends SIGTERM to the process group, and SIGKILL if it has not exited after 10s.
func (p *Process) Stop() {
	_ = syscall.Kill(-p.PID(), syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
		<-p.exited
	}
}

// freeAddr returns a loopback address with a port nothing listens on right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// baseEnv is the environment children get: a PATH and HOME, nothing else from ours (no
// proxy variables, no OTEL_* settings).
func baseEnv(home string) []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home}
}

var errSkipped = errors.New("skipped")
