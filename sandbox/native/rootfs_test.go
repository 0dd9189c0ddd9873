package native_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

// busyboxRoot is a minimal root file system (a static busybox and its links, as
// deploy/build-images.sh makes one) with hostile bits an image may carry: /etc/passwd
// naming a host account for uid 1000, /tmp and /etc/resolv.conf links to host paths.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("needs busybox-static")
	}
	if out, _ := exec.Command("file", bb).Output(); strings.Contains(string(out), "dynamically") {
		t.Skip("needs a static busybox")
	}
	root := t.TempDir()
	for _, d := range []string{"bin", "etc", "var/lib/dpkg"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"sh", "id", "cat", "ls", "touch", "echo", "mkdir", "test"} {
		os.Symlink("busybox", filepath.Join(root, "bin", app))
	}
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nhostuser:x:1000:1000::/home/hostuser:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), []byte("Package: busybox\n"), 0o644)
	os.Symlink("/etc", filepath.Join(root, "tmp"))
	os.Symlink("/etc/shadow", filepath.Join(root, "etc/resolv.conf"))
	return root
}

func TestImageRoot(t *testing.T) {
	root := busyboxRoot(t)
	ws := t.TempDir()
	s := newSandbox(t, sandbox.Options{Rootfs: root, Workspace: ws, CABundle: []byte("-----CA-----\n")})
	res := run(t, s, `id; cat /etc/passwd; echo ---; cat /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /run/airlock/ca-bundle.pem
		echo ---; cat /var/lib/dpkg/status; cat /etc/hosts
		touch /x 2>/dev/null && echo ROOT-WRITABLE; touch /etc/passwd 2>/dev/null && echo ETC-WRITABLE
		echo t > /tmp/t && cat /tmp/t; echo h > $HOME/h && cat $HOME/h; echo w > /workspace/w && cat /workspace/w
		test -e /etc/shadow && echo SHADOW; cat /etc/resolv.conf`)
	out := string(res.Stdout)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s %s", res.ExitCode, out, res.Stderr)
	}
	for _, want := range []string{"uid=1000(sandbox) gid=1000(sandbox)", "sandbox:x:1000:1000:airlock sandbox:/home/sandbox:/bin/sh",
		"-----CA-----\n-----CA-----\n-----CA-----\n", "Package: busybox", "127.0.1.1\t" + s.ID(), "t\nh\nw\n", "nameserver 127.0.0.1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"hostuser", "ROOT-WRITABLE", "ETC-WRITABLE", "SHADOW", "root:$"} {
		if strings.Contains(out, bad) {
			t.Errorf("output has %q:\n%s", bad, out)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/hosts")); err == nil {
		t.Error("the sandbox's files were written into the image")
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "w")); string(b) != "w\n" {
		t.Errorf("workspace file = %q", b)
	}
}

func TestHostRootIdentityAndMasks(t *testing.T) {
	// Read-only paths under /tmp, /run, /home and /var are shadowed by the sandbox's own:
	// a directory at the host's root.
	secrets, err := os.MkdirTemp("/", "airlock-mask-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(secrets) })
	os.Chmod(secrets, 0o755)
	os.MkdirAll(filepath.Join(secrets, "home/alice/.aws"), 0o755)
	os.WriteFile(filepath.Join(secrets, "home/alice/.aws/credentials"), []byte("CANARY-AWS"), 0o644)
	os.WriteFile(filepath.Join(secrets, "token"), []byte("CANARY-TOKEN"), 0o644)
	os.WriteFile(filepath.Join(secrets, "tool"), []byte("tool-ok"), 0o644)
	ws := filepath.Join(secrets, "home/alice/proj")
	os.MkdirAll(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "f"), []byte("ws-ok"), 0o644)
	s := newSandbox(t, sandbox.Options{ReadOnlyPaths: []string{secrets}, Workspace: ws,
		MaskPaths: []string{filepath.Join(secrets, "home"), filepath.Join(secrets, "token")}})
	res := run(t, s, "id; cat /etc/group | grep 1000; cat "+secrets+"/tool "+secrets+"/token "+secrets+"/home/alice/.aws/credentials /workspace/f 2>&1; ls "+secrets+"/home")
	out := string(res.Stdout)
	for _, want := range []string{"uid=1000(sandbox) gid=1000(sandbox)", "sandbox:x:1000:", "tool-ok", "ws-ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "CANARY") {
		t.Errorf("a masked path was read:\n%s", out)
	}
}

// TestCreateRefusesReadOnlyPathUnderMask: a sandbox asked to bind a path the mask list
// hides is not made (the bind would show it: nothing covers a bind from above).
func TestCreateRefusesReadOnlyPathUnderMask(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("native sandboxes need root (CI runs as root)")
	}
	secrets := t.TempDir()
	inner := filepath.Join(secrets, "aws")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := sandbox.New(context.Background(), sandbox.Options{ID: "sbx-ro-under-mask", ReadOnlyPaths: []string{inner},
		MaskPaths: []string{secrets}, Backend: &native.Native{StateDir: testState}})
	if err == nil || !strings.Contains(err.Error(), "under the masked path") {
		t.Fatalf("New: %v; want a refusal naming the masked path", err)
	}
	if _, err := os.Stat(filepath.Join(testState, "sandboxes", "sbx-ro-under-mask")); !os.IsNotExist(err) {
		t.Errorf("state left behind (stat: %v)", err)
	}
}
