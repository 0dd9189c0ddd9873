package native

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-proxy/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// A delegated cgroup v2 subtree gives a rootless sandbox the limits of a root one. The
// parent is a cgroup2 directory the user may write: Native.CgroupParent (the config's
// sandbox.cgroup_parent, made once by root with DelegateCgroup), else the systemd user
// manager's delegated user@UID.service, when airlock runs inside it. Each sandbox gets a
// fresh child of the parent, named by its id: the holder is cloned straight into it
// (CLONE_INTO_CGROUP), each run into a run-N child of it; memory.max, pids.max and cpu.max
// are written for the controllers the parent offers; cgroup.kill ends a run's or the
// whole sandbox's tree; the child is removed at Close. A controller the parent does not
// offer is treated as no cgroup for its limit: refused unless unenforced limits are
// allowed, and then listed in Unenforced.
//
// The kernel lets an ordinary user move a process between two cgroups only when it may
// write the cgroup.procs of their common ancestor: airlock itself must run in a cgroup
// under the delegated subtree (systemd puts a user's services and scopes there; for a
// configured parent, whatever starts airlock must put it there).

// delegation is a cgroup v2 directory in which this user makes its sandboxes' cgroups.
type delegation struct {
	parent      string          // the directory; each sandbox's cgroup is a child of it
	controllers map[string]bool // of limitControllers, those its children get
}

// limitControllers are the controllers of a sandbox's limits.
var limitControllers = []string{"memory", "pids", "cpu"}

func (d *delegation) has(c string) bool { return d != nil && d.controllers[c] }

// lacks says why limit c is not enforced.
func (d *delegation) lacks(c string) string {
	if d == nil {
		return "no cgroup"
	}
	return fmt.Sprintf("the cgroup parent %s offers no %s controller", d.parent, c)
}

// ErrCgroupParent: a configured cgroup parent cannot be used.
var ErrCgroupParent = errors.New("unusable cgroup parent (sandbox.cgroup_parent)")

// findDelegation returns the cgroup parent of this user's rootless sandboxes: the
// configured one, which must be usable, else a systemd user delegation airlock runs in,
// else nil (no cgroups).
func findDelegation(configured, cgroupRoot string) (*delegation, error) {
	if configured != "" {
		d, err := useDelegation(filepath.Clean(configured))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCgroupParent, configured, err)
		}
		return d, nil
	}
	h := probeCgroups(cgroupRoot)
	if h.unified == "" {
		return nil, nil
	}
	own, err := ownCgroup()
	if err != nil {
		return nil, nil
	}
	base := systemdUserService(own, os.Getuid())
	if base == "" {
		return nil, nil
	}
	base = filepath.Join(h.unified, base)
	if unix.Access(filepath.Join(base, "cgroup.subtree_control"), unix.W_OK) != nil {
		return nil, nil
	}
	// A directory of airlock's own beside systemd's units, whose children the sandboxes are.
	parent := filepath.Join(base, cgroupPrefix)
	if err := os.Mkdir(parent, 0o755); err != nil && !os.IsExist(err) {
		return nil, nil
	}
	d, err := useDelegation(parent)
	if err != nil {
		return nil, nil
	}
	return d, nil
}

var systemdUserRE = regexp.MustCompile(`^/user\.slice/user-([0-9]+)\.slice/user@([0-9]+)\.service(/|$)`)

// systemdUserService is the systemd user manager's delegated cgroup that a process in
// cgroup path (relative to the v2 root) is inside, for uid; "" if none.
func systemdUserService(path string, uid int) string {
	m := systemdUserRE.FindStringSubmatch(path)
	u := strconv.Itoa(uid)
	if m == nil || m[1] != u || m[2] != u {
		return ""
	}
	return strings.TrimSuffix(m[0], "/")
}

// ownCgroup is this process's cgroup v2 path (the 0:: line of /proc/self/cgroup).
func ownCgroup() (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("no cgroup v2 line in /proc/self/cgroup")
}

// cgroup2Root is the root of the cgroup2 mount that dir is in.
func cgroup2Root(dir string) (string, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return "", err
	}
	if sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return "", errors.New("not a cgroup v2 directory")
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", err
	}
	root := dir
	for root != "/" {
		var up unix.Stat_t
		if unix.Stat(filepath.Dir(root), &up) != nil || up.Dev != st.Dev {
			break
		}
		root = filepath.Dir(root)
	}
	return root, nil
}

// useDelegation checks that dir is a cgroup2 directory this user may make sandbox cgroups
// in and move its processes into, and enables there the limit controllers dir offers.
func useDelegation(dir string) (*delegation, error) {
	if !filepath.IsAbs(dir) {
		return nil, errors.New("want an absolute path")
	}
	root, err := cgroup2Root(dir)
	if err != nil {
		return nil, err
	}
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.subtree_control"), filepath.Join(dir, "cgroup.procs")} {
		if err := unix.Access(p, unix.W_OK); err != nil {
			return nil, fmt.Errorf("uid %d may not write %s (%w): delegate it once as root with `airlock sandbox delegate-cgroup --user NAME --path %s`", os.Getuid(), p, err, dir)
		}
	}
	own, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	rel := "/" + strings.TrimPrefix(strings.TrimPrefix(dir, root), "/")
	common := commonCgroup(own, rel)
	if err := unix.Access(filepath.Join(root, common, "cgroup.procs"), unix.W_OK); err != nil {
		return nil, fmt.Errorf("airlock runs in cgroup %s, and the kernel lets an ordinary user move a process only within a subtree it owns (here %s, the common ancestor, is not its own): start airlock in a cgroup under %s (root can move a process there: echo PID > %s/LEAF/cgroup.procs)", own, common, dir, dir)
	}
	d := &delegation{parent: dir, controllers: map[string]bool{}}
	offered := strings.Fields(readString(filepath.Join(dir, "cgroup.controllers")))
	enabled := strings.Fields(readString(filepath.Join(dir, "cgroup.subtree_control")))
	for _, c := range limitControllers {
		if !slices.Contains(offered, c) {
			continue
		}
		if slices.Contains(enabled, c) || enableController(dir, c) == nil {
			d.controllers[c] = true
		}
	}
	return d, nil
}

// commonCgroup is the deepest common ancestor of two cgroup paths.
func commonCgroup(a, b string) string {
	as, bs := strings.Split(strings.Trim(a, "/"), "/"), strings.Split(strings.Trim(b, "/"), "/")
	var c []string
	for i := 0; i < len(as) && i < len(bs) && as[i] == bs[i] && as[i] != ""; i++ {
		c = append(c, as[i])
	}
	return "/" + strings.Join(c, "/")
}

func readString(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// newDelegatedCgroup makes the sandbox's cgroup under d and writes its limits.
func newDelegatedCgroup(d *delegation, id string, o sandbox.Options) (*cgroups, error) {
	dir := filepath.Join(d.parent, id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	cg := &cgroups{unified: dir, v2: map[string]bool{}}
	for c, ok := range d.controllers {
		cg.v2[c] = ok
	}
	if err := cg.limitDelegated(o); err != nil {
		_ = cg.remove()
		return nil, err
	}
	return cg, nil
}

// delegatedExtraPids is what a rootless sandbox's cgroup holds besides a root one's
// processes: the stage that makes the user namespace, and the holder.
const delegatedExtraPids = 2

// limitDelegated writes the limits of o for the controllers this v2 group has.
func (cg *cgroups) limitDelegated(o sandbox.Options) error {
	write := func(file, value string) error {
		if err := os.WriteFile(filepath.Join(cg.unified, file), []byte(value), 0); err != nil {
			return fmt.Errorf("set %s: %w", file, err)
		}
		return nil
	}
	if cg.v2["pids"] {
		if err := write("pids.max", strconv.FormatInt(pidsOf(o)+delegatedExtraPids, 10)); err != nil {
			return err
		}
	}
	if cg.v2["memory"] && o.Memory > 0 {
		if err := write("memory.max", strconv.FormatInt(o.Memory, 10)); err != nil {
			return err
		}
		_ = write("memory.swap.max", "0") // where the kernel accounts swap
	}
	if cg.v2["cpu"] && o.CPUs > 0 {
		return write("cpu.max", cpuMax(o.CPUs))
	}
	return nil
}

// cpuMax is cpu.max for a limit of cpus cores: quota and period in microseconds.
func cpuMax(cpus float64) string {
	const period = 100000
	quota := max(int64(cpus*period), 1000)
	return fmt.Sprintf("%d %d", quota, period)
}

// cgroupFD opens the sandbox's v2 group for CLONE_INTO_CGROUP; -1 without one.
func (cg *cgroups) cgroupFD() (int, error) {
	if cg == nil || cg.unified == "" {
		return -1, nil
	}
	fd, err := unix.Open(cg.unified, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open cgroup %s: %w", cg.unified, err)
	}
	return fd, nil
}

// DelegateCgroup, as root, makes dir a cgroup v2 subtree that the user uid:gid may make
// rootless sandboxes' cgroups in: it creates dir (in a cgroup2 hierarchy), enables in its
// ancestors and in it the limit controllers the hierarchy has, and hands dir and the files
// the kernel names for delegation (/sys/kernel/cgroup/delegate: cgroup.procs,
// cgroup.subtree_control, cgroup.threads...) to the user. It returns the controllers dir's
// children get.
func DelegateCgroup(dir string, uid, gid int) ([]string, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("delegating a cgroup needs root")
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%s: want an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	root, err := cgroup2Root(filepath.Dir(dir))
	if err != nil {
		return nil, fmt.Errorf("%s: %w (cgroup v2 is mounted at /sys/fs/cgroup or /sys/fs/cgroup/unified)", filepath.Dir(dir), err)
	}
	// Every step below goes through descriptors opened with no link followed anywhere in the
	// path (cgroupfs has no links; a link on the way is someone redirecting root): a path
	// checked first and used later could be swapped in between by a user who can write a
	// directory on it, and root would then chown or write what that user chose.
	pfd, err := openNoLinks(filepath.Dir(dir), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Dir(dir), err)
	}
	defer unix.Close(pfd)
	if err := isCgroup2FD(pfd); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Dir(dir), err)
	}
	base := filepath.Base(dir)
	created := true
	if err := unix.Mkdirat(pfd, base, 0o755); err != nil {
		if err != unix.EEXIST {
			return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		created = false
	}
	dfd, err := unix.Openat2(pfd, base, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_BENEATH})
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	if err := isCgroup2FD(dfd); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	at := fmt.Sprintf("/proc/self/fd/%d", dfd) // dir as opened, for reads
	if !created {
		if err := checkRedelegate(at, dir, uid); err != nil {
			return nil, err
		}
	}
	// Each ancestor from the root down passes the controllers on (one with processes of
	// its own cannot: the kernel's no-internal-process rule; the root can).
	var chain []string
	for p := dir; ; p = filepath.Dir(p) {
		chain = append([]string{p}, chain...)
		if p == root {
			break
		}
	}
	for _, p := range chain {
		offered := strings.Fields(readString(filepath.Join(p, "cgroup.controllers")))
		for _, c := range limitControllers {
			if slices.Contains(offered, c) {
				_ = enableControllerNoLinks(p, c)
			}
		}
	}
	files := []string{"cgroup.procs", "cgroup.subtree_control", "cgroup.threads"}
	if b, err := os.ReadFile("/sys/kernel/cgroup/delegate"); err == nil {
		files = strings.Fields(string(b))
	}
	if err := unix.Fchownat(dfd, "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
		return nil, fmt.Errorf("chown %s: %w", dir, err)
	}
	for _, f := range files {
		if strings.Contains(f, "/") {
			continue
		}
		if err := unix.Fchownat(dfd, f, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && err != unix.ENOENT {
			return nil, fmt.Errorf("chown %s: %w", filepath.Join(dir, f), err)
		}
	}
	dir = at
	var got []string
	enabled := strings.Fields(readString(filepath.Join(dir, "cgroup.subtree_control")))
	for _, c := range limitControllers {
		if slices.Contains(enabled, c) {
			got = append(got, c)
		}
	}
	return got, nil
}

// checkRedelegate allows delegating an existing cgroup dir to uid only if it is uid's
// already (delegating again is harmless), or is empty: no processes anywhere in it and no
// child cgroups. The user gets its cgroup.procs, so that it may move any process of the
// subtree, whoever's, out of the cgroup it was put in (seen: root's process moved out of a
// child cgroup by the user), and make cgroups in it beside those there.
func checkRedelegate(dir, name string, uid int) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	if int(st.Uid) == uid {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	children := 0
	for _, e := range ents {
		if e.IsDir() {
			children++
		}
	}
	populated := !strings.Contains("\n"+readString(filepath.Join(dir, "cgroup.events"))+"\n", "\npopulated 0\n")
	if children > 0 || populated {
		return fmt.Errorf("cgroup %s exists, is uid %d's, and holds processes or child cgroups (%d): handing it to uid %d would let that user move them out of their cgroups; delegate a new directory (--path), or empty and remove this one first", name, st.Uid, children, uid)
	}
	return nil
}

// CgroupV2Mount is where the cgroup v2 hierarchy is mounted, "" if nowhere.
func CgroupV2Mount() string { return probeCgroups(DefaultCgroupRoot).unified }

// openNoLinks opens path with no symbolic link followed in any of its components.
func openNoLinks(path string, flags int) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: uint64(flags) | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
}

// isCgroup2FD says whether fd is on a cgroup v2 file system.
func isCgroup2FD(fd int) error {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return err
	}
	if sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return errors.New("not a cgroup v2 directory")
	}
	return nil
}

// enableControllerNoLinks is enableController through a path with no link in it.
func enableControllerNoLinks(dir, c string) error {
	fd, err := openNoLinks(filepath.Join(dir, "cgroup.subtree_control"), unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte("+"+c))
	return err
}
