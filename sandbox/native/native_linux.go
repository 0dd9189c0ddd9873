// Package native is the native Linux sandbox backend: namespaces, cgroups, seccomp and
// Landlock, no daemon; it needs root. Each sandbox has a holder process, the same binary
// re-executed (C code run before the Go runtime with cgo, holder_linux.go without), so a
// program using it must call Init first in main.
package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/airlock-proxy/airlock/internal/procstat"
	"github.com/airlock-proxy/airlock/sandbox"

	"golang.org/x/sys/unix"
)

// Native is the native backend: Linux namespaces, cgroups, seccomp and Landlock, no daemon.
// It needs root. The zero value uses DefaultStateDir and DefaultCgroupRoot.
type Native struct {
	StateDir   string // per-sandbox directories (uid-range slots are machine-wide: SlotDir)
	CgroupRoot string // where the cgroup hierarchies are mounted
}

// Defaults of the native backend.
const (
	DefaultStateDir   = "/run/airlock"
	DefaultCgroupRoot = "/sys/fs/cgroup"
)

var _ sandbox.Backend = (*Native)(nil)

// ErrNeedsRoot: native sandboxes need root (namespaces, cgroups, idmapped mounts).
var ErrNeedsRoot = errors.New("native sandboxes need root (namespaces, cgroups, idmapped mounts): run airlock as root, or use --backend docker")

func (n *Native) stateDir() string {
	if n != nil && n.StateDir != "" {
		if abs, err := filepath.Abs(n.StateDir); err == nil {
			return abs // slots name their state directory: one spelling of it
		}
		return n.StateDir
	}
	return DefaultStateDir
}

func (n *Native) cgroupRoot() string {
	if n != nil && n.CgroupRoot != "" {
		return n.CgroupRoot
	}
	return DefaultCgroupRoot
}

// nativeInstance is one running native sandbox.
type nativeInstance struct {
	opts        sandbox.Options
	dir         string // state directory
	ownsDir     bool   // dir was made by this instance (not another sandbox's of the same id)
	releaseUIDs func() // frees the uid range
	uidBase     int
	cg          *cgroups
	holder      *exec.Cmd
	ctrl        *os.File
	ctrlMu      sync.Mutex
	detach      []func()
	netns       uint64 // inode of the network namespace, for leak checks

	protected []sandbox.Protection // the workspace's, for the sweep at the end

	mu         sync.Mutex
	runs       int
	closed     bool
	closeErr   error
	changes    []sandbox.Change
	changesErr error
	waitErr    chan error
}

// Create builds and starts a native sandbox.
func (n *Native) Create(ctx context.Context, o sandbox.Options) (inst sandbox.Instance, err error) {
	if os.Geteuid() != 0 {
		return nil, ErrNeedsRoot
	}
	if o.Memory == 0 {
		o.Memory = sandbox.DefaultMemory()
	}
	in := &nativeInstance{opts: o, dir: filepath.Join(n.stateDir(), "sandboxes", o.ID)}
	defer func() {
		if err != nil {
			_ = in.Close(context.WithoutCancel(ctx))
		}
	}()
	if err := os.MkdirAll(filepath.Dir(in.dir), 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	if err := os.Mkdir(in.dir, 0o700); err != nil {
		if os.IsExist(err) {
			// Another sandbox's (live or left over): nothing of it is this Create's to remove.
			return nil, fmt.Errorf("sandbox %s %w", o.ID, sandbox.ErrExists)
		}
		return nil, fmt.Errorf("create sandbox directory: %w", err)
	}
	in.ownsDir = true
	if err := writeOwner(in.dir); err != nil {
		return nil, err
	}
	if in.uidBase, in.releaseUIDs, err = sandbox.ReserveUIDRange(o.ID, n.stateDir()); err != nil {
		return nil, err
	}
	if in.cg, err = newCgroups(n.cgroupRoot(), o.ID, o); err != nil {
		return nil, err
	}
	if err := in.startHolder(ctx); err != nil {
		return nil, err
	}
	if o.Proxy != nil {
		if err := in.attachProxy(); err != nil {
			return nil, err
		}
	}
	return in, nil
}

func (in *nativeInstance) rootConfig() (*rootConfig, error) {
	o := in.opts
	root := filepath.Join(in.dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, fmt.Errorf("create root mount point: %w", err)
	}
	cfg := &rootConfig{
		Rootfs: o.Rootfs, RootPaths: defaultRootPaths, ReadOnlyPaths: o.ReadOnlyPaths,
		NewRoot: root, Workspace: o.Workspace, WorkspaceMode: o.WorkspaceMode,
		TmpSize: o.TmpSize, UIDBase: in.uidBase, CABundle: o.CABundle, IdmapFD: -1,
		Ptys: o.Ptys, Inodes: o.Inodes, HiddenPaths: o.HiddenPaths,
		Resolver: sandbox.Transparent(o),
	}
	if o.Workspace != "" {
		fi, err := os.Stat(o.Workspace)
		if err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("workspace %s: not a directory", o.Workspace)
		}
		if cfg.Protections, err = sandbox.WorkspaceProtections(o); err != nil {
			return nil, err
		}
	}
	if o.WorkspaceMode == sandbox.WorkspaceCoW && o.Workspace != "" {
		// The layers the sandbox writes live on a file system of o.Disk bytes of their own.
		if err := mountScratch(filepath.Join(in.dir, scratchName), o.Disk); err != nil {
			return nil, err
		}
		cfg.LowerDir = filepath.Join(in.dir, "lower")
		cfg.UpperDir = in.upperDir()
		cfg.WorkDir = filepath.Join(in.dir, scratchName, "work")
		for _, d := range []string{cfg.LowerDir, cfg.UpperDir, cfg.WorkDir} {
			if err := os.Mkdir(d, 0o755); err != nil {
				return nil, fmt.Errorf("create overlay directory: %w", err)
			}
		}
		id := in.uidBase + sandboxUID
		if err := os.Chown(cfg.UpperDir, id, in.uidBase+sandboxGID); err != nil {
			return nil, fmt.Errorf("chown overlay upper directory: %w", err)
		}
	}
	return cfg, nil
}

func (in *nativeInstance) startHolder(ctx context.Context) error {
	cfg, err := in.rootConfig()
	if err != nil {
		return err
	}
	prog, err := seccompProgram(in.opts)
	if err != nil {
		return err
	}
	setup := &setupMessage{Hostname: in.opts.ID, UIDBase: in.uidBase, Seccomp: prog, Landlock: landlockSupport()}
	parentEnd, childEnd, err := seqpacketPair()
	if err != nil {
		return err
	}
	in.ctrl = parentEnd
	extra := []*os.File{childEnd}
	defer func() { closeFiles(extra) }()
	if cfg.Workspace != "" {
		keeper, nsFile, err := in.idmapNamespace()
		if err != nil {
			return err
		}
		defer keeper()
		cfg.IdmapFD = 3 + len(extra)
		extra = append(extra, nsFile)
	}
	procs, err := in.cg.procsFiles()
	if err != nil {
		return err
	}
	for _, f := range procs {
		setup.CgroupFDs = append(setup.CgroupFDs, 3+len(extra))
		extra = append(extra, f)
	}
	if setup.Ops, err = planRoot(cfg); err != nil {
		return err
	}
	in.protected = cfg.Protections
	in.holder = &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{stageHolder},
		Env:        []string{},
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
				syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if err := startPinned(in.holder); err != nil {
		in.holder = nil
		return fmt.Errorf("start sandbox: %w", err)
	}
	in.waitErr = make(chan error, 1)
	go func(c *exec.Cmd) { in.waitErr <- c.Wait() }(in.holder)
	// Every command inherits the holder's open-file limit; set before the holder reads its
	// setup, so before any command starts. Without CAP_SYS_RESOURCE in the host's user
	// namespace a command cannot raise it.
	lim := unix.Rlimit{Cur: uint64(in.opts.Nofile), Max: uint64(in.opts.Nofile)}
	if err := unix.Prlimit(in.holder.Process.Pid, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		return fmt.Errorf("set the open-file limit to %d: %w", in.opts.Nofile, err)
	}
	if err := lowerUserLimits(in.holder.Process.Pid); err != nil {
		return err
	}
	closeFiles(extra)
	extra = nil
	if err := sendFields(int(in.ctrl.Fd()), setup.fields()); err != nil {
		return err
	}
	var reply holderReply
	if err := in.recvCtrl(ctx, &reply); err != nil {
		return fmt.Errorf("set up sandbox: %w", err)
	}
	if err := reply.err(); err != nil {
		return fmt.Errorf("set up sandbox: %w", err)
	}
	var st unix.Stat_t
	if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", in.holder.Process.Pid), &st) == nil {
		in.netns = st.Ino
	}
	return nil
}

// recvCtrl waits for the holder's answer, giving up when ctx ends or the holder dies.
func (in *nativeInstance) recvCtrl(ctx context.Context, v any) error {
	done := make(chan error, 1)
	go func() { done <- recvJSON(int(in.ctrl.Fd()), v) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = unix.Shutdown(int(in.ctrl.Fd()), unix.SHUT_RDWR)
		<-done
		return ctx.Err()
	}
}

// idmapNamespace starts a process holding a user namespace that maps the workspace owner to
// the sandbox user's host uid, for the workspace's idmapped mount. The returned function
// ends that process.
func (in *nativeInstance) idmapNamespace() (func(), *os.File, error) {
	var st unix.Stat_t
	if err := unix.Stat(in.opts.Workspace, &st); err != nil {
		return nil, nil, fmt.Errorf("workspace: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	cmd := &exec.Cmd{
		Path:  "/proc/self/exe",
		Args:  []string{stageUserNS},
		Env:   []string{},
		Stdin: r,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: int(st.Uid), HostID: in.uidBase + sandboxUID, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: int(st.Gid), HostID: in.uidBase + sandboxGID, Size: 1}},
			Pdeathsig:   syscall.SIGKILL,
		},
	}
	err = startPinned(cmd)
	r.Close()
	if err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("start id-map namespace: %w", err)
	}
	stop := func() {
		w.Close()
		_ = cmd.Wait()
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		_ = cmd.Process.Kill()
		stop()
		return nil, nil, fmt.Errorf("open id-map namespace: %w", err)
	}
	return stop, ns, nil
}

func (in *nativeInstance) attachProxy() error {
	id := sandbox.Identity{ID: in.opts.ID, Labels: in.opts.Labels}
	detach, err := sandbox.AttachNetns(fmt.Sprintf("/proc/%d/ns/net", in.holder.Process.Pid), in.opts.Proxy, id, in.opts.ProxyOnly)
	in.detach = append(in.detach, detach...)
	return err
}

// upperDir is the copy-on-write layer's upper directory.
func (in *nativeInstance) upperDir() string { return filepath.Join(in.dir, scratchName, "upper") }

// Protections are the workspace's protections, for the sweep when the sandbox ends.
func (in *nativeInstance) Protections() []sandbox.Protection { return in.protected }

// NetNSInode is the inode number of the sandbox's network namespace (0 if unknown).
func (in *nativeInstance) NetNSInode() uint64 { return in.netns }

func writeOwner(dir string) error {
	b := []byte(strconv.Itoa(os.Getpid()) + " " + strconv.FormatUint(procstat.StartTime(os.Getpid()), 10))
	if err := os.WriteFile(filepath.Join(dir, "owner"), b, 0o600); err != nil {
		return fmt.Errorf("write owner: %w", err)
	}
	return nil
}
