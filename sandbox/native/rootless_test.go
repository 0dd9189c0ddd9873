package native

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
)

// TestRootlessUnenforcedNamesEachLimit: the list a rootless sandbox reports names the memory
// limit with its value, a CPU limit only when one was asked for, and the pids bound it
// enforces instead of a cgroup.
func TestRootlessUnenforcedNamesEachLimit(t *testing.T) {
	got := strings.Join(RootlessUnenforced(sandbox.Options{Memory: 64 << 20, Pids: 50}), "\n")
	for _, want := range []string{"memory limit of 67108864 bytes not enforced", "RLIMIT_NPROC (50)", "supplementary groups"} {
		if !strings.Contains(got, want) {
			t.Errorf("unenforced list lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "CPU") {
		t.Errorf("a CPU limit nobody asked for is listed:\n%s", got)
	}
	got = strings.Join(RootlessUnenforced(sandbox.Options{CPUs: 1.5}), "\n")
	if !strings.Contains(got, "CPU limit of 1.5 cores not enforced") || !strings.Contains(got, "RLIMIT_NPROC (1024)") {
		t.Errorf("with --cpus 1.5 and default pids:\n%s", got)
	}
}

// TestCheckPrivateDir: a rootless airlock's state directory must be its user's alone, on
// a path no other user can redirect; a directory another user made (or may write), a link,
// or one beneath a directory another user may change is refused.
func TestCheckPrivateDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make directories of another user")
	}
	const other = 65534
	base := t.TempDir()
	mk := func(p string, mode os.FileMode, uid int) string {
		t.Helper()
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := mk(filepath.Join(base, "ok"), 0o700, 0)
	theirs := mk(filepath.Join(base, "theirs"), 0o777, other)
	mine := mk(filepath.Join(theirs, "mine"), 0o700, 0)
	writable := mk(filepath.Join(base, "writable"), 0o777, 0)
	open := mk(filepath.Join(base, "open"), 0o777, 0)
	under := mk(filepath.Join(open, "under"), 0o700, 0)
	sticky := mk(filepath.Join(base, "sticky"), 0o777|os.ModeSticky, 0)
	inSticky := mk(filepath.Join(sticky, "mine"), 0o700, 0)
	link := filepath.Join(base, "link")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		want string // "" accepted, else a part of the error
	}{
		{ok, ""},
		{inSticky, ""},
		{theirs, "is owned by uid 65534"},
		{mine, "which another user may change"},
		{writable, "with mode 0777"},
		{under, "which another user may change"},
		{link, "not a directory"},
	} {
		err := CheckPrivateDir(c.dir)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckPrivateDir(%s): %v, want %q", c.dir, err, c.want)
		}
	}
}
