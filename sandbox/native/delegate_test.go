package native

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
)

// TestDelegatedLimitsWriteCgroupFiles: a rootless sandbox's delegated cgroup gets the
// limits of a root one for each controller it has, and no file for one it lacks (a
// directory stands for the cgroup).
func TestDelegatedLimitsWriteCgroupFiles(t *testing.T) {
	o := sandbox.Options{Memory: 64 << 20, Pids: 50, CPUs: 1.5}
	for _, tc := range []struct {
		name        string
		controllers []string
		want        map[string]string // file → content; "" absent
	}{
		{"all", []string{"memory", "pids", "cpu"}, map[string]string{
			"memory.max": "67108864", "memory.swap.max": "0", "pids.max": "52", "cpu.max": "150000 100000"}},
		{"pids only", []string{"pids"}, map[string]string{
			"memory.max": "", "memory.swap.max": "", "pids.max": "52", "cpu.max": ""}},
		{"none", nil, map[string]string{"memory.max": "", "pids.max": "", "cpu.max": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cg := &cgroups{unified: dir, v2: map[string]bool{}}
			for _, c := range tc.controllers {
				cg.v2[c] = true
			}
			if err := cg.limitDelegated(o); err != nil {
				t.Fatal(err)
			}
			for file, want := range tc.want {
				b, err := os.ReadFile(filepath.Join(dir, file))
				switch {
				case want == "" && err == nil:
					t.Errorf("%s written (%q) for a controller the group lacks", file, b)
				case want != "" && string(b) != want:
					t.Errorf("%s = %q (%v), want %q", file, b, err, want)
				}
			}
		})
	}
}

// TestDelegatedUnenforcedListsOnlyWhatTheParentLacks: with a parent offering every
// controller nothing of memory, CPU or pids is listed; with one offering none, each limit
// names the parent that lacks its controller.
func TestDelegatedUnenforcedListsOnlyWhatTheParentLacks(t *testing.T) {
	o := sandbox.Options{Memory: 64 << 20, Pids: 50, CPUs: 1}
	full := &delegation{parent: "/cg/p", controllers: map[string]bool{"memory": true, "pids": true, "cpu": true}}
	got := strings.Join(rootlessUnenforced(o, full), "\n")
	for _, no := range []string{"memory", "CPU", "RLIMIT_NPROC", "peak"} {
		if strings.Contains(got, no) {
			t.Errorf("with every controller delegated, the list mentions %q:\n%s", no, got)
		}
	}
	empty := &delegation{parent: "/cg/p", controllers: map[string]bool{}}
	got = strings.Join(rootlessUnenforced(o, empty), "\n")
	for _, want := range []string{
		"memory limit of 67108864 bytes not enforced (the cgroup parent /cg/p offers no memory controller)",
		"CPU limit of 1 cores not enforced (the cgroup parent /cg/p offers no cpu controller)",
		"RLIMIT_NPROC (50)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("list lacks %q:\n%s", want, got)
		}
	}
}

func TestSystemdUserServiceAndCommonAncestor(t *testing.T) {
	for _, tc := range []struct {
		path string
		uid  int
		want string
	}{
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/term.scope", 1000, "/user.slice/user-1000.slice/user@1000.service"},
		{"/user.slice/user-1000.slice/user@1000.service", 1000, "/user.slice/user-1000.slice/user@1000.service"},
		{"/user.slice/user-1000.slice/session-3.scope", 1000, ""},                     // not delegated
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope", 1001, ""}, // another user's
		{"/user.slice/user-1000.slice/user@1000.serviceX/a", 1000, ""},
		{"/", 0, ""},
	} {
		if got := systemdUserService(tc.path, tc.uid); got != tc.want {
			t.Errorf("systemdUserService(%q, %d) = %q, want %q", tc.path, tc.uid, got, tc.want)
		}
	}
	for _, tc := range [][3]string{
		{"/a/b/session", "/a/b", "/a/b"},
		{"/", "/a/b", "/"},
		{"/a/bc", "/a/b", "/a"},
		{"/x", "/y", "/"},
	} {
		if got := commonCgroup(tc[0], tc[1]); got != tc[2] {
			t.Errorf("commonCgroup(%q, %q) = %q, want %q", tc[0], tc[1], got, tc[2])
		}
	}
}

// TestReadOnlyPathUnderAMaskedPathIsRefused: a read-only path at or beneath a masked path
// (directly or through a link) would show what the mask hides; one beside it, or one
// above it (whose view of the masked path is covered), is fine.
func TestReadOnlyPathUnderAMaskedPathIsRefused(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	for _, d := range []string{filepath.Join(secret, "sub"), filepath.Join(dir, "other")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(secret, "sub"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	masks := []string{secret, filepath.Join(dir, "missing")}
	for _, tc := range []struct {
		ro      string
		refused bool
	}{
		{secret, true},
		{filepath.Join(secret, "sub"), true},
		{filepath.Join(dir, "link"), true},
		{filepath.Join(dir, "other"), false},
		{dir, false},
		{filepath.Join(dir, "secretive"), false},
	} {
		err := checkMaskedBinds([]string{tc.ro}, masks)
		if (err != nil) != tc.refused {
			t.Errorf("read-only %s: got %v, want refused %v", tc.ro, err, tc.refused)
		}
		if err != nil && (!strings.Contains(err.Error(), "under the masked path "+secret) || !strings.Contains(err.Error(), "sandbox.unmask_paths")) {
			t.Errorf("read-only %s: error %q does not name the mask and how to take it off", tc.ro, err)
		}
	}
}

// TestDelegateRefusesAnOccupiedCgroup: delegating an existing cgroup that holds child
// cgroups or processes (another's) is refused and hands nothing over: the user would own
// its cgroup.procs and could move those processes out of their cgroups. An empty one, or
// one that is the user's already, is delegated.
func TestDelegateRefusesAnOccupiedCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	v2 := CgroupV2Mount()
	if v2 == "" {
		t.Skip("no cgroup v2 hierarchy")
	}
	const user = 65534
	dir := filepath.Join(v2, "airlock-unit-redelegate-"+strconv.Itoa(os.Getpid()))
	child := filepath.Join(dir, "child")
	if err := os.MkdirAll(child, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(child); _ = os.Remove(dir) })
	if _, err := DelegateCgroup(dir, user, user); err == nil || !strings.Contains(err.Error(), "holds processes or child cgroups") {
		t.Errorf("delegating a cgroup with a child cgroup: %v, want a refusal", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "cgroup.procs"), &st); err != nil || st.Uid != 0 {
		t.Errorf("cgroup.procs of the refused cgroup: owner %d (%v), want root's still", st.Uid, err)
	}
	if err := os.Remove(child); err != nil {
		t.Fatal(err)
	}
	if _, err := DelegateCgroup(dir, user, user); err != nil {
		t.Errorf("delegating an empty cgroup: %v", err)
	}
	if _, err := DelegateCgroup(dir, user, user); err != nil {
		t.Errorf("delegating it again to the same user: %v", err)
	}
}

// TestDelegateRefusesAPathThroughALink: root delegating a cgroup named through a symbolic
// link (which a user who can write a directory on the path could swap between a check and
// the chown) is refused, and nothing is made or handed over through the link.
func TestDelegateRefusesAPathThroughALink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	v2 := CgroupV2Mount()
	if v2 == "" {
		t.Skip("no cgroup v2 hierarchy")
	}
	const user = 65534
	link := filepath.Join(t.TempDir(), "cg")
	if err := os.Symlink(v2, link); err != nil {
		t.Fatal(err)
	}
	name := "airlock-unit-link-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { _ = os.Remove(filepath.Join(v2, name)) })
	if _, err := DelegateCgroup(filepath.Join(link, name), user, user); err == nil {
		t.Error("delegating a cgroup named through a link: accepted, want a refusal")
	}
	if _, err := os.Stat(filepath.Join(v2, name)); !os.IsNotExist(err) {
		t.Errorf("the cgroup was made through the link: %v", err)
	}
	// The same name without the link is delegated.
	if _, err := DelegateCgroup(filepath.Join(v2, name), user, user); err != nil {
		t.Fatalf("delegating %s: %v", filepath.Join(v2, name), err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(v2, name, "cgroup.procs"), &st); err != nil || st.Uid != user {
		t.Errorf("cgroup.procs of the delegated cgroup: owner %d (%v), want %d", st.Uid, err, user)
	}
}
