package session

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/sandbox"
)

// options turns a spec into sandbox options on top of Base, validating every field.
func (m *Manager) options(spec Spec) (o sandbox.Options, backend string, ttl, idle, execTimeout time.Duration, err error) {
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
	if spec.Memory != "" {
		n, err := sandbox.ParseSize(spec.Memory)
		if err != nil {
			return o, "", 0, 0, 0, bad("memory: %v", err)
		}
		o.Memory = n
	}
	if spec.Pids < 0 || spec.CPUs < 0 || spec.CPUs != spec.CPUs {
		return o, "", 0, 0, 0, bad("pids and cpus must be positive")
	}
	if spec.Pids > 0 {
		o.Pids = spec.Pids
	}
	if spec.CPUs > 0 {
		o.CPUs = spec.CPUs
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
	backend = spec.Backend
	if backend == "" {
		backend = "native"
	}
	switch backend {
	case "native", "docker":
	default:
		return o, "", 0, 0, 0, bad("backend %q: want native or docker (kubernetes sandboxes are not served as sessions)", backend)
	}
	if spec.Image != "" && backend == "native" {
		return o, "", 0, 0, 0, bad("image is for the docker backend; the native backend runs the host's root read-only")
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
	if m.opts.MaxTTL > 0 && ttl > m.opts.MaxTTL {
		return o, "", 0, 0, 0, bad("ttl %s is longer than sessions.max_ttl %s", ttl, m.opts.MaxTTL)
	}
	if idle, err = dur("idle_timeout", spec.IdleTimeout, m.opts.IdleTimeout); err != nil {
		return o, "", 0, 0, 0, err
	}
	if execTimeout, err = dur("timeout", spec.Timeout, 0); err != nil {
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

// workspaceWithinRoots resolves dir (links followed) and checks that it is one of the
// configured workspace roots or lies beneath one; it returns the resolved path, which is the
// one mounted, so a link swapped in later changes nothing.
func (m *Manager) workspaceWithinRoots(dir string) (string, error) {
	if len(m.opts.WorkspaceRoots) == 0 {
		return "", errors.New("this airlock serves no workspaces: set sessions.workspace_roots to the host directories sessions may use")
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	for _, root := range m.opts.WorkspaceRoots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		rel, err := filepath.Rel(r, real)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return real, nil
		}
	}
	return "", fmt.Errorf("not under sessions.workspace_roots (%s)", strings.Join(m.opts.WorkspaceRoots, ", "))
}
