package seccomp

import "slices"

// The sandbox policy. Every call a sandboxed program may make is named below, in groups; a
// call named nowhere fails with ENOSYS. The list is wide enough for shells, coreutils,
// busybox, curl, wget, git, python3 and pip, node and npm, and Go programs (the e2e suites
// run them all), and no wider: what a sandbox has no use for, or what reaches past its
// namespaces (other processes' memory, mounts, the kernel's keyrings, BPF, perf, io_uring,
// which bypasses seccomp for the calls it makes), is refused.
//
// Names are those of the kernel's tables; a name the build's architecture lacks (open,
// chmod or fork on arm64) is skipped there.

// Values of the generic Linux ABI (x86_64 and arm64).
const (
	afUnix  = 1
	afInet  = 2
	afInet6 = 10

	sISUID = 0o4000
	sISGID = 0o2000

	oCreat   = 0o100
	oTmpfile = 0o20000000 // __O_TMPFILE, the bit O_TMPFILE adds to O_DIRECTORY

	// cloneNewNS is every CLONE_NEW* flag: no namespace of any kind may be made.
	cloneNewNS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 |
		0x20000000 | 0x40000000 | 0x00000080
)

// allowed run without conditions.
var allowed = [][]string{
	// Files: reading, writing, metadata, directories, links. Creating calls that take a
	// mode are below, with conditions.
	{"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
		"pwritev2", "close", "close_range", "lseek", "dup", "dup2", "dup3", "fcntl", "flock",
		"fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "truncate", "ftruncate",
		"fallocate", "fadvise64", "readahead", "sendfile", "copy_file_range", "splice", "tee",
		"vmsplice", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
		"access", "faccessat", "faccessat2", "getdents", "getdents64", "getcwd", "chdir",
		"fchdir", "rename", "renameat", "renameat2", "rmdir", "link", "linkat", "unlink",
		"unlinkat", "symlink", "symlinkat", "readlink", "readlinkat", "chown", "fchown",
		"lchown", "fchownat", "umask", "utime", "utimes", "futimesat", "utimensat", "ioctl",
		"pipe", "pipe2", "memfd_create", "cachestat"},
	// Extended attributes may be read and removed; setting them is refused below.
	{"getxattr", "lgetxattr", "fgetxattr", "getxattrat", "listxattr", "llistxattr",
		"flistxattr", "listxattrat", "removexattr", "lremovexattr", "fremovexattr", "removexattrat"},
	// Waiting for events.
	{"poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
		"epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd",
		"signalfd4", "timerfd_create", "timerfd_settime", "timerfd_gettime", "inotify_init",
		"inotify_init1", "inotify_add_watch", "inotify_rm_watch"},
	// Memory of the process itself.
	{"brk", "mmap", "munmap", "mremap", "mprotect", "msync", "mincore", "madvise", "mlock",
		"mlock2", "munlock", "mlockall", "munlockall", "remap_file_pages", "membarrier",
		"pkey_alloc", "pkey_free", "pkey_mprotect", "mseal", "map_shadow_stack",
		"get_mempolicy", "set_mempolicy", "mbind", "set_mempolicy_home_node"},
	// Threads, synchronisation, processes of the sandbox. clone's and unshare's flags are
	// checked below; execve and wait run as usual.
	{"fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid",
		"futex", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "set_robust_list",
		"get_robust_list", "set_tid_address", "rseq", "arch_prctl", "prctl", "sched_yield",
		"getpid", "gettid", "getppid", "getpgrp", "getpgid", "setpgid", "getsid", "setsid",
		"pidfd_open", "pidfd_send_signal"},
	// Signals.
	{"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait",
		"rt_sigqueueinfo", "rt_tgsigqueueinfo", "rt_sigsuspend", "sigaltstack", "pause",
		"alarm", "kill", "tkill", "tgkill", "restart_syscall"},
	// Identity and privileges: reading them, and the changes an unprivileged process may
	// make to itself (it has no capabilities, and no_new_privs).
	{"getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid",
		"setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid",
		"setgroups", "capget", "capset", "seccomp", "landlock_create_ruleset",
		"landlock_add_rule", "landlock_restrict_self"},
	// Time, scheduling, limits, system information.
	{"nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres", "gettimeofday", "time",
		"times", "getitimer", "setitimer", "timer_create", "timer_settime", "timer_gettime",
		"timer_getoverrun", "timer_delete", "sched_getaffinity", "sched_setaffinity",
		"sched_getparam", "sched_setparam", "sched_getscheduler", "sched_setscheduler",
		"sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval",
		"sched_getattr", "sched_setattr", "getpriority", "setpriority", "ioprio_get",
		"ioprio_set", "getcpu", "getrlimit", "setrlimit", "prlimit64", "getrusage", "sysinfo",
		"uname", "getrandom"},
	// System V and POSIX IPC: the sandbox has an IPC namespace of its own.
	{"shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget",
		"msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
		"mq_notify", "mq_getsetattr"},
	// Sockets. socket() and socketpair() are limited to a few families below; the network
	// namespace does the rest.
	{"connect", "accept", "accept4", "bind", "listen", "shutdown", "getsockname", "getpeername",
		"sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "setsockopt",
		"getsockopt"},
}

// refused fail with EPERM whatever their arguments.
var refused = [][]string{
	// Other processes: their memory, their descriptors, tracing them.
	{"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp"},
	// Namespaces and mounts.
	{"setns", "unshare", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
		"open_tree_attr", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"},
	// The kernel itself: modules, BPF, perf, keyrings, io_uring (whose operations no
	// filter sees), userfaultfd, file handles, fanotify, accounting.
	{"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf",
		"perf_event_open", "keyctl", "add_key", "request_key", "io_uring_setup",
		"io_uring_enter", "io_uring_register", "userfaultfd", "name_to_handle_at",
		"open_by_handle_at", "fanotify_init", "fanotify_mark", "lookup_dcookie", "uselib",
		"acct", "quotactl", "quotactl_fd", "syslog", "modify_ldt", "nfsservctl"},
	// The machine: time, power, swap, ports, names.
	{"reboot", "swapon", "swapoff", "iopl", "ioperm", "settimeofday", "clock_settime",
		"clock_adjtime", "adjtimex", "vhangup", "sethostname", "setdomainname"},
}

// aio is Linux AIO, permitted by Options.AllowAIO.
var aio = []string{"io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents"}

// Sandbox is the policy of every sandbox.
func Sandbox(o Options) *Profile {
	p := &Profile{Default: ENOSYS}
	for _, names := range allowed {
		p.Rules = append(p.Rules, Rule{Names: names, Action: ActAllow})
	}
	for _, names := range refused {
		p.Rules = append(p.Rules, Rule{Names: names, Action: ActErrno, Errno: EPERM})
	}
	if o.AllowAIO {
		p.Rules = append(p.Rules, Rule{Names: aio, Action: ActAllow})
	} else {
		p.Rules = append(p.Rules, Rule{Names: aio, Action: ActErrno, Errno: ENOSYS})
	}
	p.Rules = append(p.Rules,
		// clone3 and openat2 take their flags and mode in memory, which a filter cannot
		// read: ENOSYS sends libc and Go back to clone and openat, checked below.
		Rule{Names: []string{"clone3", "openat2"}, Action: ActErrno, Errno: ENOSYS},
		// Setting an extended attribute is refused as a file system without them refuses
		// it (cp -a, tar, rsync and Python's copy2 carry on): a filter cannot read the
		// attribute's name, and security.capability would give a file capabilities.
		Rule{Names: []string{"setxattr", "lsetxattr", "fsetxattr", "setxattrat"}, Action: ActErrno, Errno: EOPNOTSUPP},
	)
	// No new namespaces: clone with any CLONE_NEW* flag (unshare and setns are refused).
	p.Rules = append(p.Rules, Rule{Names: []string{"clone"}, Action: ActAllow,
		Conds: []Cond{{Arg: 0, Op: OpMaskedEqual, Mask: cloneNewNS}}})
	p.Rules = append(p.Rules, bitRefusals("clone", 0, cloneNewNS, nil)...)
	// No set-user-ID or set-group-ID bit in any mode: a file the sandbox writes to the
	// workspace belongs on the host to the workspace's owner, often root.
	for _, m := range []struct {
		name string
		mode uint
	}{{"chmod", 1}, {"fchmod", 1}, {"fchmodat", 2}, {"fchmodat2", 2}, {"creat", 1},
		{"mkdir", 1}, {"mkdirat", 2}, {"mknod", 1}, {"mknodat", 2}} {
		p.Rules = append(p.Rules, Rule{Names: []string{m.name}, Action: ActAllow,
			Conds: []Cond{{Arg: m.mode, Op: OpMaskedEqual, Mask: sISUID | sISGID}}})
		p.Rules = append(p.Rules, bitRefusals(m.name, m.mode, sISUID|sISGID, nil)...)
	}
	// open and openat use their mode only when they create a file (O_CREAT, or O_TMPFILE
	// linked in later); otherwise the register may hold anything.
	for _, o := range []struct {
		name        string
		flags, mode uint
	}{{"open", 1, 2}, {"openat", 2, 3}} {
		p.Rules = append(p.Rules,
			Rule{Names: []string{o.name}, Action: ActAllow,
				Conds: []Cond{{Arg: o.flags, Op: OpMaskedEqual, Mask: oCreat | oTmpfile}}},
			Rule{Names: []string{o.name}, Action: ActAllow,
				Conds: []Cond{{Arg: o.mode, Op: OpMaskedEqual, Mask: sISUID | sISGID}}})
		for _, create := range []uint64{oCreat, oTmpfile} {
			p.Rules = append(p.Rules, bitRefusals(o.name, o.mode, sISUID|sISGID,
				&Cond{Arg: o.flags, Op: OpMaskedEqual, Mask: create, Value: create})...)
		}
	}
	// Sockets of the families a sandbox uses only: unix, IPv4, IPv6. The others either
	// reach past the network namespace (AF_VSOCK) or have no use in a sandbox (netlink,
	// packet, ...). Written as equalities and one upper range, which libseccomp can
	// express without an inequality on one argument twice.
	for _, call := range []string{"socket", "socketpair"} {
		fams := []uint64{afUnix, afInet, afInet6}
		if call == "socketpair" {
			fams = []uint64{afUnix} // the only family with pairs
		}
		for f := uint64(0); f <= afInet6; f++ {
			a, e := ActErrno, EAFNOSUPPORT
			if slices.Contains(fams, f) {
				a, e = ActAllow, 0
			}
			p.Rules = append(p.Rules, Rule{Names: []string{call}, Action: a, Errno: e,
				Conds: []Cond{{Arg: 0, Op: OpEqual, Value: f}}})
		}
		p.Rules = append(p.Rules, Rule{Names: []string{call}, Action: ActErrno, Errno: EAFNOSUPPORT,
			Conds: []Cond{{Arg: 0, Op: OpGreater, Value: afInet6}}})
	}
	// personality: only the values Docker's default profile allows (Linux, the 32-bit
	// uname and their query); others get the default.
	for _, v := range []uint64{0, 0x8, 0x20000, 0x20008, 0xffffffff} {
		p.Rules = append(p.Rules, Rule{Names: []string{"personality"}, Action: ActAllow,
			Conds: []Cond{{Arg: 0, Op: OpEqual, Value: v}}})
	}
	return p
}

// bitRefusals refuses call with EPERM when argument arg has any of bits set (one rule per
// bit: a masked equality per bit is what libseccomp can express), and also, when with is
// not nil, that condition holds.
func bitRefusals(call string, arg uint, bits uint64, with *Cond) []Rule {
	var out []Rule
	for b := uint64(1); b != 0; b <<= 1 {
		if bits&b == 0 {
			continue
		}
		conds := []Cond{{Arg: arg, Op: OpMaskedEqual, Mask: b, Value: b}}
		if with != nil {
			conds = append([]Cond{*with}, conds...)
		}
		out = append(out, Rule{Names: []string{call}, Action: ActErrno, Errno: EPERM, Conds: conds})
	}
	return out
}
