package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// cgroupPrefix names the directory under each hierarchy that holds airlock's sandboxes.
const cgroupPrefix = "airlock"

// cgroups is one sandbox's control groups: limits in v2 where the unified hierarchy has the
// controller, else in v1; a v2 group (when any v2 hierarchy is mounted) whose per-run child
// groups can be killed as a whole with cgroup.kill.
type cgroups struct {
	v1      map[string]string // controller → this sandbox's v1 directory
	unified string            // this sandbox's v2 directory, "" without v2
	v2      map[string]bool   // controllers enabled for this sandbox in v2
}

type hierarchy struct {
	root    string          // the cgroup mount root, e.g. /sys/fs/cgroup
	unified string          // the v2 mount, "" if none
	v2      map[string]bool // controllers available in v2
}

func probeCgroups(root string) hierarchy {
	h := hierarchy{root: root, v2: map[string]bool{}}
	for _, p := range []string{root, filepath.Join(root, "unified")} {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			h.unified = p
			break
		}
	}
	if h.unified != "" {
		b, _ := os.ReadFile(filepath.Join(h.unified, "cgroup.controllers"))
		for _, c := range strings.Fields(string(b)) {
			h.v2[c] = true
		}
	}
	return h
}

func (h hierarchy) v1Dir(controller string) string {
	p := filepath.Join(h.root, controller)
	var st unix.Statfs_t
	if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC {
		return p
	}
	return ""
}

// newCgroups creates the sandbox's groups and applies its limits.
func newCgroups(root, id string, o sandbox.Options) (*cgroups, error) {
	h := probeCgroups(root)
	cg := &cgroups{v1: map[string]string{}, v2: map[string]bool{}}
	if h.unified != "" {
		parent := filepath.Join(h.unified, cgroupPrefix)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("create cgroup %s: %w", parent, err)
		}
		for _, c := range []string{"memory", "pids", "cpu"} {
			if !h.v2[c] {
				continue
			}
			if enableController(h.unified, c) == nil && enableController(parent, c) == nil {
				cg.v2[c] = true
			}
		}
		cg.unified = filepath.Join(parent, id)
		if err := os.Mkdir(cg.unified, 0o755); err != nil {
			return nil, fmt.Errorf("create cgroup %s: %w", cg.unified, err)
		}
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if cg.v2[c] {
			continue
		}
		base := h.v1Dir(c)
		if base == "" {
			continue
		}
		dir := filepath.Join(base, cgroupPrefix, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			cg.remove()
			return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		cg.v1[c] = dir
	}
	if err := cg.limit(o); err != nil {
		cg.remove()
		return nil, err
	}
	return cg, nil
}

func enableController(dir, c string) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0)
}

// dir returns where controller c of this sandbox lives and whether it is v2.
func (cg *cgroups) dir(c string) (string, bool) {
	if cg.v2[c] {
		return cg.unified, true
	}
	return cg.v1[c], false
}

func (cg *cgroups) limit(o sandbox.Options) error {
	set := func(c, v1file, v2file, value string) error {
		dir, v2 := cg.dir(c)
		if dir == "" {
			return fmt.Errorf("no %s cgroup controller available for the requested limit", c)
		}
		file := v1file
		if v2 {
			file = v2file
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			return fmt.Errorf("set %s: %w", file, err)
		}
		return nil
	}
	if err := set("pids", "pids.max", "pids.max", strconv.FormatInt(o.Pids, 10)); err != nil {
		return err
	}
	if o.Memory > 0 {
		mem := strconv.FormatInt(o.Memory, 10)
		if err := set("memory", "memory.limit_in_bytes", "memory.max", mem); err != nil {
			return err
		}
		// No swap beyond the limit, where the kernel accounts it.
		if dir, v2 := cg.dir("memory"); v2 {
			_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
		} else {
			_ = os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), []byte(mem), 0)
			// v1 counts socket buffers apart, and only once a limit is set: before any
			// task joins, so that every socket of the sandbox is charged.
			tcp := strconv.FormatInt(sandbox.TCPMemoryLimit(o.Memory), 10)
			if err := set("memory", "memory.kmem.tcp.limit_in_bytes", "", tcp); err != nil {
				return fmt.Errorf("bound the sandbox's socket buffers: %w", err)
			}
		}
	}
	if o.CPUs > 0 {
		const period = 100000
		quota := int64(o.CPUs * period)
		if quota < 1000 {
			quota = 1000
		}
		if dir, v2 := cg.dir("cpu"); v2 {
			return set("cpu", "", "cpu.max", fmt.Sprintf("%d %d", quota, period))
		} else if dir != "" {
			_ = os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(period)), 0)
		}
		return set("cpu", "cpu.cfs_quota_us", "", strconv.FormatInt(quota, 10))
	}
	return nil
}

// procsFiles opens the v1 cgroup.procs files a run's first process is written to.
func (cg *cgroups) procsFiles() ([]*os.File, error) {
	var files []*os.File
	for _, dir := range cg.v1 {
		f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			closeFiles(files)
			return nil, fmt.Errorf("open cgroup: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

// runGroup creates the v2 child group of one run; "" without v2.
func (cg *cgroups) runGroup(n int) (string, error) {
	if cg.unified == "" {
		return "", nil
	}
	dir := filepath.Join(cg.unified, "run-"+strconv.Itoa(n))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	return dir, nil
}

// readInt reads a one-number cgroup file; 0 when absent.
func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// readKey reads "key N" from a flat-keyed cgroup file.
func readKey(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func (cg *cgroups) resetPeaks() {
	if dir, v2 := cg.dir("memory"); dir != "" && !v2 {
		_ = os.WriteFile(filepath.Join(dir, "memory.max_usage_in_bytes"), []byte("0"), 0)
	}
}

func (cg *cgroups) peakMemory() int64 {
	dir, v2 := cg.dir("memory")
	switch {
	case dir == "":
		return 0
	case v2:
		return readInt(filepath.Join(dir, "memory.peak"))
	default:
		return readInt(filepath.Join(dir, "memory.max_usage_in_bytes"))
	}
}

func (cg *cgroups) peakPids() int64 {
	dir, _ := cg.dir("pids")
	if dir == "" {
		return 0
	}
	return readInt(filepath.Join(dir, "pids.peak"))
}

func (cg *cgroups) oomKills() int64 {
	dir, v2 := cg.dir("memory")
	switch {
	case dir == "":
		return 0
	case v2:
		return readKey(filepath.Join(dir, "memory.events"), "oom_kill")
	default:
		return readKey(filepath.Join(dir, "memory.oom_control"), "oom_kill")
	}
}

// kill ends every process in the sandbox's groups.
func (cg *cgroups) kill() {
	if cg.unified != "" {
		_ = os.WriteFile(filepath.Join(cg.unified, "cgroup.kill"), []byte("1"), 0)
	}
	for _, dir := range cg.v1 {
		killProcs(dir)
	}
}

func killProcs(dir string) {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// remove kills what is left and removes the groups, children first.
func (cg *cgroups) remove() error {
	cg.kill()
	var errs []error
	if cg.unified != "" {
		entries, _ := os.ReadDir(cg.unified)
		for _, e := range entries {
			if e.IsDir() {
				errs = append(errs, rmdirRetry(filepath.Join(cg.unified, e.Name())))
			}
		}
		errs = append(errs, rmdirRetry(cg.unified))
	}
	for _, dir := range cg.v1 {
		errs = append(errs, rmdirRetry(dir))
	}
	return errors.Join(errs...)
}

// rmdirRetry removes a cgroup directory, waiting briefly for killed processes to go.
func rmdirRetry(dir string) error {
	var err error
	for i := 0; i < 200; i++ {
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		if i%20 == 19 {
			killProcs(dir)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}
