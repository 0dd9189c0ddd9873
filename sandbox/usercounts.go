package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// The kernel counts some objects per user, in every user namespace from the process's own
// up to the host's (kernel/ucount.c): inotify instances and watches, namespaces, queued
// signals, POSIX message queue bytes, locked shared memory. A count is refused when any
// level is at its maximum. A sandbox's processes are counted in their user namespace and
// then, at the host's level, as that namespace's owner: every native sandbox's namespaces
// are owned by the sandbox's own host uid (the first of its uid range), never by the
// host's root, so a sandbox at these bounds takes nothing of the host's or another
// sandbox's counts. Each namespace's maxima are set small (userNSMaxima); the limits
// counted per process (RLIMIT_SIGPENDING, RLIMIT_MSGQUEUE) are lowered for every sandboxed
// process, and the kernel records them as the namespace's maxima at the host's level too.

// Per-user bounds of a sandbox.
const (
	// InotifyInstances and InotifyWatches are each command's inotify maxima (its user
	// namespace's max_inotify_instances and max_inotify_watches); a sandbox's commands
	// together stay within the host's per-user fs.inotify maxima for its own uid.
	InotifyInstances = 128
	InotifyWatches   = 65536
	// SigpendingLimit is RLIMIT_SIGPENDING (soft and hard) of every sandboxed process:
	// the signals queued to a sandbox's processes at once.
	SigpendingLimit = 1024
	// MsgqueueLimit is RLIMIT_MSGQUEUE (soft and hard), in bytes of POSIX message queues.
	MsgqueueLimit = 256 << 10
)

// userNSMaxima are the /proc/sys/user maxima each command's user namespace gets (stage_linux.c
// has the same table): no namespaces of any kind (the sandbox user has no capability to
// make one, and none is needed), the inotify maxima above, no fanotify (refused by seccomp
// too). A file the kernel lacks is skipped.
var userNSMaxima = []struct {
	name  string
	value int
}{
	{"max_user_namespaces", 0}, {"max_pid_namespaces", 0}, {"max_uts_namespaces", 0},
	{"max_ipc_namespaces", 0}, {"max_net_namespaces", 0}, {"max_mnt_namespaces", 0},
	{"max_cgroup_namespaces", 0}, {"max_time_namespaces", 0},
	{"max_inotify_instances", InotifyInstances}, {"max_inotify_watches", InotifyWatches},
	{"max_fanotify_groups", 0}, {"max_fanotify_marks", 0},
}

// lowerUserLimits lowers pid's RLIMIT_SIGPENDING and RLIMIT_MSGQUEUE (soft and hard) to
// the sandbox's, for every process it starts; without CAP_SYS_RESOURCE in the host's user
// namespace none of them can raise them again.
func lowerUserLimits(pid int) error {
	for _, l := range []struct {
		name     string
		resource int
		value    uint64
	}{{"pending-signal", unix.RLIMIT_SIGPENDING, SigpendingLimit}, {"message-queue", unix.RLIMIT_MSGQUEUE, MsgqueueLimit}} {
		var old unix.Rlimit
		if err := unix.Prlimit(pid, l.resource, nil, &old); err != nil {
			return fmt.Errorf("read the %s limit: %w", l.name, err)
		}
		lim := unix.Rlimit{Cur: min(l.value, old.Max), Max: min(l.value, old.Max)}
		if err := unix.Prlimit(pid, l.resource, &lim, nil); err != nil {
			return fmt.Errorf("set the %s limit to %d: %w", l.name, l.value, err)
		}
	}
	return nil
}

// setUserNSMaxima writes userNSMaxima in the calling process's user namespace, whose root
// it must be.
func setUserNSMaxima() error {
	for _, m := range userNSMaxima {
		err := os.WriteFile("/proc/sys/user/"+m.name, []byte(strconv.Itoa(m.value)+"\n"), 0)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("set the user namespace's %s: %w", m.name, err)
		}
	}
	return nil
}
