package session_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox/image"
	"github.com/airlock-proxy/airlock/session"
)

// busyboxRoot makes a root file system of a static busybox under dir, with its own
// /etc/passwd (which the sandbox's covers).
func busyboxRoot(t *testing.T, dir string) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("needs busybox-static")
	}
	if out, _ := exec.Command("file", "-L", bb).Output(); !strings.Contains(string(out), "statically") {
		t.Skip("needs a static busybox")
	}
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "etc", "srv/app"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"sh", "cat", "ls", "mv", "rm", "id", "echo", "pwd"} {
		os.Symlink("busybox", filepath.Join(root, "bin", app))
	}
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nimageuser:x:1000:1000::/home/imageuser:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/image-marker"), []byte("from-the-image\n"), 0o644)
	return root
}

// TestNativeRootfs: a native session on a root of its own, which must be under
// sessions.rootfs_roots: the issuer's token is not the host's root, and without the bound it
// could make any host directory a sandbox's /.
func TestNativeRootfs(t *testing.T) {
	roots := t.TempDir()
	root := busyboxRoot(t, roots)
	outside := busyboxRoot(t, t.TempDir())
	link := filepath.Join(roots, "link")
	if err := os.Symlink(filepath.Dir(outside), link); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *session.Options) {
		o.RootfsRoots = []string{roots}
		o.Images = &image.Cache{Dir: filepath.Join(t.TempDir(), "images")}
	})
	info := e.create(t, session.Spec{Rootfs: root})
	out, errOut, res, _ := e.exec(t, info.ID, session.ExecRequest{Argv: []string{"sh", "-c", "cat /etc/image-marker /etc/passwd; id; pwd; test -e /usr/bin/apt && echo HOST-ROOT; true"}})
	if res.ExitCode != 0 {
		t.Fatalf("exec: %+v %s", res, errOut)
	}
	for _, want := range []string{"from-the-image", "sandbox:x:1000:1000", "uid=1000(sandbox)", "/home/sandbox"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "imageuser") || strings.Contains(out, "HOST-ROOT") {
		t.Errorf("the image's passwd or the host's root shows:\n%s", out)
	}
	if code, b := e.do(t, "PUT", "/v1/sandboxes/"+info.ID+"/files?path=/tmp/f", []byte("put-ok")); code != 204 {
		t.Fatalf("put: %d %s", code, b)
	}
	if code, b := e.do(t, "GET", "/v1/sandboxes/"+info.ID+"/files?path=/tmp/f", nil); code != 200 || string(b) != "put-ok" {
		t.Errorf("get: %d %q", code, b)
	}

	for _, c := range []struct {
		name string
		spec session.Spec
		says string
	}{
		{"rootfs outside the roots", session.Spec{Rootfs: outside}, "not under sessions.rootfs_roots"},
		{"rootfs linked outside the roots", session.Spec{Rootfs: filepath.Join(link, "rootfs")}, "not under sessions.rootfs_roots"},
		{"the host's root", session.Spec{Rootfs: "/"}, "not under sessions.rootfs_roots"},
		{"relative rootfs", session.Spec{Rootfs: "rootfs"}, "absolute"},
		{"rootfs not a directory", session.Spec{Rootfs: filepath.Join(root, "etc/passwd")}, "not an existing directory"},
		{"image file outside the roots", session.Spec{Image: "/etc/passwd"}, "not under sessions.rootfs_roots"},
		{"relative image path", session.Spec{Image: "./image.tar"}, "must be absolute"},
		{"rootfs and image", session.Spec{Rootfs: root, Image: "busybox"}, "not both"},
		{"rootfs on docker", session.Spec{Backend: "docker", Image: "x", Rootfs: root}, "native backend's"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, b := e.do(t, "POST", "/v1/sandboxes", c.spec)
			if code != 400 || !strings.Contains(string(b), c.says) {
				t.Errorf("got %d %s, want 400 saying %q", code, b, c.says)
			}
		})
	}

	// No roots configured: refused, saying which setting to set.
	e2 := newEnv(t, nil)
	if code, b := e2.do(t, "POST", "/v1/sandboxes", session.Spec{Rootfs: root}); code != 400 || !strings.Contains(string(b), "set sessions.rootfs_roots") {
		t.Errorf("no roots: %d %s", code, b)
	}
	if code, b := e2.do(t, "POST", "/v1/sandboxes", session.Spec{Image: "busybox"}); code != 400 || !strings.Contains(string(b), "unpacks no images") {
		t.Errorf("no image cache: %d %s", code, b)
	}
}
