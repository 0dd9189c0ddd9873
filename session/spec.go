package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/image"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

// fill sets the defaults of the bounds and checks that each default is within its bound.
func (o *Options) fill() error {
	if o.MaxTTL <= 0 {
		o.MaxTTL = max(DefaultMaxTTL, o.TTL)
	}
	if o.TTL <= 0 {
		o.TTL = min(DefaultTTL, o.MaxTTL)
	}
	if o.MaxIdleTimeout <= 0 {
		o.MaxIdleTimeout = max(o.MaxTTL, o.IdleTimeout)
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = min(DefaultIdleTimeout, o.MaxIdleTimeout)
	}
	switch {
	case o.TTL > o.MaxTTL:
		return fmt.Errorf("sessions.ttl %s is longer than sessions.max_ttl %s", o.TTL, o.MaxTTL)
	case o.IdleTimeout > o.MaxIdleTimeout:
		return fmt.Errorf("sessions.idle_timeout %s is longer than sessions.max_idle_timeout %s", o.IdleTimeout, o.MaxIdleTimeout)
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = time.Second
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDirForUser()
		o.defaultStateDir = true
	}
	return nil
}

// options turns a spec into sandbox options on top of Base, validating every field.
func (m *Manager) options(ctx context.Context, spec Spec) (o sandbox.Options, backend string, ttl, idle, execTimeout time.Duration, err error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, a...))
	}
	o = m.opts.Base
	o.ID = spec.ID
	if spec.ID != "" {
		if err := identity.CheckID(spec.ID); err != nil {
			return o, "", 0, 0, 0, bad("id: %v", err)
		}
	}
	if backend, err = checkBackend(spec); err != nil {
		return o, "", 0, 0, 0, err
	}
	if spec.Workspace != "" {
		dir, mode, err := sandbox.ParseWorkspace(spec.Workspace)
		if err != nil {
			return o, "", 0, 0, 0, bad("workspace: %v", err)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return o, "", 0, 0, 0, bad("workspace %s: not an existing directory on the airlock host", dir)
		}
		real, err := m.workspaceWithinRoots(dir)
		if err != nil {
			return o, "", 0, 0, 0, bad("workspace %s: %v", dir, err)
		}
		o.Workspace, o.WorkspaceMode = real, mode
	}
	if backend == "native" {
		if err := m.nativeRoot(ctx, spec, &o); err != nil {
			return o, "", 0, 0, 0, err
		}
	}
	if err := m.limits(spec, backend, &o); err != nil {
		return o, "", 0, 0, 0, err
	}
	if len(spec.Labels) > 0 {
		o.Labels = maps.Clone(spec.Labels)
	}
	o.Env = slices.Clone(o.Env)
	for _, k := range sortedKeys(spec.Env) {
		if !validEnvName(k) {
			return o, "", 0, 0, 0, bad("env: %q is not a variable name", k)
		}
		o.Env = append(o.Env, k+"="+spec.Env[k])
	}
	dur := func(name, v string, def time.Duration) (time.Duration, error) {
		if v == "" {
			return def, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, bad("%s %q: want a positive duration such as 30m", name, v)
		}
		return d, nil
	}
	if ttl, err = dur("ttl", spec.TTL, m.opts.TTL); err != nil {
		return o, "", 0, 0, 0, err
	}
	if ttl > m.opts.MaxTTL {
		return o, "", 0, 0, 0, overLimit("ttl %s", ttl, "sessions.max_ttl", m.opts.MaxTTL)
	}
	if idle, err = dur("idle_timeout", spec.IdleTimeout, m.opts.IdleTimeout); err != nil {
		return o, "", 0, 0, 0, err
	}
	if idle > m.opts.MaxIdleTimeout {
		return o, "", 0, 0, 0, overLimit("idle_timeout %s", idle, "sessions.max_idle_timeout", m.opts.MaxIdleTimeout)
	}
	if execTimeout, err = dur("timeout", spec.Timeout, m.opts.MaxExecTimeout); err != nil {
		return o, "", 0, 0, 0, err
	}
	if err := m.checkExecTimeout(execTimeout); err != nil {
		return o, "", 0, 0, 0, err
	}
	// A session's commands each have their own timeout; the sandbox has none of its own.
	o.Timeout = 0
	if o.ID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		o.ID = "sbx-" + hex.EncodeToString(b[:])
	}
	return o, backend, ttl, idle, execTimeout, nil
}

// checkBackend names the spec's backend and checks what it cannot have.
func checkBackend(spec Spec) (string, error) {
	bad := func(format string, a ...any) (string, error) {
		return "", fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, a...))
	}
	backend := spec.Backend
	if backend == "" {
		backend = "native"
	}
	_, mode, _ := sandbox.ParseWorkspace(spec.Workspace)
	switch {
	case backend != "native" && backend != "docker" && backend != "kubernetes":
		return bad("backend %q: want native, docker or kubernetes", backend)
	case spec.Rootfs != "" && backend != "native":
		return bad("rootfs is the native backend's; a %s sandbox's root is its image", backend)
	case spec.Rootfs != "" && spec.Image != "":
		return bad("a native sandbox's root is one of rootfs (a directory) and image (an image), not both")
	case spec.Workspace != "" && backend == "kubernetes":
		return bad("workspace: host directories do not exist on the cluster's nodes; a kubernetes sandbox has none")
	case spec.Workspace != "" && mode == sandbox.WorkspaceCoW && backend != "native":
		return bad("workspace %s: copy-on-write is the native backend's alone; use DIR or DIR:ro", spec.Workspace)
	}
	return backend, nil
}

// ErrOverLimit is a create or exec asking for more than this airlock allows (400, naming
// the config key and its value).
var ErrOverLimit = fmt.Errorf("%w: over this airlock's limit", ErrBadRequest)

func overLimit(format string, v any, key string, max any) error {
	return fmt.Errorf("%w: %s is more than this airlock allows: %s is %v; ask for %v or less",
		ErrOverLimit, fmt.Sprintf(format, v), key, max, max)
}

// limits sets the sandbox's memory, pids and cpus from the spec, each at most the
// server's (Base: sandbox.memory, sandbox.pids, sandbox.cpus), which is also the default.
func (m *Manager) limits(spec Spec, backend string, o *sandbox.Options) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, a...))
	}
	maxMem, maxPids, maxCPUs := m.maxMemory(), m.opts.Base.Pids, m.opts.Base.CPUs
	if maxPids <= 0 {
		maxPids = sandbox.DefaultPids
	}
	o.Memory, o.Pids = maxMem, maxPids
	if backend == "native" && native.Rootless() && m.opts.Base.Memory <= 0 {
		// A rootless sandbox has no cgroup to enforce a memory limit: none unless one is
		// asked for (and the backend refuses that unless sandbox.allow_unenforced_limits).
		o.Memory = 0
	}
	if spec.Memory != "" {
		n, err := sandbox.ParseSize(spec.Memory)
		if err != nil || n <= 0 {
			return bad("memory %q: want a size such as 512M", spec.Memory)
		}
		if n > maxMem {
			return overLimit("memory %s", spec.Memory, "sandbox.memory", sizeString(maxMem))
		}
		o.Memory = n
	}
	if spec.Pids < 0 || spec.CPUs < 0 || spec.CPUs != spec.CPUs || math.IsInf(spec.CPUs, 0) {
		return bad("pids and cpus must be positive")
	}
	if spec.Pids > maxPids {
		return overLimit("pids %d", spec.Pids, "sandbox.pids", maxPids)
	}
	if spec.Pids > 0 {
		o.Pids = spec.Pids
	}
	if maxCPUs > 0 && spec.CPUs > maxCPUs {
		return overLimit("cpus %g", spec.CPUs, "sandbox.cpus", maxCPUs)
	}
	if spec.CPUs > 0 {
		o.CPUs = spec.CPUs
	}
	if backend == "native" && native.Rootless() && (o.Memory > 0 || o.CPUs > 0) {
		if n, ok := m.opts.Base.Backend.(*native.Native); !ok || !n.AllowUnenforcedLimits {
			return bad("memory and cpus %v", native.ErrUnenforcedLimits)
		}
	}
	return nil
}

// maxMemory is the most memory a session may have: sandbox.memory, or the backend's
// default when that is unset.
func (m *Manager) maxMemory() int64 {
	if m.opts.Base.Memory > 0 {
		return m.opts.Base.Memory
	}
	return sandbox.DefaultMemory()
}

// checkExecTimeout bounds a command's timeout by sandbox.timeout, when set.
func (m *Manager) checkExecTimeout(d time.Duration) error {
	if m.opts.MaxExecTimeout > 0 && d > m.opts.MaxExecTimeout {
		return overLimit("timeout %s", d, "sandbox.timeout", m.opts.MaxExecTimeout)
	}
	return nil
}

func sizeString(n int64) string {
	for _, u := range []struct {
		s string
		n int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"k", 1 << 10}} {
		if n%u.n == 0 {
			return fmt.Sprintf("%d%s", n/u.n, u.s)
		}
	}
	return fmt.Sprint(n)
}

func sortedKeys(m map[string]string) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.Sort(keys)
	return keys
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// nativeRoot sets a native sandbox's root from spec.Rootfs (a directory under
// sessions.rootfs_roots) or spec.Image (an image of the local Docker engine, or a path under
// sessions.rootfs_roots, unpacked into the image cache), with the image's configuration.
func (m *Manager) nativeRoot(ctx context.Context, spec Spec, o *sandbox.Options) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, a...))
	}
	switch {
	case spec.Rootfs != "":
		if !filepath.IsAbs(spec.Rootfs) {
			return bad("rootfs %q: want an absolute directory of the airlock host", spec.Rootfs)
		}
		if fi, err := os.Stat(spec.Rootfs); err != nil || !fi.IsDir() {
			return bad("rootfs %s: not an existing directory on the airlock host (an image tarball is image)", spec.Rootfs)
		}
		real, err := withinRoots(spec.Rootfs, m.opts.RootfsRoots, "sessions.rootfs_roots", "root file systems or image files")
		if err != nil {
			return bad("rootfs %s: %v", spec.Rootfs, err)
		}
		o.Rootfs, o.Image = real, nil
	case spec.Image != "":
		if m.opts.Images == nil {
			return bad("image %s: this airlock unpacks no images for native sandboxes", spec.Image)
		}
		var root string
		var err error
		if strings.HasPrefix(spec.Image, "/") || strings.HasPrefix(spec.Image, ".") {
			// A path: only under the roots, so that an issuer cannot have airlock read
			// any file of the host as an image.
			if !filepath.IsAbs(spec.Image) {
				return bad("image %q: a path must be absolute", spec.Image)
			}
			real, err := withinRoots(spec.Image, m.opts.RootfsRoots, "sessions.rootfs_roots", "root file systems or image files")
			if err != nil {
				return bad("image %s: %v", spec.Image, err)
			}
			root, err = m.opts.Images.Resolve(ctx, real)
			if err != nil {
				return bad("%v", err)
			}
		} else if root, err = m.opts.Images.ResolveEngine(ctx, spec.Image); err != nil {
			return bad("%v", err)
		}
		ic, err := image.LoadConfig(root)
		if err == nil && ic != nil {
			err = ic.Check(root)
		}
		if err != nil {
			return bad("image %s: %v", spec.Image, err)
		}
		// The cache is airlock's own: its path's links (in $AIRLOCK_HOME) are resolved here,
		// since the backend mounts a root only through a path with none.
		if real, err := filepath.EvalSymlinks(root); err == nil {
			root = real
		}
		o.Rootfs, o.Image = root, ic
	}
	return nil
}

// workspaceWithinRoots resolves dir (links followed) and checks that it is one of the
// configured workspace roots or lies beneath one; it returns the resolved path, which is the
// one mounted, so a link swapped in later changes nothing.
func (m *Manager) workspaceWithinRoots(dir string) (string, error) {
	return withinRoots(dir, m.opts.WorkspaceRoots, "sessions.workspace_roots", "workspaces")
}

// withinRoots resolves p (links followed) and checks that it is one of roots or lies
// beneath one; it returns the resolved path. key names the setting of roots, what what it
// allows.
func withinRoots(p string, roots []string, key, what string) (string, error) {
	if len(roots) == 0 {
		return "", fmt.Errorf("this airlock serves no %s: set %s to the host directories sessions may use", what, key)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	for _, root := range roots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		rel, err := filepath.Rel(r, real)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return real, nil
		}
	}
	return "", fmt.Errorf("not under %s (%s)", key, strings.Join(roots, ", "))
}

// DefaultStateDirForUser is DefaultStateDir for root; for another user the sessions directory
// beside its rootless sandboxes' state ($XDG_RUNTIME_DIR/airlock/sessions, else
// ~/.local/state/airlock/run/sessions), never a directory shared with other users.
func DefaultStateDirForUser() string {
	if native.Rootless() {
		if d := native.RootlessStateDir(); d != "" {
			return filepath.Join(d, "sessions")
		}
	}
	return DefaultStateDir
}
