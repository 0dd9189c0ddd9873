//go:build cgo

// The native sandbox's holder, in C, run from an ELF constructor before the Go runtime
// starts (as runc's nsexec is). A sandbox used to start two Go processes (the holder and,
// per command, an exec stage), each paying the Go runtime's start and every package's
// initialisation: tens of milliseconds in the airlock binary. This holder does the same
// work as holder_linux.go and shim_linux.go, which remain for binaries built without cgo;
// protocol_linux.go describes the messages.
//
// The holder is pid 1 of the sandbox's PID namespace and root of the initial user
// namespace. It carries out the parent's mount plan, then serves run requests on its
// control socket (descriptor 3) from one poll loop: each command starts in a child cloned
// into a fresh user and PID namespace (by a short-lived spawner that has taken the
// sandbox's host uid, so that the namespace is the sandbox's own: see sandbox/usercounts.go), which
// waits until the holder has mapped its ids and placed it in its cgroups, sets its
// namespace's maxima, then drops every privilege, applies Landlock and seccomp, forks the
// command and stays as that namespace's init (be_init). The holder exits when the
// parent closes the control socket (or dies: Pdeathsig), and the kernel then kills
// everything left in the sandbox.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/securebits.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define STAGE_HOLDER "airlock-sandbox:holder"
#define STAGE_USERNS "airlock-sandbox:userns"
#define STAGE_ROOTLESS "airlock-sandbox:holder-rootless"
#define CTRL_FD 3
#define STATUS_FD 3 // in a command's init: where the command's wait status goes
#define MAX_PACKET (1 << 20)
#define MAX_FDS 8
#define UID_RANGE 65536
#define SANDBOX_ID 1000

// Exit statuses of a command that could not be started, as the Go exec stage uses them.
#define EXIT_SETUP 125
#define EXIT_NOEXEC 126
#define EXIT_NOTFOUND 127

// write_file's flag for an existing directory: O_EXCL is never otherwise passed to it.
#define NO_PARENTS O_EXCL

// Landlock's ABI, defined here because the system headers may predate the running kernel.
struct al_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;
	uint64_t scoped;
};
struct al_path_beneath_attr {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));
#define AL_RULE_PATH_BENEATH 1

// A decoded message: fields copied out NUL-terminated (content may hold NULs; len says).
struct msg {
	size_t n;
	char **f;
	size_t *len;
};

static void msg_free(struct msg *m) {
	for (size_t i = 0; i < m->n; i++)
		free(m->f[i]);
	free(m->f);
	free(m->len);
	m->n = 0;
	m->f = NULL;
	m->len = NULL;
}

static int msg_decode(const unsigned char *b, size_t n, struct msg *m) {
	size_t cap = 0;
	memset(m, 0, sizeof *m);
	while (n > 0) {
		if (n < 4)
			goto bad;
		uint32_t l = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
		b += 4;
		n -= 4;
		if (l > n)
			goto bad;
		if (m->n == cap) {
			cap = cap ? 2 * cap : 64;
			char **f = realloc(m->f, cap * sizeof *f);
			size_t *len = realloc(m->len, cap * sizeof *len);
			if (f)
				m->f = f;
			if (len)
				m->len = len;
			if (!f || !len)
				goto bad;
		}
		char *s = malloc(l + 1);
		if (!s)
			goto bad;
		memcpy(s, b, l);
		s[l] = 0;
		m->f[m->n] = s;
		m->len[m->n] = l;
		m->n++;
		b += l;
		n -= l;
	}
	return m->n > 0 ? 0 : -1;
bad:
	msg_free(m);
	return -1;
}

// recv_msg reads one packet and its descriptors. It returns 1 for a message, 0 when the peer
// has gone, -1 on a malformed message (its descriptors closed).
static int recv_msg(int fd, unsigned char *buf, struct msg *m, int *fds, int *nfds) {
	char oob[CMSG_SPACE(MAX_FDS * sizeof(int))];
	struct iovec iov = {.iov_base = buf, .iov_len = MAX_PACKET};
	struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = oob, .msg_controllen = sizeof oob};
	ssize_t n;
	*nfds = 0;
	do
		n = recvmsg(fd, &h, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == ECONNRESET ? 0 : -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (int i = 0; i < k && *nfds < MAX_FDS; i++)
			memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	if (n == 0 && *nfds == 0)
		return 0;
	if ((h.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || msg_decode(buf, n, m) < 0) {
		for (int i = 0; i < *nfds; i++)
			close(fds[i]);
		*nfds = 0;
		return -1;
	}
	return 1;
}

// JSON replies: a few fixed keys, strings escaped.
struct out {
	char b[8192];
	size_t n;
};

static void out_add(struct out *o, const char *s) {
	size_t l = strlen(s);
	if (o->n + l >= sizeof o->b)
		l = sizeof o->b - 1 - o->n;
	memcpy(o->b + o->n, s, l);
	o->n += l;
	o->b[o->n] = 0;
}

static void out_str(struct out *o, const char *s) {
	char e[8];
	out_add(o, "\"");
	for (; *s; s++) {
		unsigned char c = *s;
		if (c == '"' || c == '\\') {
			e[0] = '\\';
			e[1] = c;
			e[2] = 0;
		} else if (c < 0x20 || c >= 0x7f) {
			snprintf(e, sizeof e, "\\u%04x", c < 0x20 ? c : 0xfffd);
		} else {
			e[0] = c;
			e[1] = 0;
		}
		out_add(o, e);
	}
	out_add(o, "\"");
}

static void send_out(int fd, struct out *o) {
	ssize_t r;
	do
		r = send(fd, o->b, o->n, MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
}

// send_error reports a failure: of the setup (exited == 0) or of starting a command.
static void send_error(int fd, int exited, const char *desc, int err) {
	struct out o = {.n = 0};
	out_add(&o, exited ? "{\"exited\":true,\"error\":" : "{\"error\":");
	out_str(&o, desc);
	if (err) {
		char num[32];
		snprintf(num, sizeof num, ",\"errno\":%d", err);
		out_add(&o, num);
	}
	out_add(&o, "}");
	send_out(fd, &o);
}

// Setup: the mount plan.

static int mkdir_parent(const char *path);

// mkdir_p creates path and its missing parents (mode 0755), as os.MkdirAll does.
static int mkdir_p(const char *path) {
	if (mkdir(path, 0755) == 0)
		return 0;
	if (errno == ENOENT && mkdir_parent(path) == 0 && mkdir(path, 0755) == 0)
		return 0;
	if (errno != EEXIST)
		return -1;
	struct stat st;
	if (stat(path, &st) < 0)
		return -1;
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		return -1;
	}
	return 0;
}

static int mkdir_parent(const char *path) {
	char p[4096];
	if (strlen(path) >= sizeof p) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(p, path);
	char *s = strrchr(p, '/');
	if (!s || s == p)
		return 0;
	*s = 0;
	return mkdir_p(p);
}

static int write_file(const char *path, const char *data, size_t n, int flags) {
	if (!(flags & O_EXCL) && mkdir_parent(path) < 0)
		return -1;
	flags &= ~O_EXCL;
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);
	if (fd < 0)
		return -1;
	while (n > 0) {
		ssize_t w = write(fd, data, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
		data += w;
		n -= w;
	}
	return close(fd);
}

static int parse_u64(const char *s, uint64_t *v) {
	char *end;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 10);
	if (errno || end == s || *end) {
		errno = EINVAL;
		return -1;
	}
	*v = x;
	return 0;
}

static int parse_int(const char *s, long *v) {
	char *end;
	errno = 0;
	long x = strtol(s, &end, 10);
	if (errno || end == s || *end) {
		errno = EINVAL;
		return -1;
	}
	*v = x;
	return 0;
}

struct al_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

struct al_open_how {
	uint64_t flags, mode, resolve;
};

// move_tree attaches a clone of src at dst. src is resolved with no symbolic link in any
// component (RESOLVE_NO_SYMLINKS: ELOOP otherwise): it is a path airlock checked (a
// workspace under sessions.workspace_roots, resolved then), and whoever may write a
// directory on it could otherwise swap a link in between that check and this mount and
// have another host directory mounted, idmapped to the sandbox user.
static int move_tree(const char *src, const char *dst, uint64_t attr_set, long userns) {
	struct al_open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = 0x04 | 0x02 /* RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS */};
	int dir = syscall(SYS_openat2, AT_FDCWD, src, &how, sizeof how);
	if (dir < 0)
		return -1;
	int tree = syscall(SYS_open_tree, dir, "", 1 /* OPEN_TREE_CLONE */ | O_CLOEXEC | AT_EMPTY_PATH);
	int e0 = errno;
	close(dir);
	errno = e0;
	if (tree < 0)
		return -1;
	struct al_mount_attr attr = {.attr_set = attr_set};
	if (userns >= 0)
		attr.userns_fd = userns;
	int r = syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr);
	if (r == 0)
		r = mkdir_p(dst);
	if (r == 0)
		r = syscall(SYS_move_mount, tree, "", AT_FDCWD, dst, 4 /* MOVE_MOUNT_F_EMPTY_PATH */);
	int e = errno;
	close(tree);
	errno = e;
	return r;
}

static int do_pivot(const char *root) {
	if (chdir(root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0)
		return -1;
	return chdir("/");
}

static int apply_op(const char *kind, char **a, size_t *alen) {
	if (!strcmp(kind, "mount")) {
		uint64_t flags;
		if (parse_u64(a[3], &flags) < 0)
			return -1;
		return mount(a[0], a[1], a[2], flags, a[4][0] ? a[4] : NULL);
	}
	if (!strcmp(kind, "mkdir"))
		return mkdir_p(a[0]);
	if (!strcmp(kind, "touch"))
		return write_file(a[0], "", 0, 0);
	if (!strcmp(kind, "symlink"))
		return symlink(a[0], a[1]);
	if (!strcmp(kind, "write"))
		return write_file(a[0], a[1], alen[1], O_TRUNC);
	if (!strcmp(kind, "tree")) {
		uint64_t attr;
		long fd;
		if (parse_u64(a[2], &attr) < 0 || parse_int(a[3], &fd) < 0)
			return -1;
		return move_tree(a[0], a[1], attr, fd);
	}
	if (!strcmp(kind, "mknod")) {
		uint64_t mode, dev;
		if (parse_u64(a[1], &mode) < 0 || parse_u64(a[2], &dev) < 0)
			return -1;
		if (mknod(a[0], mode, dev) < 0)
			return -1;
		return chmod(a[0], mode & 07777);
	}
	if (!strcmp(kind, "pivot"))
		return do_pivot(a[0]);
	errno = EINVAL;
	return -1;
}

static int op_args(const char *kind) {
	static const struct {
		const char *kind;
		int n;
	} t[] = {{"mount", 5}, {"mkdir", 1}, {"touch", 1}, {"symlink", 2}, {"write", 2}, {"tree", 4}, {"mknod", 3}, {"pivot", 1}};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (!strcmp(t[i].kind, kind))
			return t[i].n;
	return -1;
}

// The sandbox's settings, kept for its commands.
static struct {
	long uid_base; // -1: rootless (the holder's user namespace maps only the invoking user)
	struct sock_fprog seccomp;
	uint64_t ll_handled, ll_scoped;
	int cgroup_fds[8];
	int ncgroup;
} sb;

// setup applies the setup message; on failure it replies and returns -1.
static int setup(struct msg *m) {
	if (m->n < 7 || strcmp(m->f[0], "setup")) {
		send_error(CTRL_FD, 0, "malformed setup message", 0);
		return -1;
	}
	if (parse_int(m->f[2], &sb.uid_base) < 0 || m->len[3] == 0 || m->len[3] % 8 || m->len[3] / 8 > 0xffff ||
	    parse_u64(m->f[4], &sb.ll_handled) < 0 || parse_u64(m->f[5], &sb.ll_scoped) < 0) {
		send_error(CTRL_FD, 0, "malformed setup message", 0);
		return -1;
	}
	sb.seccomp.len = m->len[3] / 8;
	sb.seccomp.filter = (struct sock_filter *)m->f[3];
	m->f[3] = NULL; // kept for the life of the holder
	for (char *s = m->f[6]; *s;) {
		char *end;
		long fd = strtol(s, &end, 10);
		if (end == s || sb.ncgroup == 8) {
			send_error(CTRL_FD, 0, "malformed setup message", 0);
			return -1;
		}
		sb.cgroup_fds[sb.ncgroup++] = fd;
		s = *end == ',' ? end + 1 : end;
	}
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		send_error(CTRL_FD, 0, "set non-dumpable", errno);
		return -1;
	}
	if (sethostname(m->f[1], m->len[1]) < 0) {
		send_error(CTRL_FD, 0, "set hostname", errno);
		return -1;
	}
	for (size_t i = 7; i < m->n;) {
		int k = op_args(m->f[i]);
		if (k < 0 || i + 2 + k > m->n) {
			send_error(CTRL_FD, 0, "setup: bad mount op", 0);
			return -1;
		}
		if (apply_op(m->f[i], &m->f[i + 2], &m->len[i + 2]) < 0) {
			send_error(CTRL_FD, 0, m->f[i + 1], errno);
			return -1;
		}
		i += 2 + k;
	}
	struct out o = {.n = 0};
	out_add(&o, "{}");
	send_out(CTRL_FD, &o);
	return 0;
}

// The command's side: runs in the cloned child, never returns.

// be_init is pid 1 of the run's PID namespace once the command is forked (pid 2), with the
// same credentials and filters: it reaps whatever is reparented to it, so orphans do not
// pile up as zombies against the pids limit, and it ends when the command does (the
// kernel then kills what is left in the namespace). pid 1 cannot die of a signal it sends
// itself, so a command killed by a signal is reported through the status pipe: the raw
// wait status, which the holder prefers to this process's own.
static void be_init(pid_t command) {
	close(0);
	close(1);
	close(2);
	int status;
	for (;;) {
		pid_t p = wait4(-1, &status, 0, NULL);
		if (p == command)
			break;
		if (p < 0 && errno != EINTR)
			_exit(EXIT_SETUP);
	}
	(void)!write(STATUS_FD, &status, sizeof status);
	_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

static void die(const char *what, int err) {
	char b[1024];
	int n = err ? snprintf(b, sizeof b, "airlock sandbox: %s: %s\n", what, strerror(err))
		    : snprintf(b, sizeof b, "airlock sandbox: %s\n", what);
	if (n > 0)
		(void)!write(2, b, n < (int)sizeof b ? n : (int)sizeof b - 1);
	_exit(EXIT_SETUP);
}

static int last_cap(void) {
	int n = 63;
	int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char b[16] = {0};
		if (read(fd, b, sizeof b - 1) > 0)
			n = atoi(b);
		close(fd);
	}
	return n;
}

static void drop_privileges(void) {
	// Rootless, every user namespace above has setgroups denied (the kernel's condition for
	// an unprivileged id map): the supplementary groups cannot be changed, only inherited.
	if (syscall(SYS_setgroups, 0, NULL) < 0 && !(sb.uid_base < 0 && errno == EPERM))
		die("clear groups", errno);
	for (int c = 0, last = last_cap(); c <= last; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			die("drop bounding capability", errno);
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		die("clear ambient capabilities", errno);
	if (syscall(SYS_setresgid, SANDBOX_ID, SANDBOX_ID, SANDBOX_ID) < 0)
		die("setresgid", errno);
	if (syscall(SYS_setresuid, SANDBOX_ID, SANDBOX_ID, SANDBOX_ID) < 0)
		die("setresuid", errno);
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof data);
	if (syscall(SYS_capset, &hdr, data) < 0)
		die("clear capabilities", errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		die("set no_new_privs", errno);
}

static void restrict_landlock(char **writable, size_t n) {
	if (sb.ll_handled == 0)
		return;
	struct al_ruleset_attr attr = {.handled_access_fs = sb.ll_handled, .scoped = sb.ll_scoped};
	int fd = syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
	if (fd < 0)
		die("create landlock ruleset", errno);
	for (size_t i = 0; i < n; i++) {
		int dfd = open(writable[i], O_PATH | O_CLOEXEC);
		if (dfd < 0)
			continue;
		struct al_path_beneath_attr rule = {.allowed_access = sb.ll_handled, .parent_fd = dfd};
		int r = syscall(SYS_landlock_add_rule, fd, AL_RULE_PATH_BENEATH, &rule, 0);
		int e = errno;
		close(dfd);
		if (r < 0)
			die("landlock rule", e);
	}
	if (syscall(SYS_landlock_restrict_self, fd, 0) < 0)
		die("landlock restrict", errno);
	close(fd);
}

static int executable(const char *path) {
	struct stat st;
	if (stat(path, &st) < 0)
		return -1;
	if (S_ISDIR(st.st_mode) || !(st.st_mode & 0111)) {
		errno = EACCES;
		return -1;
	}
	return 0;
}

// look_path finds file as Go's exec.LookPath does: a name with a slash as is, otherwise in
// the absolute directories of the command's PATH. It exits 127 when there is none.
static void look_path(const char *file, char **env, char *out, size_t outn) {
	char b[4096 + 64];
	if (strchr(file, '/')) {
		if (executable(file) < 0) {
			snprintf(b, sizeof b, "exec: \"%s\": %s", file, strerror(errno));
			goto notfound;
		}
		snprintf(out, outn, "%s", file);
		return;
	}
	const char *path = "";
	for (char **e = env; *e; e++)
		if (!strncmp(*e, "PATH=", 5))
			path = *e + 5;
	while (*file) {
		const char *end = strchr(path, ':');
		size_t l = end ? (size_t)(end - path) : strlen(path);
		if (l > 0 && path[0] == '/' && l + strlen(file) + 2 <= outn) {
			snprintf(out, outn, "%.*s/%s", (int)l, path, file);
			if (executable(out) == 0)
				return;
		}
		if (!end)
			break;
		path = end + 1;
	}
	snprintf(b, sizeof b, "exec: \"%s\": executable file not found in $PATH", file);
notfound:;
	char m[sizeof b + 32];
	int n = snprintf(m, sizeof m, "airlock sandbox: %s\n", b);
	(void)!write(2, m, n < (int)sizeof m ? n : (int)sizeof m - 1);
	_exit(EXIT_NOTFOUND);
}

struct runreq {
	const char *dir;
	int cgroup_procs;
	int tty; // stdin is a terminal the command takes as its controlling terminal
	char **args;
	char **writable;
	size_t nwritable;
	char **env;
};

// The user namespace's own maxima of what the kernel counts per user, as userNSMaxima in
// usercounts_linux.go: no namespaces, a few inotify instances and watches, no fanotify. Written
// as root of the namespace (the sysctls are the namespace's own); a file the kernel lacks
// is skipped.
static void set_userns_maxima(void) {
	static const struct {
		const char *name, *value;
	} t[] = {{"max_user_namespaces", "0"},   {"max_pid_namespaces", "0"},      {"max_uts_namespaces", "0"},
		 {"max_ipc_namespaces", "0"},    {"max_net_namespaces", "0"},      {"max_mnt_namespaces", "0"},
		 {"max_cgroup_namespaces", "0"}, {"max_time_namespaces", "0"},     {"max_inotify_instances", "128"},
		 {"max_inotify_watches", "65536"}, {"max_fanotify_groups", "0"}, {"max_fanotify_marks", "0"}};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		char path[64];
		snprintf(path, sizeof path, "/proc/sys/user/%s", t[i].name);
		if (write_file(path, t[i].value, strlen(t[i].value), O_TRUNC | NO_PARENTS) < 0 && errno != ENOENT)
			die(path, errno);
	}
}

static void command(struct runreq *r, int gate, int status, int in, int out, int err) {
	char b;
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	ssize_t n;
	do
		n = read(gate, &b, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		_exit(EXIT_SETUP); // the holder did not release the command
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0 || dup2(status, STATUS_FD) < 0 ||
	    fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC) < 0)
		_exit(EXIT_SETUP);
	if (syscall(SYS_close_range, STATUS_FD + 1, ~0U, 0) < 0)
		for (int fd = STATUS_FD + 1; fd < 1024; fd++)
			close(fd);
	sigset_t all;
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	signal(SIGPIPE, SIG_DFL);
	if (setsid() < 0)
		die("setsid", errno);
	// Rootless, the run's namespace maps only the sandbox user: its creator's full
	// capabilities there are what set_userns_maxima needs.
	if (sb.uid_base >= 0 && (syscall(SYS_setresgid, 0, 0, 0) < 0 || syscall(SYS_setresuid, 0, 0, 0) < 0))
		die("become root of the user namespace", errno);
	set_userns_maxima();
	drop_privileges();
	if (r->dir[0] && chdir(r->dir) < 0) {
		char m[4200];
		snprintf(m, sizeof m, "chdir %s", r->dir);
		die(m, errno);
	}
	char path[4096];
	look_path(r->args[0], r->env, path, sizeof path);
	restrict_landlock(r->writable, r->nwritable);
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &sb.seccomp) < 0)
		die("load seccomp filter", errno);
	// The init is not dumpable, so that the command cannot reach its descriptors (the
	// status pipe) through /proc/1/fd; exec makes the command dumpable again.
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		die("set init not dumpable", errno);
	pid_t child = fork();
	if (child < 0)
		die("start command", errno);
	if (child > 0)
		be_init(child);
	// With a terminal, the command leads a session of its own with it as its controlling
	// terminal: its foreground process group gets what the keys for interrupt, suspend
	// and quit send, and job control works. The init stays outside that session.
	if (r->tty && (setsid() < 0 || ioctl(0, TIOCSCTTY, 0) < 0)) {
		char m[256];
		int e = errno;
		n = snprintf(m, sizeof m, "airlock sandbox: take the terminal: %s\n", strerror(e));
		(void)!write(2, m, n < (ssize_t)sizeof m ? n : (ssize_t)sizeof m - 1);
		_exit(EXIT_NOEXEC);
	}
	execve(path, r->args, r->env);
	char m[4200];
	int e = errno;
	n = snprintf(m, sizeof m, "airlock sandbox: exec %s: %s\n", r->args[0], strerror(e));
	(void)!write(2, m, n < (ssize_t)sizeof m ? n : (ssize_t)sizeof m - 1);
	_exit(EXIT_NOEXEC);
}

// The holder's side of runs.

struct run {
	pid_t pid;    // the run's init
	int conn;
	int status;   // read end of the init's status pipe
	int watching; // conn is polled for a kill request
};

static struct run *runs;
static size_t nruns, capruns;

static int write_idmap(pid_t pid, const char *file) {
	char path[64], line[64];
	snprintf(path, sizeof path, "/proc/%d/%s", pid, file);
	// Rootless: the sandbox user is the holder's uid 0, which is the invoking user.
	int n = sb.uid_base < 0 ? snprintf(line, sizeof line, "%d 0 1\n", SANDBOX_ID)
				: snprintf(line, sizeof line, "0 %ld %d\n", sb.uid_base, UID_RANGE);
	return write_file(path, line, n, O_TRUNC | NO_PARENTS);
}

static int parse_run(struct msg *m, struct runreq *r) {
	long nargs, nw;
	if (m->n < 6 || strcmp(m->f[0], "run") || parse_int(m->f[4], &nargs) < 0 || nargs < 1 || (size_t)nargs >= m->n - 5)
		return -1;
	size_t i = 5 + nargs;
	if (parse_int(m->f[i], &nw) < 0 || nw < 0 || (size_t)nw > m->n - i - 1)
		return -1;
	// argv, writable and envp arrays are NULL-terminated views of the fields; the fields
	// array is extended by one NULL so that env (the tail) ends too.
	char **f = realloc(m->f, (m->n + 1) * sizeof *f);
	if (!f)
		return -1;
	m->f = f;
	f[m->n] = NULL;
	r->dir = f[1];
	r->cgroup_procs = !strcmp(f[2], "1");
	r->tty = !strcmp(f[3], "1");
	r->args = malloc((nargs + 1) * sizeof(char *));
	if (!r->args)
		return -1;
	memcpy(r->args, &f[5], nargs * sizeof(char *));
	r->args[nargs] = NULL;
	r->writable = &f[i + 1];
	r->nwritable = nw;
	r->env = &f[i + 1 + nw];
	return 0;
}

// spawn starts a run's first process, in a fresh user and PID namespace, as a child of
// the holder (CLONE_PARENT), from a spawner forked for it that first takes the sandbox's
// host uid: the kernel makes a user namespace's creator its owner, and counts what the
// processes in it make per user (inotify, queued signals...) against the owner at the
// host's level (kernel/ucount.c). The holder's own uid is the host's root. The spawner
// keeps its capabilities across setresuid (SECBIT_NO_SETUID_FIXUP), as some security
// modules refuse a user namespace to an unprivileged creator; the child gets a full set in
// its new namespace and none outside it, whatever its creator had. It returns the child's
// pid, or -errno.
static pid_t spawn(struct runreq *r, int gate[2], int status[2], int *fds) {
	int rep[2];
	if (pipe2(rep, O_CLOEXEC) < 0)
		return -errno;
	pid_t sp = fork();
	if (sp < 0) {
		int e = errno;
		close(rep[0]);
		close(rep[1]);
		return -e;
	}
	if (sp == 0) {
		close(rep[0]);
		long pid = 0;
		// Rootless, the holder's uid is already the invoking user's: nothing to take.
		if (sb.uid_base >= 0 && (prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP, 0, 0, 0) < 0 || syscall(SYS_setgroups, 0, NULL) < 0 ||
		    syscall(SYS_setresgid, sb.uid_base, sb.uid_base, sb.uid_base) < 0 ||
		    syscall(SYS_setresuid, sb.uid_base, sb.uid_base, sb.uid_base) < 0))
			pid = -errno;
		if (pid == 0 && (pid = syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWPID | CLONE_PARENT, NULL, NULL, NULL, NULL)) < 0)
			pid = -errno;
		if (pid == 0) {
			close(rep[1]);
			close(gate[1]);
			close(status[0]);
			command(r, gate[0], status[1], fds[1], fds[2], fds[3]);
		}
		(void)!write(rep[1], &pid, sizeof pid);
		_exit(0);
	}
	close(rep[1]);
	long pid = -EIO;
	ssize_t n;
	do
		n = read(rep[0], &pid, sizeof pid);
	while (n < 0 && errno == EINTR);
	close(rep[0]);
	while (waitpid(sp, NULL, 0) < 0 && errno == EINTR)
		;
	return n == sizeof pid ? (pid_t)pid : -EIO;
}

static void start_run(struct msg *m, int *fds, int nfds) {
	struct runreq r = {0};
	int ok = parse_run(m, &r) == 0 && nfds == (r.cgroup_procs ? 5 : 4);
	if (!ok) {
		if (nfds > 0)
			send_error(fds[0], 1, "malformed run request", 0);
		goto out;
	}
	int conn = fds[0];
	int gate[2], status[2];
	if (pipe2(gate, O_CLOEXEC) < 0) {
		send_error(conn, 1, "pipe", errno);
		goto out;
	}
	if (pipe2(status, O_CLOEXEC | O_NONBLOCK) < 0) {
		send_error(conn, 1, "pipe", errno);
		close(gate[0]);
		close(gate[1]);
		goto out;
	}
	pid_t pid = spawn(&r, gate, status, fds);
	close(gate[0]);
	close(status[1]);
	if (pid < 0) {
		send_error(conn, 1, "start command", -pid);
		close(gate[1]);
		close(status[0]);
		goto out;
	}
	const char *fail = NULL;
	if (write_idmap(pid, "uid_map") < 0)
		fail = "map user ids";
	else if (write_idmap(pid, "gid_map") < 0)
		fail = "map group ids";
	char num[32];
	int l = snprintf(num, sizeof num, "%d", pid);
	for (int i = 0; !fail && i < sb.ncgroup + r.cgroup_procs; i++) {
		int fd = i < sb.ncgroup ? sb.cgroup_fds[i] : fds[4];
		if (pwrite(fd, num, l, 0) < 0)
			fail = "join cgroup";
	}
	if (fail) {
		int e = errno;
		kill(pid, SIGKILL);
		close(gate[1]);
		close(status[0]);
		waitpid(pid, NULL, 0);
		send_error(conn, 1, fail, e);
		goto out;
	}
	if (write(gate[1], "1", 1) != 1)
		kill(pid, SIGKILL);
	close(gate[1]);
	struct out o = {.n = 0};
	out_add(&o, "{\"started\":true}");
	send_out(conn, &o);
	if (nruns == capruns) {
		size_t c = capruns ? 2 * capruns : 16;
		struct run *p = realloc(runs, c * sizeof *p);
		if (!p) {
			kill(pid, SIGKILL); // reaped and reported by the loop only if known: report here
			close(status[0]);
			waitpid(pid, NULL, 0);
			send_error(conn, 1, "out of memory", ENOMEM);
			goto out;
		}
		runs = p;
		capruns = c;
	}
	runs[nruns++] = (struct run){.pid = pid, .conn = conn, .status = status[0], .watching = 1};
	fds[0] = -1; // kept
out:
	for (int i = 0; i < nfds; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(r.args);
}

static void report_exit(struct run *run, int status, struct rusage *ru) {
	struct out o = {.n = 0};
	char b[256];
	int code = 0, sig = 0;
	if (WIFSIGNALED(status)) {
		sig = WTERMSIG(status);
		code = 128 + sig;
	} else {
		code = WEXITSTATUS(status);
	}
	snprintf(b, sizeof b, "{\"exited\":true,\"exit_code\":%d,\"signum\":%d,\"user_ns\":%lld,\"sys_ns\":%lld,\"max_rss\":%lld}",
		 code, sig, (long long)ru->ru_utime.tv_sec * 1000000000LL + ru->ru_utime.tv_usec * 1000LL,
		 (long long)ru->ru_stime.tv_sec * 1000000000LL + ru->ru_stime.tv_usec * 1000LL, (long long)ru->ru_maxrss * 1024);
	out_add(&o, b);
	send_out(run->conn, &o);
	shutdown(run->conn, SHUT_RDWR);
	close(run->conn);
}

static void reap(void) {
	for (;;) {
		int status;
		struct rusage ru;
		pid_t pid = wait4(-1, &status, WNOHANG, &ru);
		if (pid <= 0)
			return;
		for (size_t i = 0; i < nruns; i++) {
			if (runs[i].pid != pid)
				continue;
			// The command's own status, if its init lived to write it (not when the
			// run was killed: then the init's SIGKILL is the answer).
			int cmd;
			if (read(runs[i].status, &cmd, sizeof cmd) == sizeof cmd)
				status = cmd;
			close(runs[i].status);
			report_exit(&runs[i], status, &ru);
			runs[i] = runs[--nruns];
			break;
		}
	}
}

// make_sockets answers a "sockets" message (fields: family,type,protocol in decimal, one
// per socket): the sockets, made in the sandbox's network namespace and unbound, passed
// back on the control socket. Rootless, airlock cannot enter that namespace; it binds and
// listens on them itself, as the namespace's owner (see sandbox.AttachSockets).
static void make_sockets(struct msg *m) {
	int s[MAX_FDS], n = 0;
	const char *fail = NULL;
	int err = 0;
	for (size_t i = 1; i < m->n && !fail; i++) {
		long fam, type, proto;
		char *a = m->f[i], *e1, *e2;
		fam = strtol(a, &e1, 10);
		type = *e1 == ',' ? strtol(e1 + 1, &e2, 10) : -1;
		proto = type >= 0 && *e2 == ',' ? strtol(e2 + 1, NULL, 10) : -1;
		if (n == MAX_FDS || proto < 0) {
			fail = "malformed sockets message";
			break;
		}
		if ((s[n] = socket(fam, type | SOCK_CLOEXEC, proto)) < 0) {
			fail = "create socket";
			err = errno;
			break;
		}
		n++;
	}
	if (fail) {
		send_error(CTRL_FD, 0, fail, err);
	} else {
		char oob[CMSG_SPACE(MAX_FDS * sizeof(int))];
		memset(oob, 0, sizeof oob);
		struct iovec iov = {.iov_base = "{}", .iov_len = 2};
		struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1};
		if (n > 0) {
			h.msg_control = oob;
			h.msg_controllen = CMSG_SPACE(n * sizeof(int));
			struct cmsghdr *c = CMSG_FIRSTHDR(&h);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(n * sizeof(int));
			memcpy(CMSG_DATA(c), s, n * sizeof(int));
		}
		while (sendmsg(CTRL_FD, &h, MSG_NOSIGNAL) < 0 && errno == EINTR)
			;
	}
	for (int i = 0; i < n; i++)
		close(s[i]);
}

static int holder(void) {
	unsigned char *buf = malloc(MAX_PACKET);
	if (!buf)
		return EXIT_SETUP;
	int fds[MAX_FDS], nfds;
	struct msg m;
	if (recv_msg(CTRL_FD, buf, &m, fds, &nfds) != 1)
		return EXIT_SETUP;
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	int r = setup(&m);
	msg_free(&m);
	if (r < 0)
		return EXIT_SETUP;

	signal(SIGPIPE, SIG_IGN); // a command gone before its gate is written
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		return EXIT_SETUP;
	struct pollfd *pfd = NULL;
	size_t cap = 0;
	for (;;) {
		if (cap < nruns + 2) {
			cap = nruns + 16;
			pfd = realloc(pfd, cap * sizeof *pfd);
			if (!pfd)
				return EXIT_SETUP;
		}
		pfd[0] = (struct pollfd){.fd = CTRL_FD, .events = POLLIN};
		pfd[1] = (struct pollfd){.fd = sfd, .events = POLLIN};
		for (size_t i = 0; i < nruns; i++)
			pfd[2 + i] = (struct pollfd){.fd = runs[i].watching ? runs[i].conn : -1, .events = POLLIN};
		size_t n = nruns;
		if (poll(pfd, 2 + n, -1) < 0) {
			if (errno == EINTR)
				continue;
			return EXIT_SETUP;
		}
		// Kill requests first (any message, or a closed connection, ends the run).
		for (size_t i = 0; i < n; i++) {
			if (!pfd[2 + i].revents)
				continue;
			char b[64];
			(void)!recv(runs[i].conn, b, sizeof b, MSG_DONTWAIT);
			kill(runs[i].pid, SIGKILL);
			runs[i].watching = 0;
		}
		if (pfd[1].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) > 0)
				;
			reap();
		}
		if (pfd[0].revents) {
			int rr = recv_msg(CTRL_FD, buf, &m, fds, &nfds);
			if (rr == 0 || (rr < 0 && (pfd[0].revents & (POLLHUP | POLLERR))))
				return 0;
			if (rr > 0 && m.n > 0 && !strcmp(m.f[0], "sockets")) {
				for (int i = 0; i < nfds; i++)
					close(fds[i]);
				make_sockets(&m);
				msg_free(&m);
			} else if (rr > 0) {
				start_run(&m, fds, nfds);
				msg_free(&m);
			}
		}
	}
}

// rootless_holder starts a rootless sandbox's holder. An ordinary user's Go parent could
// start it in its namespaces itself, but a Go process forks without vfork when it makes a
// user namespace (the child must wait for its id map), copying the whole parent: tens of
// milliseconds for airlock. So the parent starts this stage plainly, and it makes the user
// namespace (mapping its own uid and gid to 0, setgroups denied, as an unprivileged map must)
// and the others, forks the holder as pid 1 of the new PID namespace, tells the parent the
// holder's pid on the control socket ({"pid":N}, before the setup, so that the parent sets
// the holder's limits before anything starts) and waits for it. Without a Go runtime to
// start, the holder's exec costs little. The holder dies with this
// process (PR_SET_PDEATHSIG), which dies with the parent.
static int rootless_holder(void) {
	char line[64];
	int n;
	unsigned uid = geteuid(), gid = getegid(); // unmapped (65534) once the namespace is made
	if (unshare(CLONE_NEWUSER) < 0 || write_file("/proc/self/setgroups", "deny", 4, O_TRUNC | NO_PARENTS) < 0)
		return EXIT_SETUP;
	n = snprintf(line, sizeof line, "0 %u 1\n", uid);
	if (write_file("/proc/self/uid_map", line, n, O_TRUNC | NO_PARENTS) < 0)
		return EXIT_SETUP;
	n = snprintf(line, sizeof line, "0 %u 1\n", gid);
	if (write_file("/proc/self/gid_map", line, n, O_TRUNC | NO_PARENTS) < 0)
		return EXIT_SETUP;
	if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC) < 0)
		return EXIT_SETUP;
	pid_t pid = fork();
	if (pid < 0)
		return EXIT_SETUP;
	if (pid == 0) {
		// Executed again, so that its memory belongs to the new user namespace: a
		// non-dumpable process's /proc files are owned by the root of that namespace,
		// and the holder writes its commands' id maps there.
		char *argv[] = {STAGE_HOLDER, NULL}, *envp[] = {NULL};
		if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
			_exit(EXIT_SETUP);
		execve("/proc/self/exe", argv, envp);
		_exit(EXIT_SETUP);
	}
	n = snprintf(line, sizeof line, "{\"pid\":%d}", (int)pid);
	while (send(CTRL_FD, line, n, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
	if (syscall(SYS_close_range, CTRL_FD, ~0U, 0) < 0)
		for (int fd = CTRL_FD; fd < 1024; fd++)
			close(fd);
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return EXIT_SETUP;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// userns_keeper holds a user namespace (the workspace's id map) until stdin closes.
static int userns_keeper(void) {
	char b[512];
	for (;;) {
		ssize_t n = read(0, b, sizeof b);
		if (n == 0 || (n < 0 && errno != EINTR))
			return 0;
	}
}

__attribute__((constructor)) static void airlock_sandbox_stage(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc < 1 || !argv || !argv[0])
		return;
	if (!strcmp(argv[0], STAGE_HOLDER))
		_exit(holder());
	if (!strcmp(argv[0], STAGE_USERNS))
		_exit(userns_keeper());
	if (!strcmp(argv[0], STAGE_ROOTLESS))
		_exit(rootless_holder());
}
