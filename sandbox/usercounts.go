package sandbox

// The kernel counts some objects per user, in every user namespace from the process's own
// up to the host's (kernel/ucount.c): inotify instances and watches, namespaces, queued
// signals, POSIX message queue bytes, locked shared memory. A count is refused when any
// level is at its maximum. A sandbox's processes are counted in their user namespace and
// then, at the host's level, as that namespace's owner: every native sandbox's namespaces
// are owned by the sandbox's own host uid (the first of its uid range), never by the
// host's root, so a sandbox at these bounds takes nothing of the host's or another
// sandbox's counts. Each namespace's maxima are set small (sandbox/native's userNSMaxima); the limits
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
