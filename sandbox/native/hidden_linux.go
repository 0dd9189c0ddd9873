package native

import (
	"fmt"
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

// mask covers what the sandbox's root shows of cfg.MaskPaths (the workspace is left as
// it is: its owner chose to share it) with an empty read-only file or directory.
func (p *plan) mask(cfg *rootConfig) {
	var binds []sandbox.Bind
	for _, b := range rootBinds(cfg) {
		if b.Inside != workspaceDir {
			binds = append(binds, b)
		}
	}
	p.cover("mask", sandbox.HiddenTargets(cfg.MaskPaths, binds), cfg.NewRoot)
}

// hide covers what the sandbox would see of cfg.HiddenPaths (under the new root) with an
// empty read-only file or directory.
func (p *plan) hide(cfg *rootConfig) {
	p.cover("hide", sandbox.HiddenTargets(cfg.HiddenPaths, rootBinds(cfg)), cfg.NewRoot)
}

// cover covers each target under root with an empty read-only file or directory.
func (p *plan) cover(verb string, targets []sandbox.HiddenTarget, root string) {
	for _, t := range targets {
		dst := filepath.Join(root, t.Inside)
		if t.Dir {
			p.mount(verb+" "+t.Inside, "tmpfs", dst, "tmpfs", roFlags|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=0555")
			continue
		}
		p.mount(verb+" "+t.Inside, "/dev/null", dst, "", unix.MS_BIND, "")
		p.mount("remount "+t.Inside+" read-only", "", dst, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, "")
	}
}

// checkMaskedBinds refuses a read-only path that is, or is beneath, a masked path (each
// resolved, as HiddenTargets does): the mask covers a path only where a bind of a
// directory above it shows it, so such a bind would show what the mask list says no
// sandbox sees. The caller asked for both; which one wins is theirs to say.
func checkMaskedBinds(readOnly, masks []string) error {
	for _, m := range masks {
		realMask, err := filepath.EvalSymlinks(m)
		if err != nil {
			continue // nothing there to show
		}
		for _, ro := range readOnly {
			real, err := filepath.EvalSymlinks(ro)
			if err != nil {
				continue // refused as a missing read-only path when it is bound
			}
			rel, err := filepath.Rel(realMask, real)
			if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				continue
			}
			return fmt.Errorf("read-only path %s is under the masked path %s (host secrets no sandbox on the host's root sees: sandbox.DefaultMaskPaths and sandbox.mask_paths): bind it from elsewhere, or take %s off the list (sandbox.unmask_paths) to show it", ro, m, m)
		}
	}
	return nil
}
