package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Paths inside a sandbox.
const (
	workspaceDir = "/workspace"
	homeDir      = "/home/sandbox"
	caBundlePath = "/run/airlock/ca-bundle.pem"
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

// buildRoot assembles the sandbox's file system under cfg.NewRoot and pivots into it. It runs
// in the holder, in its own mount namespace, as root of the initial user namespace.
func buildRoot(cfg *holderConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	root := cfg.NewRoot
	if err := unix.Mount("airlock", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=4m"); err != nil {
		return fmt.Errorf("mount root tmpfs: %w", err)
	}
	for _, name := range cfg.RootPaths {
		if err := bindRootEntry(filepath.Join(cfg.Rootfs, name), filepath.Join(root, name)); err != nil {
			return err
		}
	}
	for _, p := range cfg.ReadOnlyPaths {
		if err := bindReadOnly(p, filepath.Join(root, p)); err != nil {
			return err
		}
	}
	uid, gid := cfg.UIDBase+sandboxUID, cfg.UIDBase+sandboxGID
	tmps := []struct {
		dir, opts string
	}{
		{"tmp", fmt.Sprintf("mode=1777,size=%d", cfg.TmpSize)},
		{"run", "mode=0755,size=1m"},
		{"home", "mode=0755,size=1m"},
		{"var", "mode=0755,size=1m"},
	}
	for _, t := range tmps {
		if err := mountTmpfs(filepath.Join(root, t.dir), t.opts); err != nil {
			return err
		}
	}
	if err := os.Symlink("../tmp", filepath.Join(root, "var/tmp")); err != nil {
		return fmt.Errorf("link /var/tmp: %w", err)
	}
	if err := os.Symlink("../run", filepath.Join(root, "var/run")); err != nil {
		return fmt.Errorf("link /var/run: %w", err)
	}
	home := filepath.Join(root, homeDir)
	if err := mountTmpfs(home, fmt.Sprintf("mode=0700,size=%d,uid=%d,gid=%d", cfg.TmpSize, uid, gid)); err != nil {
		return err
	}
	if err := buildDev(filepath.Join(root, "dev")); err != nil {
		return err
	}
	if err := mountAt("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := mountWorkspace(cfg, filepath.Join(root, workspaceDir)); err != nil {
		return err
	}
	if err := writeCABundle(root, cfg.CABundle); err != nil {
		return err
	}
	for _, dir := range []string{"run", "home", "var"} {
		if err := unix.Mount("", filepath.Join(root, dir), "", unix.MS_REMOUNT|roFlags, ""); err != nil {
			return fmt.Errorf("remount /%s read-only: %w", dir, err)
		}
	}
	return pivot(root)
}

func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("enter new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|roFlags, ""); err != nil {
		return fmt.Errorf("remount / read-only: %w", err)
	}
	return nil
}

// bindRootEntry reproduces one top-level entry of the root file system: a symlink is copied,
// a directory bound read-only; a missing entry is skipped.
func bindRootEntry(src, dst string) error {
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
		if err := os.Symlink(target, dst); err != nil {
			return fmt.Errorf("link %s: %w", dst, err)
		}
		return nil
	case fi.IsDir():
		return bindReadOnly(src, dst)
	default:
		return nil
	}
}

// bindReadOnly binds src (not its sub-mounts) read-only, nosuid, nodev at dst.
func bindReadOnly(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("read-only path %s: %w", src, err)
	}
	if fi.IsDir() {
		err = os.MkdirAll(dst, 0o755)
	} else {
		err = touch(dst)
	}
	if err != nil {
		return fmt.Errorf("create mount point %s: %w", dst, err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", dst, err)
	}
	return nil
}

func touch(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func mountAt(src, dst, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("create mount point %s: %w", dst, err)
	}
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype, dst, err)
	}
	return nil
}

func mountTmpfs(dst, opts string) error {
	return mountAt("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts)
}

// buildDev creates a minimal /dev: a few host device nodes, a private devpts, shm and links.
func buildDev(dev string) error {
	if err := mountTmpfs(dev, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, name := range hostDevices {
		dst := filepath.Join(dev, name)
		if err := touch(dst); err != nil {
			return fmt.Errorf("create /dev/%s: %w", name, err)
		}
		if err := unix.Mount("/dev/"+name, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", name, err)
		}
		if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("remount /dev/%s: %w", name, err)
		}
	}
	if err := mountAt("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	if err := mountTmpfs(filepath.Join(dev, "shm"), "mode=1777,size=64m"); err != nil {
		return err
	}
	links := [][2]string{{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}}
	for _, l := range links {
		if err := os.Symlink(l[0], filepath.Join(dev, l[1])); err != nil {
			return fmt.Errorf("link /dev/%s: %w", l[1], err)
		}
	}
	return unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_RDONLY, "mode=0755,size=64k")
}

func writeCABundle(root string, pem []byte) error {
	if len(pem) == 0 {
		return nil
	}
	dst := filepath.Join(root, caBundlePath)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("create CA directory: %w", err)
	}
	if err := os.WriteFile(dst, pem, 0o644); err != nil {
		return fmt.Errorf("write CA bundle: %w", err)
	}
	// Programs that ignore the CA variables read the system bundle: show ours there too.
	sys := filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")
	if _, err := os.Stat(sys); err == nil {
		if err := unix.Mount(dst, sys, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind CA bundle: %w", err)
		}
		if err := unix.Mount("", sys, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, ""); err != nil {
			return fmt.Errorf("remount CA bundle: %w", err)
		}
	}
	return nil
}

func hasPrefixPath(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
