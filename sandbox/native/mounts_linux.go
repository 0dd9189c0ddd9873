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

// Paths inside a sandbox.
const (
	workspaceDir = sandbox.WorkspaceDir
	homeDir      = sandbox.HomeDir
	caBundlePath = sandbox.CABundlePath
	sandboxUID   = 1000
	sandboxGID   = 1000
)

// defaultRootPaths are the top-level entries of the root file system a sandbox sees (bound
// read-only when they exist). Everything else of the host (/root, /home, /run, /tmp, /var,
// /mnt, /srv, ...) is absent.
var defaultRootPaths = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "opt"}

// hostDevices are bound from the host's /dev into the sandbox's.
var hostDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

const roFlags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV

// rootConfig describes a sandbox's file system.
type rootConfig struct {
	Rootfs        string
	RootPaths     []string
	ReadOnlyPaths []string
	NewRoot       string // mount point of the new root, in the sandbox's state directory
	Workspace     string
	WorkspaceMode sandbox.WorkspaceMode
	LowerDir      string // copy-on-write layers, in the state directory
	UpperDir      string
	WorkDir       string
	TmpSize       int64
	Ptys          int64 // the devpts instance's max
	Inodes        int64 // nr_inodes of each writable tmpfs
	UIDBase       int
	Rootless      bool // the holder is root of a user namespace mapping only the invoking user
	CABundle      []byte
	Resolver      bool // airlock answers DNS inside: resolv.conf names 127.0.0.1
	IdmapFD       int  // the id-map user namespace's descriptor in the holder; -1 when absent
	Protections   []sandbox.Protection
	HiddenPaths   []string // host paths covered where the sandbox would see them
	// MaskPaths are host paths that hold secrets on typical hosts, covered where the root
	// (not the workspace) shows them: the host root's /etc/ssh, say.
	MaskPaths []string
	// Image: Rootfs is a whole root file system of its own (see rootfs_linux.go), shown
	// through an overlay whose top layer is TopLayer.
	Image    bool
	TopLayer string
}

// A mountOp is one step of building a sandbox's file system. The parent plans the steps
// (it sees the same host file system, so it can decide what exists and what is a link);
// the holder, inside the sandbox's mount namespace, carries them out in order and stops at
// the first failure, reporting Desc and the error number. Kinds and their Args:
//
//	mount   source, target, fstype, flags (decimal), data    mount(2); empty data is NULL
//	mkdir   path                                             mkdir -p, mode 0755
//	touch   path                                             create an empty file (and parents)
//	symlink target, path
//	write   path, content                                    create a 0644 file (and parents)
//	tree    source, target, attr_set (decimal), userns fd    open_tree clone, mount_setattr
//	                                                          (idmapped when fd >= 0), move_mount
//	mknod   path, mode (decimal, type and permissions), dev     mknod(2), then chmod to mode
//	pivot   new root                                         pivot_root and detach the old root
type mountOp struct {
	Kind string
	Desc string
	Args []string
}

// opArgs is the number of arguments of each kind of mountOp.
var opArgs = map[string]int{"mount": 5, "mkdir": 1, "touch": 1, "symlink": 2, "write": 2, "tree": 4, "mknod": 3, "pivot": 1}

type plan struct{ ops []mountOp }

func (p *plan) add(kind, desc string, args ...string) {
	p.ops = append(p.ops, mountOp{Kind: kind, Desc: desc, Args: args})
}

func (p *plan) mount(desc, src, dst, fstype string, flags uintptr, data string) {
	p.add("mount", desc, src, dst, fstype, strconv.FormatUint(uint64(flags), 10), data)
}

func (p *plan) mkdir(path string) { p.add("mkdir", "create mount point "+path, path) }

// mountAt creates dst and mounts there.
func (p *plan) mountAt(src, dst, fstype string, flags uintptr, data string) {
	p.mkdir(dst)
	p.mount(fmt.Sprintf("mount %s on %s", fstype, dst), src, dst, fstype, flags, data)
}

func (p *plan) tmpfs(dst, opts string) {
	p.mountAt("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts)
}

func (p *plan) symlink(target, path string) { p.add("symlink", "link "+path, target, path) }

// planRoot plans the sandbox's file system under cfg.NewRoot and the pivot into it.
func planRoot(cfg *rootConfig) ([]mountOp, error) {
	if cfg.Image {
		return planImageRoot(cfg)
	}
	p := &plan{}
	p.mount("make mounts private", "", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
	// The holder is in the sandbox's network namespace, which /proc/sys/net shows.
	for _, k := range slices.Sorted(maps.Keys(sandbox.TCPSysctls)) {
		p.add("write", "set "+k, "/proc/sys/"+strings.ReplaceAll(k, ".", "/"), sandbox.TCPSysctls[k])
	}
	root := cfg.NewRoot
	p.mount("mount root tmpfs", "airlock", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=4m,nr_inodes=4096")
	for _, name := range cfg.RootPaths {
		if err := p.rootEntry(filepath.Join(cfg.Rootfs, name), filepath.Join(root, name)); err != nil {
			return nil, err
		}
	}
	for _, path := range cfg.ReadOnlyPaths {
		if err := p.bindReadOnly(path, filepath.Join(root, path)); err != nil {
			return nil, err
		}
	}
	uid, gid := cfg.UIDBase+sandboxUID, cfg.UIDBase+sandboxGID
	if cfg.Rootless { // the holder's uid 0 is the sandbox user (stage_linux.c's write_idmap)
		uid, gid = 0, 0
	}
	p.tmpfs(filepath.Join(root, "tmp"), fmt.Sprintf("mode=1777,size=%d,nr_inodes=%d", cfg.TmpSize, cfg.Inodes))
	for _, dir := range []string{"run", "home", "var"} {
		p.tmpfs(filepath.Join(root, dir), "mode=0755,size=1m,nr_inodes=1024")
	}
	p.symlink("../tmp", filepath.Join(root, "var/tmp"))
	p.symlink("../run", filepath.Join(root, "var/run"))
	p.tmpfs(filepath.Join(root, homeDir), fmt.Sprintf("mode=0700,size=%d,nr_inodes=%d,uid=%d,gid=%d", cfg.TmpSize, cfg.Inodes, uid, gid))
	if err := p.dev(filepath.Join(root, "dev"), cfg); err != nil {
		return nil, err
	}
	p.mountAt("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	p.maskProc(filepath.Join(root, "proc"))
	p.workspace(cfg, filepath.Join(root, workspaceDir))
	p.protect(cfg.Protections, filepath.Join(root, workspaceDir))
	p.caBundle(cfg, root)
	if cfg.Resolver {
		p.resolvConf(cfg, root)
	}
	p.identityFiles(cfg, root)
	p.hide(cfg)
	p.mask(cfg)
	for _, dir := range []string{"run", "home", "var"} {
		p.mount("remount /"+dir+" read-only", "", filepath.Join(root, dir), "", unix.MS_REMOUNT|roFlags, "")
	}
	p.add("pivot", "pivot into the sandbox root", root)
	p.mount("remount / read-only", "", "/", "", unix.MS_REMOUNT|roFlags, "")
	return p.ops, nil
}

// rootEntry reproduces one top-level entry of the root file system: a symlink is copied,
// a directory bound read-only; a missing entry is skipped.
func (p *plan) rootEntry(src, dst string) error {
	fi, err := os.Lstat(src)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect %s: %w", src, err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("read link %s: %w", src, err)
		}
		p.symlink(target, dst)
		return nil
	case fi.IsDir():
		return p.bindReadOnly(src, dst)
	default:
		return nil
	}
}

// bindReadOnly binds src (not its sub-mounts) read-only, nosuid, nodev at dst.
func (p *plan) bindReadOnly(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("read-only path %s: %w", src, err)
	}
	if fi.IsDir() {
		p.mkdir(dst)
	} else {
		p.add("touch", "create mount point "+dst, dst)
	}
	p.mount("bind "+src, src, dst, "", unix.MS_BIND, "")
	p.mount("remount "+dst+" read-only", "", dst, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, "")
	return nil
}

// dev plans a minimal /dev: nodes of a few host devices (the same device numbers, mode
// 0666), a private devpts holding at most cfg.Ptys terminals (the kernel's kernel.pty.max
// is machine-wide: without a max one sandbox could take them all), shm and links.
func (p *plan) dev(dev string, cfg *rootConfig) error {
	p.tmpfs(dev, "mode=0755,size=64k,nr_inodes=256")
	for _, name := range hostDevices {
		var st unix.Stat_t
		if err := unix.Stat("/dev/"+name, &st); err != nil {
			return fmt.Errorf("host device /dev/%s: %w", name, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR {
			return fmt.Errorf("host device /dev/%s: not a character device", name)
		}
		if cfg.Rootless { // no mknod in a user namespace: the host's node, bound
			p.add("touch", "create mount point /dev/"+name, filepath.Join(dev, name))
			p.mount("bind /dev/"+name, "/dev/"+name, filepath.Join(dev, name), "", unix.MS_BIND, "")
			continue
		}
		p.add("mknod", "create /dev/"+name, filepath.Join(dev, name),
			strconv.FormatUint(uint64(unix.S_IFCHR|0o666), 10), strconv.FormatUint(st.Rdev, 10))
	}
	p.mountAt("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, sandbox.DevptsOptions(cfg.Ptys))
	p.tmpfs(filepath.Join(dev, "shm"), fmt.Sprintf("mode=1777,size=64m,nr_inodes=%d", min(cfg.Inodes, 16384)))
	links := [][2]string{{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}}
	for _, l := range links {
		p.symlink(l[0], filepath.Join(dev, l[1]))
	}
	p.mount("remount /dev read-only", "", dev, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_RDONLY, "mode=0755,size=64k,nr_inodes=256")
	return nil
}

// maskProc covers the host details of a freshly mounted /proc at proc.
func (p *plan) maskProc(proc string) {
	for _, name := range sandbox.MaskedProcFiles {
		if fi, err := os.Lstat("/proc/" + name); err != nil || fi.IsDir() {
			continue
		}
		dst := filepath.Join(proc, name)
		p.mount("mask /proc/"+name, "/dev/null", dst, "", unix.MS_BIND, "")
		p.mount("remount /proc/"+name+" read-only", "", dst, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, "")
	}
	for _, name := range sandbox.MaskedProcDirs {
		if fi, err := os.Lstat("/proc/" + name); err != nil || !fi.IsDir() {
			continue
		}
		p.mount("mask /proc/"+name, "tmpfs", filepath.Join(proc, name), "tmpfs", roFlags|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=0555")
	}
}

// workspace mounts the host workspace at dst. The mount is idmapped so that the workspace
// owner's files appear as owned by the sandbox user and what the sandbox writes is owned by
// the workspace owner on the host. In cow mode the idmapped tree is the lower layer of an
// overlay whose upper layer lives in the sandbox's state directory.
func (p *plan) workspace(cfg *rootConfig, dst string) {
	if cfg.Workspace == "" {
		return
	}
	attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if cfg.WorkspaceMode != sandbox.WorkspaceRW {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	if cfg.IdmapFD >= 0 {
		attr |= unix.MOUNT_ATTR_IDMAP
	}
	target := dst
	if cfg.WorkspaceMode == sandbox.WorkspaceCoW {
		target = cfg.LowerDir
	}
	p.add("tree", "mount workspace "+cfg.Workspace, cfg.Workspace, target,
		strconv.FormatUint(attr, 10), strconv.Itoa(cfg.IdmapFD))
	if cfg.WorkspaceMode == sandbox.WorkspaceCoW {
		// Whatever the host's overlay defaults: no metacopy (a chmod would leave a data-less
		// upper file, read as empty by changesOf) and no redirect_dir (a renamed directory
		// would look new and partly empty); a rename of a host directory is copied instead.
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,metacopy=off", cfg.LowerDir, cfg.UpperDir, cfg.WorkDir)
		p.mountAt("overlay", dst, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
	}
}

// protect makes each protected path of the workspace (mounted at ws) a mount point of its
// own, bound onto itself, so that it cannot be renamed or replaced, and read-only if so
// marked. Binds stay on the workspace's mount (idmapped, nosuid, nodev); parents come
// first, so that no bind hides one made below it.
func (p *plan) protect(prots []sandbox.Protection, ws string) {
	for _, pr := range prots {
		if !pr.Bound() {
			continue // nothing to bind: for the sweep when the sandbox ends
		}
		dst := filepath.Join(ws, filepath.FromSlash(pr.Path))
		p.mount("protect workspace path "+pr.Path, dst, dst, "", unix.MS_BIND, "")
		if pr.ReadOnly {
			p.mount("make workspace path "+pr.Path+" read-only", "", dst, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, "")
		}
	}
}

// caBundle writes the CA bundle and shows it in place of the system bundle too, for
// programs that ignore the CA variables.
func (p *plan) caBundle(cfg *rootConfig, root string) {
	if len(cfg.CABundle) == 0 {
		return
	}
	dst := filepath.Join(root, caBundlePath)
	p.add("write", "write CA bundle", dst, string(cfg.CABundle))
	const sysBundle = "etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(filepath.Join(cfg.Rootfs, sysBundle)); err == nil {
		sys := filepath.Join(root, sysBundle)
		p.mount("bind CA bundle", dst, sys, "", unix.MS_BIND, "")
		p.mount("remount CA bundle", "", sys, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, "")
	}
}

// resolvConfPath holds the resolver configuration of a sandbox with transparent egress.
const resolvConfPath = "/run/airlock/resolv.conf"

// ResolvConf is that configuration: airlock's DNS responder inside the sandbox.
const ResolvConf = "# airlock answers every name inside this sandbox; no query leaves it\nnameserver 127.0.0.1\noptions edns0\n"

// resolvConf shows ResolvConf as /etc/resolv.conf, whatever the root file system has there:
// a file is covered by a bind mount; a link into /run (systemd-resolved's stub, for one) gets
// its target written in the sandbox's own /run; anything else is covered if it can be. When
// there is none at all, C libraries already ask 127.0.0.1.
func (p *plan) resolvConf(cfg *rootConfig, root string) {
	dst := filepath.Join(root, resolvConfPath)
	p.add("write", "write resolver configuration", dst, ResolvConf)
	etc := filepath.Join(cfg.Rootfs, "etc/resolv.conf")
	fi, err := os.Lstat(etc)
	if err != nil {
		return
	}
	target := filepath.Join(root, "etc/resolv.conf")
	if fi.Mode()&os.ModeSymlink != 0 {
		link, err := os.Readlink(etc)
		if err != nil {
			return
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join("/etc", link)
		}
		link = filepath.Clean(link)
		if strings.HasPrefix(link, "/run/") || strings.HasPrefix(link, "/var/run/") {
			p.add("write", "write resolver configuration at "+link, filepath.Join(root, strings.TrimPrefix(link, "/var")), ResolvConf)
			return
		}
		t, err := os.Stat(etc)
		if err != nil || !t.Mode().IsRegular() {
			return
		}
		target = filepath.Join(root, link)
	} else if !fi.Mode().IsRegular() {
		return
	}
	p.mount("bind resolver configuration", dst, target, "", unix.MS_BIND, "")
	p.mount("remount resolver configuration", "", target, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, "")
}

// openNoSymlinks opens the directory at path (O_PATH) resolving no symbolic link in any
// component: ELOOP if there is one.
func openNoSymlinks(path string) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}
