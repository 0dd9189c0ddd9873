package native_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox/native"
	"golang.org/x/sys/unix"
)

// ownMemoryGroup is the test process's v1 memory group (as the initial cgroup namespace
// names it) and that group's directory under /sys/fs/cgroup/memory.
func ownMemoryGroup(t *testing.T) (string, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("root")
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	p, ok := native.V1PathForTest(string(b), "memory")
	if !ok {
		t.Skip("no v1 memory hierarchy")
	}
	dir := filepath.Join(native.DefaultCgroupRoot, "memory", p)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		t.Skipf("own memory group not at %s: %v", dir, err)
	}
	return p, dir
}

// moveSelf writes the test process into the group dir.
func moveSelf(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		t.Fatalf("move to %s: %v", dir, err)
	}
}

// inGroup reports whether the test process is listed in the group dir.
func inGroup(dir string) bool {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(b)) {
		if f == strconv.Itoa(os.Getpid()) {
			return true
		}
	}
	return false
}

// subtreeRoot makes a cgroup root whose memory hierarchy is a bind mount of the group
// dir (as a container's /sys/fs/cgroup/memory is a bind of its own group on v1 hosts).
func subtreeRoot(t *testing.T, dir string) string {
	t.Helper()
	root := t.TempDir()
	mnt := filepath.Join(root, "memory")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dir, mnt, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	return root
}

// The red team's: a cgroup root whose memory mount is a subtree (a container's view, or a
// non-default Native.CgroupRoot). /proc/self/cgroup names groups from the hierarchy's
// root, not the mount's, so the warming joins two different bases and, when a group exists
// at the joined path, moves airlock into it: a group it was not in.
func TestWarmingUnderASubtreeMountStaysInItsGroup(t *testing.T) {
	own, dir := ownMemoryGroup(t)
	root := subtreeRoot(t, dir)
	// The group the joined path names: dir + own, a child group of dir's.
	decoy := filepath.Join(dir, own)
	if err := os.MkdirAll(decoy, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		moveSelf(t, dir)
		for d := decoy; d != dir && strings.HasPrefix(d, dir); d = filepath.Dir(d) {
			_ = os.Remove(d)
		}
	})
	done, end := native.StartWarmingForTest(root)
	if done == nil {
		return // no warming where the path names another group: safe
	}
	time.Sleep(30 * time.Millisecond)
	end()
	if !inGroup(dir) {
		t.Errorf("the warming moved airlock out of its memory group %s (now in decoy %s: %v)", dir, decoy, inGroup(decoy))
	}
}

// The red team's: airlock in a cgroup namespace rooted below the memory mount's root. The
// namespace shows airlock's group as "/", which the warming takes as the mount's root
// group: with the default /sys/fs/cgroup that is the hierarchy's root, outside airlock's
// memory limit. Here the mount is a bind of the test's own group, so the escape stays
// inside it: from dir/rt4ns up to dir.
func TestWarmingInACgroupNamespaceStaysInItsGroup(t *testing.T) {
	_, dir := ownMemoryGroup(t)
	root := subtreeRoot(t, dir)
	nsGroup := filepath.Join(dir, "rt4ns")
	if err := os.Mkdir(nsGroup, 0o755); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		moveSelf(t, dir)
		_ = os.Remove(nsGroup)
	})
	moveSelf(t, nsGroup)
	started := make(chan bool)
	var end func()
	go func() {
		// This thread alone enters the namespace, rooted at nsGroup; it is never unlocked,
		// so it ends with the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(syscall.CLONE_NEWCGROUP); err != nil {
			t.Logf("unshare: %v", err)
			started <- false
			return
		}
		b, _ := os.ReadFile("/proc/thread-self/cgroup")
		t.Logf("in the namespace, memory is %q", firstLine(string(b), "memory"))
		var done <-chan struct{}
		done, end = native.StartWarmingForTest(root)
		started <- done != nil
	}()
	if !<-started {
		return // no warming where the path names another group: safe
	}
	time.Sleep(30 * time.Millisecond)
	end()
	if !inGroup(nsGroup) {
		t.Errorf("the warming moved airlock out of its memory group %s (into %s: %v)", nsGroup, dir, inGroup(dir))
	}
}

func firstLine(listing, c string) string {
	for _, l := range strings.Split(listing, "\n") {
		if strings.Contains(l, ":"+c+":") || strings.Contains(l, ":"+c+",") || strings.Contains(l, ","+c+":") {
			return l
		}
	}
	return ""
}

// The red team's: the warming names its group by path once and reopens that path every 4 ms for
// up to a second. v1 groups can be renamed while occupied; a group then made at the old
// name (by whoever manages the hierarchy) takes airlock in.
func TestWarmingFollowsItsGroupNotItsOldName(t *testing.T) {
	_, dir := ownMemoryGroup(t)
	old := filepath.Join(dir, "rt4ren")
	renamed := filepath.Join(dir, "rt4ren2")
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		moveSelf(t, dir)
		_ = os.Remove(old)
		_ = os.Remove(renamed)
	})
	moveSelf(t, old)
	done, end := native.StartWarmingForTest(native.DefaultCgroupRoot)
	if done == nil {
		t.Fatal("no warming started")
	}
	if err := os.Rename(old, renamed); err != nil {
		end()
		t.Skipf("rename: %v", err)
	}
	if err := os.Mkdir(old, 0o755); err != nil {
		end()
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	end()
	if !inGroup(renamed) {
		t.Errorf("the warming moved airlock out of its (renamed) group into the new group at its old name: %v", inGroup(old))
	}
}
