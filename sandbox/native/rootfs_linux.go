package native

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-proxy/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// A sandbox with a root file system of its own (Options.Rootfs other than "/", an unpacked
// image or a directory) sees that tree read-only as its /, through an overlay of two lower
// layers and no upper one: the image, and above it a small top layer airlock writes in the
// sandbox's state directory before the holder starts. The top layer holds the sandbox's
// /etc/passwd, group, hosts, hostname and resolv.conf, the CA bundle where the image's
// tools look, and every mount point. Being above, its entries win over whatever the image
// has at those paths (a directory over a link too), so no mount and no write ever goes
// through a link of the image, which could name a host path before the pivot.

// Identity files a sandbox gets (its own, not the host's: `id` shows "sandbox" for uid
// 1000 and no host account's name).
const (
	passwdFile = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"sandbox:x:1000:1000:airlock sandbox:" + homeDir + ":/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
	groupFile = "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n"
)

// hostsFile names the sandbox's loopback addresses.
func hostsFile(hostname string) string {
	return "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname + "\n"
}

// noResolver is resolv.conf of an image sandbox without transparent egress: no DNS.
const noResolver = "# no DNS inside this sandbox: the network is reached through HTTP_PROXY only\nnameserver 127.0.0.1\n"

// imageCAPaths are where the tools of common distributions look for the system CA bundle:
// Debian, Ubuntu and Alpine; RHEL, Fedora and CentOS (the link and its target); SUSE;
// OpenSSL's default on Alpine and others.
var imageCAPaths = []string{
	"etc/ssl/certs/ca-certificates.crt",
	"etc/pki/tls/certs/ca-bundle.crt",
	"etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"etc/ssl/ca-bundle.pem",
	"etc/ssl/cert.pem",
}

// imageMountPoints are the top-level mount points of an image sandbox.
var imageMountPoints = []string{"tmp", "run", "home", "dev", "proc"}

// checkOverlayPath refuses a path overlayfs's option string cannot carry.
func checkOverlayPath(p string) error {
	if strings.ContainsAny(p, ",:\\\n") {
		return fmt.Errorf("root file system %q: a path with ',', ':' or '\\' cannot be an overlay layer", p)
	}
	return nil
}

// writeTopLayer fills cfg.TopLayer (an empty directory): mount points, identity files,
// resolver configuration, CA bundles.
func writeTopLayer(cfg *rootConfig, hostname string) error {
	top := cfg.TopLayer
	dirs := slices.Clone(imageMountPoints)
	if cfg.Workspace != "" {
		dirs = append(dirs, strings.TrimPrefix(workspaceDir, "/"))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(top, d), 0o755); err != nil {
			return fmt.Errorf("image top layer: %w", err)
		}
	}
	for _, p := range cfg.ReadOnlyPaths {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("read-only path %s: %w", p, err)
		}
		dst := filepath.Join(top, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("image top layer: %w", err)
		}
		if fi.IsDir() {
			err = os.MkdirAll(dst, 0o755)
		} else {
			err = os.WriteFile(dst, nil, 0o644)
		}
		if err != nil {
			return fmt.Errorf("image top layer: %w", err)
		}
	}
	resolv := noResolver
	if cfg.Resolver {
		resolv = ResolvConf
	}
	files := map[string]string{"etc/passwd": passwdFile, "etc/group": groupFile,
		"etc/hosts": hostsFile(hostname), "etc/hostname": hostname + "\n", "etc/resolv.conf": resolv}
	if len(cfg.CABundle) > 0 {
		for _, p := range imageCAPaths {
			files[p] = string(cfg.CABundle)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		dst := filepath.Join(top, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("image top layer: %w", err)
		}
		if err := os.WriteFile(dst, []byte(files[name]), 0o644); err != nil {
			return fmt.Errorf("image top layer: %w", err)
		}
	}
	return nil
}

// planImageRoot plans the file system of a sandbox with a root of its own (see above).
func planImageRoot(cfg *rootConfig) ([]mountOp, error) {
	if err := checkOverlayPath(cfg.Rootfs); err != nil {
		return nil, err
	}
	if err := checkOverlayPath(cfg.TopLayer); err != nil {
		return nil, err
	}
	p := &plan{}
	p.mount("make mounts private", "", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
	for _, k := range slices.Sorted(maps.Keys(sandbox.TCPSysctls)) {
		p.add("write", "set "+k, "/proc/sys/"+strings.ReplaceAll(k, ".", "/"), sandbox.TCPSysctls[k])
	}
	root := cfg.NewRoot
	// No upper layer: the overlay is read-only whatever its mount flags. No redirects or
	// metacopy: an image's xattrs do not steer the overlay (they are not unpacked anyway).
	// redirect_dir=nofollow (neither made nor followed), not "off": in a user namespace
	// (rootless) the kernel uses user.overlay xattrs and refuses "off" as conflicting.
	// The image's directory is first bound, through a path with no link in it (the tree
	// op), beside the top layer, and the overlay takes that bind as its lower layer: a
	// session's rootfs is checked under sessions.rootfs_roots with its links resolved, and
	// whoever may write a directory on it could otherwise swap a link in afterwards and have
	// another host directory be the sandbox's root.
	lower := filepath.Join(filepath.Dir(cfg.TopLayer), "image")
	if err := checkOverlayPath(lower); err != nil {
		return nil, err
	}
	p.add("tree", "bind the image "+cfg.Rootfs, cfg.Rootfs, lower,
		strconv.FormatUint(unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, 10), "-1")
	opts := fmt.Sprintf("lowerdir=%s:%s,redirect_dir=nofollow,metacopy=off", cfg.TopLayer, lower)
	p.mount("mount the image read-only", "overlay", root, "overlay", roFlags, opts)
	for _, path := range cfg.ReadOnlyPaths {
		dst := filepath.Join(root, path)
		p.mount("bind "+path, path, dst, "", unix.MS_BIND, "")
		p.mount("remount "+dst+" read-only", "", dst, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, "")
	}
	uid, gid := cfg.UIDBase+sandboxUID, cfg.UIDBase+sandboxGID
	if cfg.Rootless { // the holder's uid 0 is the sandbox user (as in planRoot)
		uid, gid = 0, 0
	}
	p.tmpfs(filepath.Join(root, "tmp"), fmt.Sprintf("mode=1777,size=%d,nr_inodes=%d", cfg.TmpSize, cfg.Inodes))
	for _, dir := range []string{"run", "home"} {
		p.tmpfs(filepath.Join(root, dir), "mode=0755,size=1m,nr_inodes=1024")
	}
	p.tmpfs(filepath.Join(root, homeDir), fmt.Sprintf("mode=0700,size=%d,nr_inodes=%d,uid=%d,gid=%d", cfg.TmpSize, cfg.Inodes, uid, gid))
	if err := p.dev(filepath.Join(root, "dev"), cfg); err != nil {
		return nil, err
	}
	p.mountAt("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	p.maskProc(filepath.Join(root, "proc"))
	p.workspace(cfg, filepath.Join(root, workspaceDir))
	p.protect(cfg.Protections, filepath.Join(root, workspaceDir))
	if len(cfg.CABundle) > 0 {
		p.add("write", "write CA bundle", filepath.Join(root, caBundlePath), string(cfg.CABundle))
	}
	if cfg.Resolver {
		p.add("write", "write resolver configuration", filepath.Join(root, resolvConfPath), ResolvConf)
	}
	p.hide(cfg)
	p.mask(cfg) // what the read-only paths show of the host's secrets
	for _, dir := range []string{"run", "home"} {
		p.mount("remount /"+dir+" read-only", "", filepath.Join(root, dir), "", unix.MS_REMOUNT|roFlags, "")
	}
	p.add("pivot", "pivot into the sandbox root", root)
	return p.ops, nil
}

// identityFiles covers the host root's /etc/passwd and /etc/group with the sandbox's own
// (written in its /run), so that no host account's name shows.
func (p *plan) identityFiles(cfg *rootConfig, root string) {
	for _, f := range []struct{ name, content string }{{"passwd", passwdFile}, {"group", groupFile}} {
		src := filepath.Join(root, "run/airlock", f.name)
		p.add("write", "write /etc/"+f.name, src, f.content)
		fi, err := os.Lstat(filepath.Join(cfg.Rootfs, "etc", f.name))
		if err != nil || !fi.Mode().IsRegular() || !slices.Contains(cfg.RootPaths, "etc") {
			continue
		}
		dst := filepath.Join(root, "etc", f.name)
		p.mount("bind /etc/"+f.name, src, dst, "", unix.MS_BIND, "")
		p.mount("remount /etc/"+f.name+" read-only", "", dst, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, "")
	}
}
