package native

import (
	"errors"
	"fmt"
	"os"

	"github.com/airlock-proxy/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// openPty opens a new terminal of the devpts instance a sandbox's holder has at
// /dev/pts (its private one, bounded by Options.Ptys), through the holder's root: the
// master for airlock, the slave for the command, owned by the sandbox user (host uid uid,
// gid gid) as a terminal it had opened itself would be. It refuses a devpts that is the
// host's: the command's terminal is never one airlock's own processes share.
func openPty(holderPid, uid, gid int, size sandbox.WindowSize) (master, slave *os.File, err error) {
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", holderPid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open the sandbox's root: %w", err)
	}
	defer unix.Close(root)
	// Beneath the sandbox's root, through no link: /dev and its devpts are the holder's
	// own mounts, which nothing in the sandbox can change.
	m, err := unix.Openat2(root, "dev/pts/ptmx", &unix.OpenHow{
		Flags:   unix.O_RDWR | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return nil, nil, fmt.Errorf("open a terminal of the sandbox's devpts: all its terminals are in use (--ptys): %w", err)
		}
		return nil, nil, fmt.Errorf("open a terminal of the sandbox's devpts: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(m)
		}
	}()
	if err := checkPrivateDevpts(m); err != nil {
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		return nil, nil, fmt.Errorf("unlock the terminal: %w", err)
	}
	if err := unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, winsize(size)); err != nil {
		return nil, nil, fmt.Errorf("set the terminal's size: %w", err)
	}
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		return nil, nil, fmt.Errorf("open the terminal's slave: %w", errno)
	}
	if err := unix.Fchown(int(s), uid, gid); err != nil {
		unix.Close(int(s))
		return nil, nil, fmt.Errorf("give the terminal to the sandbox user: %w", err)
	}
	// Non-blocking, so that the runtime's poller serves it and Close ends a pending Read.
	if err := unix.SetNonblock(m, true); err != nil {
		unix.Close(int(s))
		return nil, nil, fmt.Errorf("terminal: %w", err)
	}
	ok = true
	return os.NewFile(uintptr(m), "ptmx"), os.NewFile(s, "pts"), nil
}

// checkPrivateDevpts refuses a terminal master fd that is not of a devpts instance other
// than the host's /dev/pts.
func checkPrivateDevpts(fd int) error {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("terminal: %w", err)
	}
	if fs.Type != unix.DEVPTS_SUPER_MAGIC {
		return errors.New("the sandbox's /dev/pts/ptmx is not of a devpts file system")
	}
	var st, host unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("terminal: %w", err)
	}
	if unix.Stat("/dev/pts", &host) == nil && host.Dev == st.Dev {
		return errors.New("the sandbox's /dev/pts is the host's devpts: refusing to give it a terminal there")
	}
	return nil
}

func winsize(s sandbox.WindowSize) *unix.Winsize { return &unix.Winsize{Row: s.Rows, Col: s.Cols} }

// setPtySize sets the size of the terminal whose master is f; the kernel signals
// SIGWINCH to its foreground process group when it changes.
func setPtySize(f *os.File, s sandbox.WindowSize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) { ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, winsize(s)) }); err != nil {
		return err
	}
	return ierr
}
