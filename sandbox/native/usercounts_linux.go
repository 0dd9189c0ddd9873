package native

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/airlock-proxy/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// userNSMaxima are the /proc/sys/user maxima each command's user namespace gets (stage_linux.c
// has the same table): no namespaces of any kind (the sandbox user has no capability to
// make one, and none is needed), the inotify maxima of sandbox.InotifyInstances and InotifyWatches, no fanotify (refused by seccomp
// too). A file the kernel lacks is skipped.
var userNSMaxima = []struct {
	name  string
	value int
}{
	{"max_user_namespaces", 0}, {"max_pid_namespaces", 0}, {"max_uts_namespaces", 0},
	{"max_ipc_namespaces", 0}, {"max_net_namespaces", 0}, {"max_mnt_namespaces", 0},
	{"max_cgroup_namespaces", 0}, {"max_time_namespaces", 0},
	{"max_inotify_instances", sandbox.InotifyInstances}, {"max_inotify_watches", sandbox.InotifyWatches},
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
	}{{"pending-signal", unix.RLIMIT_SIGPENDING, sandbox.SigpendingLimit}, {"message-queue", unix.RLIMIT_MSGQUEUE, sandbox.MsgqueueLimit}} {
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
