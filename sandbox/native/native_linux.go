// Package native is the native Linux sandbox backend: namespaces, cgroups, seccomp and
// Landlock, no daemon. As root it has every bound; as an ordinary user (rootless_linux.go)
// the same namespaces, seccomp and Landlock, with cgroups only in a delegated subtree
// (delegate_linux.go). Each sandbox has a holder process, the same binary
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
	"sync"
	"syscall"

	"github.com/airlock-proxy/airlock/sandbox"

	"golang.org/x/sys/unix"
)

// Native is the native backend: Linux namespaces, cgroups, seccomp and Landlock, no daemon.
// The zero value uses DefaultStateDir (RootlessStateDir when not root) and DefaultCgroupRoot.
type Native struct {
	StateDir   string // per-sandbox directories (uid-range slots are machine-wide: SlotDir)
	CgroupRoot string // where the cgroup hierarchies are mounted
	// AllowUnenforcedLimits lets a rootless sandbox be made with a memory or CPU limit
	// it cannot enforce (no delegated cgroup offering the controller); without it such a
	// Create fails. The sandbox's
	// Unenforced says so either way.
	AllowUnenforcedLimits bool
	// CgroupParent is a cgroup v2 directory this user may write (rootless only; made once
	// by root with DelegateCgroup), in which each rootless sandbox gets a cgroup of its
	// own with the limits of a root one; "": the systemd user manager's delegated
	// subtree when airlock runs in it, else none (delegate_linux.go).
	CgroupParent string
}

// Defaults of the native backend.
const (
	DefaultStateDir   = "/run/airlock"
	DefaultCgroupRoot = "/sys/fs/cgroup"
)

var _ sandbox.Backend = (*Native)(nil)

func (n *Native) stateDir() string {
	if n != nil && n.StateDir != "" {
		if abs, err := filepath.Abs(n.StateDir); err == nil {
			return abs // slots name their state directory: one spelling of it
		}
		return n.StateDir
	}
	if rootless() {
		return RootlessStateDir()
	}
	return DefaultStateDir
}

func (n *Native) cgroupParent() string {
	if n != nil {
		return n.CgroupParent
	}
	return ""
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
	holderPID   int // the holder's pid: holder's, or rootless its child's (stage_linux.c's rootless_holder)
	ctrl        *os.File
	ctrlMu      sync.Mutex
	detach      []func()
	netns       uint64      // inode of the network namespace, for leak checks
	rootless    bool        // made by an ordinary user: see rootless_linux.go
	deleg       *delegation // rootless: the delegated cgroup parent, nil without one
	unenforced  []string

	protected []sandbox.Protection // the workspace's, for the sweep at the end

	mu         sync.Mutex
	runs       int
	closed     bool
	closeErr   error
	changes    []sandbox.Change
	changesErr error
	waitErr    chan error

	warm *warming // the first run's cgroup moves paid for ahead; nil without
}

// Create builds and starts a native sandbox.
func (n *Native) Create(ctx context.Context, o sandbox.Options) (inst sandbox.Instance, err error) {
	var deleg *delegation
	if rootless() {
		if deleg, err = findDelegation(n.cgroupParent(), n.cgroupRoot()); err != nil {
			return nil, err
		}
	}
	if err := n.checkRootless(o, deleg); err != nil {
		return nil, err
	}
	if err := checkMaskedBinds(o.ReadOnlyPaths, o.MaskPaths); err != nil {
		return nil, err
	}
	if n.stateDir() == "" {
		return nil, errors.New("rootless native sandboxes keep their state under $XDG_RUNTIME_DIR or $HOME, and neither is set")
	}
	if o.Memory == 0 {
		o.Memory = sandbox.DefaultMemory()
	}
	in := &nativeInstance{opts: o, dir: filepath.Join(n.stateDir(), "sandboxes", o.ID), rootless: rootless()}
	defer func() {
		if err != nil {
			_ = in.Close(context.WithoutCancel(ctx))
		}
	}()
	if err := os.MkdirAll(filepath.Dir(in.dir), 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	if in.rootless {
		if err := CheckPrivateDir(filepath.Dir(in.dir)); err != nil {
			return nil, err
		}
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
	if in.rootless {
		// One uid (the caller's), and cgroups only if delegated: what that leaves out is
		// said, not dropped.
		in.uidBase, in.cg, in.unenforced = rootlessUIDBase, &cgroups{}, rootlessUnenforced(o, deleg)
		in.deleg = deleg
		if deleg != nil {
			if in.cg, err = newDelegatedCgroup(deleg, o.ID, o); err != nil {
				return nil, err
			}
		}
	} else {
		if in.uidBase, in.releaseUIDs, err = sandbox.ReserveUIDRange(o.ID, n.stateDir()); err != nil {
			return nil, err
		}
		if in.cg, err = newCgroups(n.cgroupRoot(), o.ID, o); err != nil {
			return nil, err
		}
		in.warm = startWarming(n.cgroupRoot())
	}
	if err := in.startHolder(ctx); err != nil {
		return nil, err
	}
	if o.Proxy != nil && in.rootless {
		if err := in.handOffSockets(); err != nil {
			return nil, err
		}
	} else if o.Proxy != nil {
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
		TmpSize: o.TmpSize, UIDBase: in.uidBase, Rootless: in.rootless, CABundle: o.CABundle, IdmapFD: -1,
		Ptys: o.Ptys, Inodes: o.Inodes, HiddenPaths: o.HiddenPaths,
		Resolver: sandbox.Transparent(o), MaskPaths: o.MaskPaths,
	}
	if o.Rootfs != "/" {
		cfg.Image, cfg.RootPaths = true, nil
		cfg.TopLayer = filepath.Join(in.dir, "top")
		if err := os.Mkdir(cfg.TopLayer, 0o755); err != nil {
			return nil, fmt.Errorf("create image top layer: %w", err)
		}
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
	if cfg.Image {
		if err := writeTopLayer(cfg, o.ID); err != nil {
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
	if cfg.Workspace != "" && !in.rootless { // rootless, the workspace owner is the sandbox user
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
	if in.rootless {
		in.holder.Args[0], in.holder.SysProcAttr.Cloneflags = stageRootless, 0 // it makes them
		// With a delegated cgroup, the holder and all it starts are in it from the start.
		fd, err := in.cg.cgroupFD()
		if err != nil {
			return err
		}
		if fd >= 0 {
			defer unix.Close(fd)
			in.holder.SysProcAttr.UseCgroupFD, in.holder.SysProcAttr.CgroupFD = true, fd
		}
	}
	if err := startPinned(in.holder); err != nil {
		in.holder = nil
		return fmt.Errorf("start sandbox: %w", err)
	}
	in.waitErr = make(chan error, 1)
	go func(c *exec.Cmd) { in.waitErr <- c.Wait() }(in.holder)
	in.holderPID = in.holder.Process.Pid
	if in.rootless {
		closeFiles(extra) // a stage that fails closes the control socket's last other end
		extra = nil
		var m struct {
			Pid int `json:"pid"`
		}
		if err := in.recvCtrl(ctx, &m); err != nil || m.Pid <= 0 {
			return fmt.Errorf("start sandbox: no holder (%v)", err)
		}
		in.holderPID = m.Pid
	}
	// Every command inherits the holder's open-file limit; set before the holder reads its
	// setup, so before any command starts. Without CAP_SYS_RESOURCE in the host's user
	// namespace a command cannot raise it.
	lim := unix.Rlimit{Cur: uint64(in.opts.Nofile), Max: uint64(in.opts.Nofile)}
	if err := unix.Prlimit(in.holderPID, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		return fmt.Errorf("set the open-file limit to %d: %w", in.opts.Nofile, err)
	}
	if err := lowerUserLimits(in.holderPID); err != nil {
		return err
	}
	if in.rootless && !in.deleg.has("pids") {
		if err := boundRootlessPids(in.holderPID, in.opts); err != nil {
			return err
		}
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
	if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", in.holderPID), &st) == nil {
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
	// The owner of the directory the holder mounts: both resolve the path with no link in
	// it (the holder's tree op too), so that a link swapped in cannot make this the owner
	// of one directory and the mount another (or this root, and the mount a root-owned
	// directory shown as the sandbox user's).
	fd, err := openNoSymlinks(in.opts.Workspace)
	if err != nil {
		return nil, nil, fmt.Errorf("workspace %s: %w (a workspace path must have no symbolic link in it: resolve it first)", in.opts.Workspace, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil {
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
