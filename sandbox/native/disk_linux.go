package native

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A sandbox's on-disk scratch space (the copy-on-write workspace's upper and work
// directories) is a file system of its own: a sparse image file of Options.Disk bytes in
// the sandbox's state directory, formatted ext4 and loop-mounted, so that what the sandbox
// writes there takes at most that much of the host's disk (and inodes), and writing past it
// fails inside the sandbox with ENOSPC. The image, the loop device and the mount go with the
// sandbox.

// scratchName is the scratch file system's mount point (and, with ".img", its image) in a
// sandbox's state directory.
const scratchName = "disk"

// mountScratch creates the image of size bytes and mounts its file system at dir.
func mountScratch(dir string, size int64) error {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
			if _, serr := os.Stat(p); serr == nil {
				mkfs, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return errors.New("a copy-on-write workspace is bounded by a file system of its own (--disk), which needs mkfs.ext4 (Debian: e2fsprogs)")
	}
	image := dir + ".img"
	f, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create disk image: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("size disk image: %w", err)
	}
	// No journal and lazy tables: a few MB written now; the image grows only with what the
	// sandbox writes (noinit_itable below keeps the kernel from zeroing the inode tables).
	out, err := exec.Command(mkfs, "-q", "-F", "-m", "0", "-O", "^has_journal",
		"-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1", image).CombinedOutput()
	if err != nil {
		return fmt.Errorf("format disk image: %v: %s", err, strings.TrimSpace(string(out)))
	}
	loop, err := attachLoop(f)
	if err != nil {
		return err
	}
	defer loop.Close()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("create disk mount point: %w", err)
	}
	if err := unix.Mount(loop.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "noinit_itable,discard"); err != nil {
		return fmt.Errorf("mount disk image on %s: %w", loop.Name(), err)
	}
	return nil
}

// attachLoop binds a free loop device to the image; the device detaches itself when its
// last user (the mount) goes.
func attachLoop(image *os.File) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	var lastErr error
	for range 20 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, err := os.OpenFile(fmt.Sprintf("/dev/loop%d", n), os.O_RDWR, 0)
		if err != nil {
			lastErr = err
			time.Sleep(10 * time.Millisecond) // the node may not exist yet
			continue
		}
		cfg := unix.LoopConfig{Fd: uint32(image.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		lastErr = err
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		// Another process took this device between GET_FREE and CONFIGURE: next one.
	}
	return nil, fmt.Errorf("attach a loop device: %w", lastErr)
}

// unmountScratch unmounts the scratch file system under a sandbox's state directory, if
// mounted; the loop device then detaches and the image can be removed with the directory.
func unmountScratch(stateDir string) error {
	dir := filepath.Join(stateDir, scratchName)
	err := unix.Unmount(dir, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(dir, unix.MNT_DETACH)
	}
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil // unmounted, or not a mount point (never mounted)
	}
	return fmt.Errorf("unmount the sandbox's disk: %w", err)
}
