package docker

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/sandbox"
)

// instance is one sandbox container.
type instance struct {
	b         *Backend
	opts      sandbox.Options
	id        string // container id
	user      string // uid:gid commands run as
	pid       int    // host pid of the container's init (ModeNetNS)
	dir       string // per-sandbox state directory on the host
	ownsDir   bool   // dir is this instance's to unmount and remove (not another sandbox's of the same id)
	network   string // ModeInternal: the sandbox's network
	joined    bool   // ModeInternal: the proxy's container was connected to it
	proxyAddr string // ModeInternal: the proxy's ip:port on that network
	proxyEnv  []string
	detach    []func()
	token     bool // a proxy credential was issued
	protected []sandbox.Protection
	freeUIDs  func() // frees the uid range reserved for the sandbox, if one was

	teardown sandbox.Teardown
	mu       sync.Mutex
	dead     error // set when the container had to be killed
}

var _ sandbox.Instance = (*instance)(nil)

// Create starts a sandbox container for validated options.
func (b *Backend) Create(ctx context.Context, o sandbox.Options) (inst sandbox.Instance, err error) {
	if o.Memory == 0 {
		o.Memory = sandbox.DefaultMemory()
	}
	in := &instance{b: b, opts: o, dir: filepath.Join(b.opts.StateDir, o.ID)}
	defer func() {
		if err != nil {
			_ = in.Close(context.WithoutCancel(ctx))
		}
	}()
	if err := os.MkdirAll(b.opts.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	if err := os.Mkdir(in.dir, 0o711); err != nil {
		if os.IsExist(err) {
			// Another sandbox's (live or left over): nothing of it is this Create's to remove.
			return nil, fmt.Errorf("sandbox %s %w", o.ID, sandbox.ErrExists)
		}
		return nil, fmt.Errorf("create sandbox directory: %w", err)
	}
	in.ownsDir = true
	caFile := ""
	if len(o.CABundle) > 0 {
		caFile = filepath.Join(in.dir, "ca-bundle.pem")
		if err := os.WriteFile(caFile, o.CABundle, 0o644); err != nil {
			return nil, fmt.Errorf("write CA bundle: %w", err)
		}
	}
	if b.mode == ModeInternal {
		if err := in.createNetwork(ctx); err != nil {
			return nil, err
		}
	}
	resolver := ""
	if in.proxyAddr != "" {
		resolver, _, _ = net.SplitHostPort(in.proxyAddr)
	}
	ptsDir, err := in.mountPts()
	if err != nil {
		return nil, err
	}
	user, err := b.userFor(o)
	if err != nil {
		return nil, err
	}
	if user == "" {
		if user, err = in.reserveUser(); err != nil {
			return nil, err
		}
	}
	sp, err := b.containerSpec(o, caFile, in.network, resolver, ptsDir, user)
	if err != nil {
		return nil, err
	}
	in.protected = sp.Protections
	created, err := b.cli.ContainerCreate(ctx, sp.Config, sp.Host, nil, nil, sp.Name)
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return nil, fmt.Errorf("sandbox %s %w (container %s)", o.ID, sandbox.ErrExists, sp.Name)
		}
		return nil, fmt.Errorf("create container from %s: %w", b.opts.Image, err)
	}
	in.id, in.user = created.ID, sp.Config.User
	if err := b.cli.ContainerStart(ctx, in.id, container.StartOptions{}); err != nil {
		return nil, fmt.Errorf("start container: %w", err)
	}
	st, err := b.cli.ContainerInspect(ctx, in.id)
	if err != nil {
		return nil, fmt.Errorf("inspect container: %w", err)
	}
	if st.State == nil || !st.State.Running {
		return nil, fmt.Errorf("container %s is not running after start (does the image have %q?)", sp.Name, b.opts.Idle[0])
	}
	in.pid = st.State.Pid
	if err := in.checkTCPLimit(created.Warnings); err != nil {
		return nil, err
	}
	switch {
	case b.mode == ModeNetNS && o.Proxy != nil:
		if err := in.attachProxy(); err != nil {
			return nil, err
		}
	case b.mode == ModeInternal:
		tok, err := b.opts.Tokens.IssueToken(ctx, sandbox.Identity{ID: o.ID, Labels: o.Labels})
		if err != nil {
			return nil, fmt.Errorf("issue proxy credential: %w", err)
		}
		in.token = true
		in.proxyEnv = proxyEnv(o.ID, tok, in.proxyAddr)
	}
	b.opts.Logger.Debug("sandbox container started", "sandbox", o.ID, "container", in.id[:12], "mode", string(b.mode))
	return in, nil
}

// attachProxy opens the proxy's listeners inside the container's network namespace, after
// making sure the pid is that container's (airlock and the daemon share a pid namespace).
func (in *instance) attachProxy() error {
	if in.pid <= 0 {
		return errors.New("attach proxy: container has no pid")
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", in.pid))
	if err != nil {
		return fmt.Errorf("attach proxy: container process %d: %w", in.pid, err)
	}
	if !strings.Contains(string(cg), in.id) {
		return fmt.Errorf("attach proxy: process %d is not in container %s (is airlock in the daemon's pid namespace?)", in.pid, in.id[:12])
	}
	id := sandbox.Identity{ID: in.opts.ID, Labels: in.opts.Labels}
	detach, err := sandbox.AttachNetns(fmt.Sprintf("/proc/%d/ns/net", in.pid), in.opts.Proxy, id, in.opts.ProxyOnly)
	in.detach = append(in.detach, detach...)
	if err != nil {
		return fmt.Errorf("attach proxy: %w", err)
	}
	return nil
}

// proxyEnv points the proxy variables at addr with the sandbox's credential in them.
func proxyEnv(id, token, addr string) []string {
	u := (&url.URL{Scheme: "http", User: url.UserPassword(id, token), Host: addr}).String()
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u}
}

// Changes is nil: the docker backend has no copy-on-write workspace.
func (in *instance) Changes() ([]sandbox.Change, error) { return nil, nil }

// Patch is nil: the docker backend has no copy-on-write workspace.
func (in *instance) Patch() ([]byte, error) { return nil, nil }

// Close revokes the proxy credential, drops the listeners and removes the container, its
// network and its state directory. It is idempotent.
func (in *instance) Close(ctx context.Context) error {
	return in.teardown.Close(ctx, in.close)
}

func (in *instance) close(ctx context.Context) error {
	var errs []error
	if in.token {
		if err := in.b.opts.Tokens.RevokeToken(ctx, in.opts.ID); err != nil {
			errs = append(errs, fmt.Errorf("revoke proxy credential: %w", err))
		}
	}
	for _, d := range in.detach {
		d()
	}
	removed := true // no process of the sandbox runs any more
	if in.id != "" {
		err := in.b.cli.ContainerRemove(ctx, in.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove container: %w", err))
			removed = false
		}
	}
	if in.network != "" {
		errs = append(errs, in.removeNetwork(ctx))
	}
	if in.ownsDir { // else another sandbox of the same id may live in it
		if err := unmountPts(in.dir); err != nil {
			errs = append(errs, err)
		} else if err := os.RemoveAll(in.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox directory: %w", err))
		}
	}
	if in.freeUIDs != nil && removed {
		in.freeUIDs()
	}
	return errors.Join(errs...)
}

// reserveUser reserves a host uid range for the sandbox (sandbox.ReserveUIDRange) and
// returns its user. Where the machine-wide reservations cannot be made (airlock is not
// root), a range is picked at random, unreserved, and the log says so.
func (in *instance) reserveUser() (string, error) {
	base, release, err := sandbox.ReserveUIDRange(in.opts.ID, in.b.opts.StateDir)
	if errors.Is(err, os.ErrPermission) {
		var b [2]byte
		_, _ = rand.Read(b[:])
		base = 100000 + (1+int(binary.BigEndian.Uint16(b[:]))%32000)*65536
		in.b.opts.Logger.Warn("the sandbox's uid range is not reserved machine-wide (airlock is not root): picked at random, it could be another sandbox's",
			"sandbox", in.opts.ID, "uid", base+sandboxUID)
		return slotUser(base), nil
	}
	if err != nil {
		return "", err
	}
	in.freeUIDs = release
	return slotUser(base), nil
}

// checkTCPLimit makes sure, with a local daemon, that the container's cgroup v1 memory
// group bounds its socket buffers (kmem.tcp, which the daemon may have discarded: its
// warnings say so), setting it itself if not: the container's init has made no socket yet,
// and the sandbox's commands start later. Elsewhere the daemon's warnings are logged.
func (in *instance) checkTCPLimit(warnings []string) error {
	for _, w := range warnings {
		in.b.opts.Logger.Warn("docker: "+w, "sandbox", in.opts.ID)
	}
	if !in.b.local || in.pid <= 0 {
		return nil
	}
	dir := memoryCgroup(in.pid)
	if dir == "" {
		return nil // no v1 memory hierarchy: v2 counts socket buffers in memory.max
	}
	want := strconv.FormatInt(sandbox.TCPMemoryLimit(in.opts.Memory), 10)
	file := filepath.Join(dir, "memory.kmem.tcp.limit_in_bytes")
	if b, err := os.ReadFile(file); err == nil && strings.TrimSpace(string(b)) == want {
		return nil
	}
	if err := os.WriteFile(file, []byte(want), 0); err != nil {
		return fmt.Errorf("bound the sandbox's socket buffers (%s): %w", file, err)
	}
	return nil
}

// memoryCgroup is the cgroup v1 memory directory of process pid, "" when none.
func memoryCgroup(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "memory") {
			dir := filepath.Join("/sys/fs/cgroup/memory", f[2])
			if _, err := os.Stat(dir); err == nil {
				return dir
			}
		}
	}
	return ""
}

// mountPts mounts the sandbox's private devpts instance, with at most Options.Ptys
// terminals, in its state directory, for the container's /dev/pts: Docker's own devpts has
// no max, and kernel.pty.max is shared by every container of the machine. That needs root
// beside the daemon; elsewhere the container keeps Docker's devpts and the bound is not
// enforced (said in the log).
func (in *instance) mountPts() (string, error) {
	if !in.b.local {
		in.b.opts.Logger.Warn("the sandbox's pseudo-terminals are not bounded: a private devpts needs airlock as root beside the Docker daemon", "sandbox", in.opts.ID)
		return "", nil
	}
	dir := filepath.Join(in.dir, "pts")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("create devpts mount point: %w", err)
	}
	if err := unix.Mount("devpts", dir, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, sandbox.DevptsOptions(in.opts.Ptys)); err != nil {
		return "", fmt.Errorf("mount the sandbox's devpts: %w", err)
	}
	return dir, nil
}

// unmountPts unmounts a sandbox's devpts under its state directory dir, if mounted.
func unmountPts(dir string) error {
	err := unix.Unmount(filepath.Join(dir, "pts"), unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("unmount the sandbox's devpts: %w", err)
}

// ContainerID is the sandbox's container id ("" before it was created).
func (in *instance) ContainerID() string { return in.id }

// Protections are the workspace's protections, for the sweep when the sandbox ends.
func (in *instance) Protections() []sandbox.Protection { return in.protected }
