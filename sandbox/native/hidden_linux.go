package native

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-proxy/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// shadowed are the top-level directories of a native sandbox's root mounted after the
// read-only paths: one of those beneath them is not seen.
var shadowed = []string{"tmp", "run", "home", "var", "dev", "proc"}

// rootBinds are the host directories a native sandbox's root shows: the top-level
// directories of its root file system that are directories (not links), the read-only
// paths, the workspace.
func rootBinds(cfg *rootConfig) []sandbox.Bind {
	var b []sandbox.Bind
	for _, name := range cfg.RootPaths {
		p := filepath.Join(cfg.Rootfs, name)
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			b = append(b, sandbox.Bind{Host: p, Inside: "/" + name})
		}
	}
	for _, p := range cfg.ReadOnlyPaths {
		top, _, _ := strings.Cut(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
		if !slices.Contains(shadowed, top) {
			b = append(b, sandbox.Bind{Host: p, Inside: p})
		}
	}
	if cfg.Workspace != "" {
		b = append(b, sandbox.Bind{Host: cfg.Workspace, Inside: workspaceDir})
	}
	return b
}

// hide covers what the sandbox would see of cfg.HiddenPaths (under the new root) with an
// empty read-only file or directory.
func (p *plan) hide(cfg *rootConfig) {
	for _, t := range sandbox.HiddenTargets(cfg.HiddenPaths, rootBinds(cfg)) {
		dst := filepath.Join(cfg.NewRoot, t.Inside)
		if t.Dir {
			p.mount("hide "+t.Inside, "tmpfs", dst, "tmpfs", roFlags|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=0555")
			continue
		}
		p.mount("hide "+t.Inside, "/dev/null", dst, "", unix.MS_BIND, "")
		p.mount("remount "+t.Inside+" read-only", "", dst, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, "")
	}
}
