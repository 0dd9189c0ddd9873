package native

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-proxy/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// Rootless native sandboxes: what an ordinary user gets, with no setuid helper.
//
// The holder starts in a user namespace of its own together with the mount, PID, network,
// UTS and IPC namespaces; that namespace maps one uid and one gid, the invoking user's, to
// 0, so the holder builds the mount tree as that namespace's root. Each command's user
// namespace (a child of the holder's) maps the sandbox user, 1000, to that same uid: what
// the sandbox writes in the workspace is the user's, with no idmapped mount. The command
// drops every capability, sets no_new_privs and gets the same Landlock rules and seccomp
// allowlist as root mode.
//
// airlock cannot enter the sandbox's network namespace (setns needs CAP_SYS_ADMIN in its
// own user namespace), so the holder makes the proxy's sockets in it, unbound, and hands
// them over on the control socket (SCM_RIGHTS); airlock, as the owner of the holder's
// user namespace, may bind them, bring lo up, add the routes and the redirect rules
// through them (sandbox.AttachSockets).
//
// Without a delegated cgroup v2 subtree (delegate_linux.go) there are no cgroups: no
// memory or CPU limit and no usage peaks. The number of processes and threads is bounded
// instead by RLIMIT_NPROC, which the kernel counts per user in every user namespace up to
// the host's: the holder's limit, set from outside, is the maximum of all that runs as its
// uid 0, every command's processes included, and none of them can raise it. With one, each
// limit whose controller the parent offers is a cgroup's, as in root mode.
// rootlessUnenforced lists what does not hold; the run report carries it.

// rootlessUIDBase is the setup message's uid base of a rootless sandbox (stage_linux.c).
const rootlessUIDBase = -1

// ErrRootlessCoW: a copy-on-write workspace's bounded layer is a loop-mounted file system.
var ErrRootlessCoW = errors.New("a copy-on-write workspace needs root (its layer is a loop-mounted file system of --disk bytes): run as root, or use --workspace DIR:rw or DIR:ro")

// rootless reports whether sandboxes are made by an ordinary user.
func rootless() bool { return os.Geteuid() != 0 }

// Rootless reports whether this process makes rootless sandboxes (it is not root).
func Rootless() bool { return rootless() }

// RootlessStateDir is the state directory of a user's sandboxes: $XDG_RUNTIME_DIR/airlock,
// else ~/.local/state/airlock/run; "" without either (never a shared directory such as
// /tmp, where another user could have made it first).
func RootlessStateDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		return filepath.Join(d, "airlock")
	}
	if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "state", "airlock", "run")
	}
	return ""
}

// CheckPrivateDir checks that dir, where a rootless airlock keeps what only it may change
// (its sandboxes' state directories, which Cleanup removes; its sessions' records, which
// hold their env), is this user's alone: a directory, not a link, owned by this user and
// writable by no one else, on a path no one else can redirect: each directory above it
// (links resolved) owned by root or this user, and sticky (as /tmp is) where others may
// write it. XDG_RUNTIME_DIR is the caller's to set: one naming a shared directory, where
// another user made airlock/ first, would otherwise let that user swap a link in and have
// this user's airlock remove its files or write its sessions' records where that user
// reads them.
func CheckPrivateDir(dir string) error {
	uid := uint32(os.Geteuid())
	fix := "remove it, or point XDG_RUNTIME_DIR (or the state directory) at a directory of this user's own"
	if err := CheckOwnDir(dir); err != nil {
		return err
	}
	var st unix.Stat_t
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		if err := unix.Stat(p, &st); err != nil {
			return fmt.Errorf("state directory %s: %w", dir, err)
		}
		if (st.Uid != 0 && st.Uid != uid) || (st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0) {
			return fmt.Errorf("state directory %s lies in %s (uid %d, mode %04o), which another user may change: %s", dir, p, st.Uid, st.Mode&0o7777, fix)
		}
		if p == "/" || p == "." {
			return nil
		}
	}
}

// CheckOwnDir checks dir itself as CheckPrivateDir does, but not the directories above it:
// a directory, not a link, owned by this user and writable by no one else. It is the check
// for a state directory an operator named in the config (a container's volume, for example,
// whose mount point the kubelet makes writable by all while no other user exists there):
// the path to it is the operator's choice, where a default one follows the caller's
// environment.
func CheckOwnDir(dir string) error {
	uid := uint32(os.Geteuid())
	fix := "remove it, or point XDG_RUNTIME_DIR (or the state directory) at a directory of this user's own"
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("state directory %s is not a directory (a link?): %s", dir, fix)
	}
	if st.Uid != uid || st.Mode&0o022 != 0 {
		return fmt.Errorf("state directory %s is owned by uid %d with mode %04o; it must be uid %d's alone, writable by no one else: %s", dir, st.Uid, st.Mode&0o7777, uid, fix)
	}
	return nil
}

// ErrUnenforcedLimits: a rootless sandbox was asked for a limit it cannot enforce.
var ErrUnenforcedLimits = errors.New("cannot be enforced in this rootless native sandbox")

// checkRootless refuses what a rootless sandbox cannot do (nothing as root); d is its
// delegated cgroup parent, nil without one.
func (n *Native) checkRootless(o sandbox.Options, d *delegation) error {
	if !rootless() {
		return nil
	}
	var asked []string
	if o.Memory > 0 && !d.has("memory") {
		asked = append(asked, "a memory limit")
	}
	if o.CPUs > 0 && !d.has("cpu") {
		asked = append(asked, "a CPU limit")
	}
	if len(asked) > 0 && (n == nil || !n.AllowUnenforcedLimits) {
		why := "no cgroup"
		if d != nil {
			why = "the cgroup parent " + d.parent + " offers no such controller"
		}
		return fmt.Errorf("%s %w (%s): run as root, delegate a cgroup v2 subtree that offers the controller (airlock sandbox delegate-cgroup, sandbox.cgroup_parent), drop the limit, or accept it unenforced (--allow-unenforced-limits, sandbox.allow_unenforced_limits)", strings.Join(asked, " and "), ErrUnenforcedLimits, why)
	}
	if !cHolder {
		return errors.New("rootless native sandboxes need an airlock built with cgo (the C holder): run as root, or use --backend docker")
	}
	if o.WorkspaceMode == sandbox.WorkspaceCoW && o.Workspace != "" {
		return ErrRootlessCoW
	}
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err == nil && strings.TrimSpace(string(b)) == "0" {
		return errors.New("rootless native sandboxes need user namespaces, which this host disables (/proc/sys/user/max_user_namespaces is 0): run as root, or use --backend docker")
	}
	return nil
}

// RootlessUnenforced lists, for the run report and a one-time notice, what a rootless
// sandbox of o with no cgroup does not enforce or measure that a root one does.
func RootlessUnenforced(o sandbox.Options) []string { return rootlessUnenforced(o, nil) }

// rootlessUnenforced is that list for a sandbox whose delegated cgroup parent is d (nil:
// none): a limit whose controller d offers is enforced and not listed.
func rootlessUnenforced(o sandbox.Options, d *delegation) []string {
	var s []string
	switch {
	case d.has("memory"):
	case o.Memory > 0:
		s = append(s, fmt.Sprintf("memory limit of %d bytes not enforced (%s)", o.Memory, d.lacks("memory")))
	default:
		s = append(s, fmt.Sprintf("no memory limit (%s)", d.lacks("memory")))
	}
	if o.CPUs > 0 && !d.has("cpu") {
		s = append(s, fmt.Sprintf("CPU limit of %g cores not enforced (%s)", o.CPUs, d.lacks("cpu")))
	}
	if !d.has("pids") {
		s = append(s, fmt.Sprintf("processes and threads bounded by RLIMIT_NPROC (%d) in the sandbox's user namespace, not by a pids cgroup (%s)", pidsOf(o), d.lacks("pids")))
	}
	switch {
	case !d.has("memory") && !d.has("pids"):
		s = append(s, fmt.Sprintf("peak processes and OOM kills not measured, peak memory is the largest process's (%s)", d.lacks("memory")))
	case !d.has("memory"):
		s = append(s, fmt.Sprintf("OOM kills not measured, peak memory is the largest process's (%s)", d.lacks("memory")))
	case !d.has("pids"):
		s = append(s, fmt.Sprintf("peak processes not measured (%s)", d.lacks("pids")))
	}
	s = append(s,
		"the invoking user's supplementary groups are kept (setgroups is denied in an unprivileged user namespace)",
		"one host uid: the sandbox's processes and files are the invoking user's, and share its per-user kernel counts")
	return s
}

func pidsOf(o sandbox.Options) int64 {
	if o.Pids > 0 {
		return o.Pids
	}
	return sandbox.DefaultPids
}

// Unenforced is what this sandbox does not enforce (empty as root).
func (in *nativeInstance) Unenforced() []string { return in.unenforced }

// boundRootlessPids sets the holder's RLIMIT_NPROC (soft and hard) to the sandbox's pids
// limit before it starts anything: every command's user namespace records it as its
// maximum at the holder's level, where all the sandbox's processes are counted.
func boundRootlessPids(pid int, o sandbox.Options) error {
	n := uint64(pidsOf(o))
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, nil, &old); err != nil {
		return fmt.Errorf("read the process limit: %w", err)
	}
	lim := unix.Rlimit{Cur: min(n, old.Max), Max: min(n, old.Max)}
	if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &lim, nil); err != nil {
		return fmt.Errorf("set the process limit to %d: %w", n, err)
	}
	return nil
}

// handOffSockets asks the holder for the proxy's sockets, made in the sandbox's network
// namespace, and attaches them to the proxy (sandbox.AttachSockets).
func (in *nativeInstance) handOffSockets() error {
	specs := sandbox.HandoffSockets(in.opts)
	fields := [][]byte{[]byte("sockets")}
	for _, s := range specs {
		fields = append(fields, []byte(fmt.Sprintf("%d,%d,%d", s.Family, s.Type, s.Proto)))
	}
	in.ctrlMu.Lock()
	err := sendFields(int(in.ctrl.Fd()), fields)
	var b []byte
	var files []*os.File
	if err == nil {
		b, files, err = recvPacket(int(in.ctrl.Fd()))
	}
	in.ctrlMu.Unlock()
	if err != nil {
		closeFiles(files)
		return fmt.Errorf("sandbox sockets: %w", err)
	}
	var reply holderReply
	if err := json.Unmarshal(b, &reply); err != nil {
		closeFiles(files)
		return fmt.Errorf("sandbox sockets: %w", err)
	}
	if err := reply.err(); err != nil {
		closeFiles(files)
		return fmt.Errorf("sandbox sockets: %w", err)
	}
	if len(files) != len(specs) {
		closeFiles(files)
		return fmt.Errorf("sandbox sockets: %d of %d received", len(files), len(specs))
	}
	id := sandbox.Identity{ID: in.opts.ID, Labels: in.opts.Labels}
	detach, err := sandbox.AttachSockets(files, in.opts.Proxy, id, in.opts.ProxyOnly)
	in.detach = append(in.detach, detach...)
	return err
}
