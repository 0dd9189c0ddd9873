package native_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
)

// TestPatchAppliesWithGitAndCarriesEverything: the copy-on-write patch, applied by real
// `git apply` to a copy of the host workspace, reproduces the sandbox's view: text edits,
// binary files, a mode change, missing final newlines, a deleted tree, symlinks, a file that
// replaced a symlink, and names with spaces or a newline. What the sandbox planted to reach
// the host through the patch does not work: a symlink to a host file brings only its target
// path, a FIFO does not block it, and a file name cannot forge patch lines.
func TestPatchAppliesWithGitAndCarriesEverything(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed (scripts/test.sh installs it)")
	}
	canary := filepath.Join(t.TempDir(), "host-secret")
	must(t, os.WriteFile(canary, []byte("airlock-canary-3f9c1e\n"), 0o600))

	ws := t.TempDir()
	for name, body := range map[string]string{
		"edit.txt": "old\nsame\n", "gone.txt": "bye\n", "bin.dat": "\x00\x01old", "script.sh": "echo\n",
		"noeol.txt": "a", "dir/sub/x.txt": "x\n", "dir/y.txt": "y\n", "todir": "a file\n", "tofile/z.txt": "z\n",
	} {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755))
		must(t, os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644))
	}
	must(t, os.Symlink("edit.txt", filepath.Join(ws, "link")))
	host := snapshot(t, ws)

	s := newSandbox(t, sandbox.Options{Workspace: ws, WorkspaceMode: sandbox.WorkspaceCoW})
	script := `set -e
printf 'new\nsame\n' > edit.txt; rm gone.txt; printf '\000\001\002new' > bin.dat; chmod +x script.sh
printf 'b' > noeol.txt; rm -r dir; printf '\000\377' > added.bin; : > empty.txt; ln -s edit.txt newlink
rm link; echo now-a-file > link; echo spaced > 'with space.txt'; printf 'nl\n' > "$(printf 'evil\n+++ bx')"
ln -s ` + canary + ` leak; mkfifo pipe
rm todir; mkdir todir; echo in > todir/f; rm -r tofile; echo now > tofile`
	if res := run(t, s, script); res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	patch, err := s.Patch()
	if !errors.Is(err, sandbox.ErrPatchIncomplete) || !strings.Contains(err.Error(), "pipe") {
		t.Fatalf("Patch: %v, want ErrPatchIncomplete naming the FIFO", err)
	}
	if bytes.Contains(patch, []byte("airlock-canary-3f9c1e")) {
		t.Fatalf("the patch carries the content of a host file the sandbox linked to:\n%s", patch)
	}
	if !bytes.Contains(patch, []byte("# airlock: pipe left out")) {
		t.Errorf("the patch does not say the FIFO was left out:\n%s", patch)
	}
	if snap := snapshot(t, ws); !equalTrees(snap, host) {
		t.Fatalf("the host workspace changed: %v", snap)
	}

	applied := filepath.Join(t.TempDir(), "applied")
	if out, err := exec.Command("cp", "-a", ws, applied).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	pf := filepath.Join(t.TempDir(), "p.diff")
	must(t, os.WriteFile(pf, patch, 0o600))
	apply := exec.Command("git", "apply", "--verbose", pf)
	apply.Dir = applied
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("git apply: %v\n%s\npatch:\n%s", err, out, patch)
	}
	want := map[string]string{
		"edit.txt": "new\nsame\n", "bin.dat": "\x00\x01\x02new", "script.sh": "echo\n", "noeol.txt": "b",
		"added.bin": "\x00\xff", "empty.txt": "", "newlink": "-> edit.txt", "link": "now-a-file\n",
		"with space.txt": "spaced\n", "evil\n+++ bx": "nl\n", "leak": "-> " + canary,
		"todir/f": "in\n", "tofile": "now\n",
	}
	got := snapshot(t, applied)
	if !equalTrees(got, want) {
		t.Errorf("after git apply:\n got %q\nwant %q\npatch:\n%s", got, want, patch)
	}
	if fi, err := os.Stat(filepath.Join(applied, "script.sh")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("script.sh after git apply: %v, %v; want it executable", fi.Mode(), err)
	}
}

// snapshot maps each file under dir to its content and each symlink to "-> target".
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			out[rel] = "-> " + target
			return err
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func equalTrees(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPatchLeavesOutHostRunFiles: a copy-on-write sandbox that creates what host tools run
// or read (direnv's .envrc, an agent's, an editor's and git's settings, a repository of
// its own) gets none of it into the patch: each is named in a '# airlock:' line, the
// error says the patch leaves changes out, the change listing marks them, and git apply
// on the host takes the patch and makes only the ordinary change.
func TestPatchLeavesOutHostRunFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("native sandboxes need root")
	}
	ws := t.TempDir()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=h", "-c", "user.email=h@example.com", "-c", "init.defaultBranch=main", "-c", "safe.directory=*"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	must(t, os.WriteFile(filepath.Join(ws, "README"), []byte("hello\n"), 0o644))
	git(ws, "init", "-q")
	git(ws, "add", "README")
	git(ws, "commit", "-q", "-m", "one")
	s := newSandbox(t, sandbox.Options{Workspace: ws, WorkspaceMode: sandbox.WorkspaceCoW})
	hostRun := []string{".envrc", ".claude/settings.json", ".vscode/tasks.json", ".gitconfig", ".gitmodules",
		".mcp.json", "sub/.git/config", "sub/.git/HEAD", ".git/info/evil", "deep/.GIT/config"}
	script := "cd /workspace && echo ok > ordinary.txt"
	for _, p := range hostRun {
		script += " && mkdir -p $(dirname " + p + ") && echo 'touch /tmp/pwned' > " + p
	}
	if res := run(t, s, script); res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	var buf strings.Builder
	err := s.WritePatch(&buf)
	patch := buf.String()
	if !errors.Is(err, sandbox.ErrPatchIncomplete) {
		t.Errorf("patch error %v, want ErrPatchIncomplete", err)
	}
	for _, p := range hostRun {
		if strings.Contains(patch, "b/"+p) {
			t.Errorf("the patch carries %s:\n%s", p, patch)
		}
		if !strings.Contains(patch, "# airlock: "+p+" left out") || err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s is not named as left out (error %v):\n%s", p, err, patch)
		}
	}
	changes, _ := s.Changes()
	for _, c := range changes {
		want := !strings.HasPrefix(c.Path, "ordinary")
		if c.Path == "deep/" || c.Path == "sub/" || c.Path == ".claude/" || c.Path == ".vscode/" {
			want = false
		}
		if c.Protected != want && !strings.HasSuffix(c.Path, "/") {
			t.Errorf("change %s: protected %v, want %v", c.Path, c.Protected, want)
		}
	}
	pf := filepath.Join(t.TempDir(), "p.diff")
	must(t, os.WriteFile(pf, []byte(patch), 0o644))
	git(ws, "apply", "--check", pf)
	git(ws, "apply", pf)
	if st := git(ws, "status", "--porcelain", "--untracked-files=all"); st != "?? ordinary.txt\n" {
		t.Errorf("after git apply, the host has:\n%s", st)
	}
}
