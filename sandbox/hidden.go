package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// A Bind is a host directory a sandbox sees, and where it sees it.
type Bind struct{ Host, Inside string }

// A HiddenTarget is a place inside a sandbox to cover, and whether it is a directory.
type HiddenTarget struct {
	Inside string
	Dir    bool
}

// HiddenTargets are the places inside a sandbox where it would see one of the host paths
// hidden (Options.HiddenPaths), given the host directories it binds. Each hidden path is
// resolved (a link to it is then hidden through its target); one that does not exist, or
// that no bind shows, has none. Backends cover each with an empty read-only file or
// directory, as they mask /proc.
func HiddenTargets(hidden []string, binds []Bind) []HiddenTarget {
	var out []HiddenTarget
	seen := map[string]bool{}
	for _, h := range hidden {
		real, err := filepath.EvalSymlinks(h)
		if err != nil {
			continue
		}
		fi, err := os.Stat(real)
		if err != nil {
			continue
		}
		for _, b := range binds {
			host, err := filepath.EvalSymlinks(b.Host)
			if err != nil {
				continue
			}
			rel, err := filepath.Rel(host, real)
			if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				continue
			}
			inside := filepath.Join(b.Inside, rel)
			if !seen[inside] {
				seen[inside] = true
				out = append(out, HiddenTarget{Inside: inside, Dir: fi.IsDir()})
			}
		}
	}
	return out
}

// shadowed are the top-level directories of a native sandbox's root mounted after the
// read-only paths: one of those beneath them is not seen.
var shadowed = []string{"tmp", "run", "home", "var", "dev", "proc"}

// rootBinds are the host directories a native sandbox's root shows: the top-level
// directories of its root file system that are directories (not links), the read-only
// paths, the workspace.
func rootBinds(cfg *rootConfig) []Bind {
	var b []Bind
	for _, name := range cfg.RootPaths {
		p := filepath.Join(cfg.Rootfs, name)
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			b = append(b, Bind{Host: p, Inside: "/" + name})
		}
	}
	for _, p := range cfg.ReadOnlyPaths {
		top, _, _ := strings.Cut(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
		if !slices.Contains(shadowed, top) {
			b = append(b, Bind{Host: p, Inside: p})
		}
	}
	if cfg.Workspace != "" {
		b = append(b, Bind{Host: cfg.Workspace, Inside: workspaceDir})
	}
	return b
}

// hide covers what the sandbox would see of cfg.HiddenPaths (under the new root) with an
// empty read-only file or directory.
func (p *plan) hide(cfg *rootConfig) {
	for _, t := range HiddenTargets(cfg.HiddenPaths, rootBinds(cfg)) {
		dst := filepath.Join(cfg.NewRoot, t.Inside)
		if t.Dir {
			p.mount("hide "+t.Inside, "tmpfs", dst, "tmpfs", roFlags|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=0555")
			continue
		}
		p.mount("hide "+t.Inside, "/dev/null", dst, "", unix.MS_BIND, "")
		p.mount("remount "+t.Inside+" read-only", "", dst, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, "")
	}
}
