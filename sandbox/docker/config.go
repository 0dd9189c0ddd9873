package docker

import (
	"fmt"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/airlock-proxy/airlock/sandbox"
)

// dockerSocket is never bound into a sandbox, on its own or inside a bound directory.
var dockerSockets = []string{"/var/run/docker.sock", "/run/docker.sock"}

// spec is what a sandbox container is created with.
type spec struct {
	Name    string
	Config  *container.Config
	Host    *container.HostConfig
	Network string // network to create for ModeInternal; "" for none

	Protections []sandbox.Protection // the workspace's, for the sweep at the end
}

// containerSpec turns validated sandbox options into the container's configuration.
// caFile is the host file holding o.CABundle ("" when there is none); network is the
// sandbox's internal network ("" means --network none) and resolver the proxy container's
// address on it.
// ptsDir is the host directory holding a sandbox's private devpts instance ("" for
// Docker's own, which has no max: see instance.mountPts). user is the container's uid:gid
// (userFor).
func (b *Backend) containerSpec(o sandbox.Options, caFile, network, resolver, ptsDir, user string) (spec, error) {
	if o.WorkspaceMode == sandbox.WorkspaceCoW && o.Workspace != "" {
		return spec{}, fmt.Errorf("workspace mode cow: not supported by the docker backend (use rw or ro)")
	}
	labels := map[string]string{Label: o.ID, OwnerLabel: b.owner}
	init := true
	pids := o.Pids
	tmp := "rw,nosuid,nodev,size=" + strconv.FormatInt(o.TmpSize, 10) + ",nr_inodes=" + strconv.FormatInt(o.Inodes, 10)
	cfg := &container.Config{
		Image:      b.opts.Image,
		User:       user,
		Cmd:        b.opts.Idle,
		Entrypoint: []string{},
		Env:        []string{"PATH=" + sandbox.DefaultPath, "HOME=" + sandbox.HomeDir},
		WorkingDir: sandbox.HomeDir,
		Labels:     labels,
		Hostname:   "sandbox",
	}
	host := &container.HostConfig{
		NetworkMode:    container.NetworkMode("none"),
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges", b.seccompOpt(o.AllowAIO)},
		ReadonlyRootfs: true,
		Init:           &init,
		IpcMode:        container.IPCModePrivate,
		Runtime:        b.opts.Runtime,
		LogConfig:      container.LogConfig{Type: "none"},
		Tmpfs: map[string]string{
			"/tmp":          tmp,
			sandbox.HomeDir: tmp + ",uid=" + uidOf(user) + ",gid=" + gidOf(user),
			// In place of Docker's /dev/shm, whose inodes are not bounded.
			"/dev/shm": "rw,nosuid,nodev,noexec,mode=1777,size=64m,nr_inodes=" + strconv.FormatInt(min(o.Inodes, 16384), 10),
		},
		Resources: container.Resources{
			Memory:    o.Memory,
			PidsLimit: &pids,
			NanoCPUs:  int64(o.CPUs * 1e9),
			Ulimits: []*container.Ulimit{{Name: "nofile", Soft: o.Nofile, Hard: o.Nofile},
				// What the kernel counts per user (sandbox/usercounts.go): a sandbox that writes a
				// workspace as its owner shares that user's counts.
				{Name: "sigpending", Soft: sandbox.SigpendingLimit, Hard: sandbox.SigpendingLimit},
				{Name: "msgqueue", Soft: sandbox.MsgqueueLimit, Hard: sandbox.MsgqueueLimit}},
			// cgroup v1 counts socket buffers apart from the memory limit. Docker deprecates
			// the field because kernels from 6.12 deprecate v1 TCP accounting; hosts with
			// cgroup v1 still honour it, and it is the only bound on a v1 host.
			//lint:ignore SA1019 see above: the only TCP buffer bound on cgroup v1 hosts.
			KernelMemoryTCP: sandbox.TCPMemoryLimit(o.Memory),
		},
		MaskedPaths:   maskedPaths(),
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
	}
	if o.Memory > 0 {
		host.MemorySwap = o.Memory // no swap beyond the memory limit
	}
	// Each socket's buffers, in the container's network namespace (namespaced sysctls).
	host.Sysctls = map[string]string{}
	for k, v := range sandbox.TCPSysctls {
		host.Sysctls[k] = v
	}
	if network != "" {
		host.NetworkMode = container.NetworkMode(network)
		// Docker's embedded DNS (127.0.0.11) answers the network's member names and sends
		// other queries to the container's resolvers, by default the daemon's, which are
		// outside. The sandbox needs no DNS (HTTP_PROXY holds the proxy's address), so its
		// only resolver is the proxy container, which serves none: even an engine that
		// forwarded from internal networks would have nowhere outside to forward to. (The
		// 20.10 engine forwards nothing from them: e2e TestInternalNetworkCredential.)
		host.DNS = []string{resolver}
	} else {
		// Docker turns IPv6 off in containers; the proxy's listener needs [::1] on lo as
		// the native backend has it, so that clients preferring IPv6 find it too.
		host.Sysctls["net.ipv6.conf.lo.disable_ipv6"] = "0"
		if sandbox.Transparent(o) {
			// airlock answers DNS inside the container's namespace (transparent egress).
			host.DNS = []string{"127.0.0.1"}
		}
	}
	var protections []sandbox.Protection
	if o.Workspace != "" {
		if err := checkBind(o.Workspace); err != nil {
			return spec{}, err
		}
		host.Mounts = append(host.Mounts, mount.Mount{
			Type: mount.TypeBind, Source: o.Workspace, Target: sandbox.WorkspaceDir,
			ReadOnly: o.WorkspaceMode == sandbox.WorkspaceRO,
		})
		cfg.WorkingDir = sandbox.WorkspaceDir
		// What host tools run (git hooks and config, editor tasks...): bound onto
		// themselves, read-only where marked (the daemon mounts parents first).
		prots, err := sandbox.WorkspaceProtections(o)
		if err != nil {
			return spec{}, err
		}
		protections = prots
		for _, p := range prots {
			if !p.Bound() {
				continue // nothing to bind: for the sweep when the sandbox ends
			}
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind,
				Source: filepath.Join(o.Workspace, filepath.FromSlash(p.Path)),
				Target: path.Join(sandbox.WorkspaceDir, p.Path), ReadOnly: p.ReadOnly})
		}
	}
	for _, p := range o.ReadOnlyPaths {
		if err := checkBind(p); err != nil {
			return spec{}, err
		}
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: p, Target: p, ReadOnly: true})
	}
	if ptsDir != "" {
		// Replaces Docker's devpts (runc links /dev/ptmx to pts/ptmx).
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: ptsDir, Target: "/dev/pts"})
	}
	if caFile != "" {
		host.Mounts = append(host.Mounts, mount.Mount{
			Type: mount.TypeBind, Source: caFile, Target: sandbox.CABundlePath, ReadOnly: true,
		})
	}
	// airlock's config and secrets, where a bound host directory would show them: runc
	// covers each with /dev/null or an empty read-only tmpfs.
	var binds []sandbox.Bind
	if o.Workspace != "" {
		binds = append(binds, sandbox.Bind{Host: o.Workspace, Inside: sandbox.WorkspaceDir})
	}
	for _, p := range o.ReadOnlyPaths {
		binds = append(binds, sandbox.Bind{Host: p, Inside: p})
	}
	for _, t := range sandbox.HiddenTargets(o.HiddenPaths, binds) {
		host.MaskedPaths = append(host.MaskedPaths, t.Inside)
	}
	return spec{Name: containerName(o.ID), Config: cfg, Host: host, Network: network, Protections: protections}, nil
}

// userFor is the container's uid:gid for o: Options.User when set; the owner of a
// read-write workspace that root does not own, so that the sandbox writes it as its owner
// (and shares that user's per-user counts: docs/threat-model.md); else "", for a uid of
// the sandbox's own (slotUser).
func (b *Backend) userFor(o sandbox.Options) (string, error) {
	if b.opts.User != "" {
		return b.opts.User, nil
	}
	if o.Workspace != "" && o.WorkspaceMode == sandbox.WorkspaceRW {
		var st syscall.Stat_t
		if err := syscall.Stat(o.Workspace, &st); err != nil {
			return "", fmt.Errorf("workspace: %w", err)
		}
		if st.Uid != 0 && st.Gid != 0 {
			return fmt.Sprintf("%d:%d", st.Uid, st.Gid), nil
		}
	}
	return "", nil
}

// slotUser is the sandbox user of the host uid range that begins at base (the range's
// uid 1000, as a native sandbox's user): a uid of no other sandbox and of no user of the
// host.
func slotUser(base int) string {
	return fmt.Sprintf("%d:%d", base+sandboxUID, base+sandboxUID)
}

// sandboxUID is the sandbox user's uid within its range.
const sandboxUID = 1000

// checkBind refuses a bind of a Docker socket or of a directory holding one: a sandbox that
// reaches the daemon owns the host.
func checkBind(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("bind %q: must be absolute", p)
	}
	clean := filepath.Clean(p)
	for _, s := range dockerSockets {
		if clean == s || clean == "/" || isUnder(s, clean) {
			return fmt.Errorf("bind %s: would expose the Docker socket %s", p, s)
		}
		if real, err := filepath.EvalSymlinks(clean); err == nil && (real == s || isUnder(s, real)) {
			return fmt.Errorf("bind %s: would expose the Docker socket %s", p, s)
		}
	}
	return nil
}

// isUnder reports whether path is inside dir.
func isUnder(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !filepath.IsAbs(rel) && (len(rel) < 3 || rel[:3] != "../")
}

func uidOf(user string) string {
	u, _, _ := strings.Cut(user, ":")
	return u
}

func gidOf(user string) string {
	u, g, ok := strings.Cut(user, ":")
	if !ok {
		return u
	}
	return g
}

func containerName(id string) string { return "airlock-" + id }

// maskedPaths are Docker's default masked paths and the native backend's /proc masks (the
// list given replaces Docker's).
func maskedPaths() []string {
	paths := []string{"/proc/interrupts", "/sys/firmware", "/sys/devices/virtual/powercap"}
	for _, name := range append(append([]string(nil), sandbox.MaskedProcFiles...), sandbox.MaskedProcDirs...) {
		paths = append(paths, "/proc/"+name)
	}
	return paths
}
