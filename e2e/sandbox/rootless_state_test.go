//go:build e2e

package sandbox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// TestRootlessStateDirOfAnotherUser: an ordinary user's airlock keeps its sandboxes' state
// under $XDG_RUNTIME_DIR/airlock and removes, at start, what is listed there. When that
// directory was made by another user first (XDG_RUNTIME_DIR naming a shared directory),
// that user could swap sandboxes/ for a link to any directory of this user's and have its
// airlock remove the files there: the run is refused, saying why, and nothing is removed.
func TestRootlessStateDirOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as two users")
	}
	u := rootlessAccount(t)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	const other = 65534 // the other user
	bin := e2etest.AirlockBinary(t)
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	if err := os.Chmod(filepath.Dir(base), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(base, "home")
	precious := filepath.Join(home, "precious")
	if err := os.MkdirAll(filepath.Join(precious, "project"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(precious, "project", "file")
	if err := os.WriteFile(file, []byte("the user's work\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(precious, "project"), old, old); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{home, precious, filepath.Join(precious, "project"), file} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	// The shared runtime directory (as /tmp is), where the other user made airlock/ first
	// and put in it a link to the user's directory where sandboxes/ goes.
	xdg := filepath.Join(base, "xdg")
	if err := os.Mkdir(xdg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(xdg, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(xdg, "airlock")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(theirs, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(precious, filepath.Join(theirs, "sandboxes")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{theirs, filepath.Join(theirs, "sandboxes")} {
		if err := os.Lchown(p, other, other); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "sandbox", "run", "-T", "--", "true")
	cmd.Env = []string{"AIRLOCK_HOME=" + home, "HOME=" + home, "XDG_RUNTIME_DIR=" + xdg, "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	out, err := cmd.CombinedOutput()
	if _, serr := os.Stat(file); serr != nil {
		t.Errorf("the user's file %s is gone (%v): the airlock removed what the other user's link showed it", file, serr)
	}
	if err == nil || !strings.Contains(string(out), "state directory "+theirs) {
		t.Errorf("airlock sandbox run with the state directory of another user: %v, want a refusal naming %s\n%s", err, theirs, out)
	}
}
