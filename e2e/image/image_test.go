//go:build e2e

// Package image_test runs `airlock sandbox run` with a root of the sandbox's own: a busybox
// image (from Debian's busybox-static, as deploy/build-images.sh makes one) given as a
// directory (--rootfs), a `docker save` tarball and an image of the local Docker engine
// (--image); and the host's root with its secrets masked. Run as root:
//
//	go test -tags e2e -count=1 ./e2e/image/
package image_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

func TestMain(m *testing.M) {
	if code, ran := e2etest.RunRootless(); ran { // AIRLOCK_E2E_ROOTLESS=1: as airlock-test
		os.Exit(code)
	}
	code := m.Run()
	e2etest.RemoveAirlockBinary()
	os.Exit(code)
}

const canary = "airlock-image-canary-7d1e"

// busyboxRoot makes a busybox root file system directory.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("needs busybox-static (apt-get install busybox-static)")
	}
	if out, _ := exec.Command("file", bb).Output(); bytes.Contains(out, []byte("dynamically")) {
		t.Skip("needs a static busybox")
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"bin", "etc", "var/lib/dpkg"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "bin/busybox"), b, 0o755)
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, app := range strings.Fields(string(list)) {
		if app != "busybox" {
			os.Symlink("busybox", filepath.Join(root, "bin", app))
		}
	}
	// An image's own passwd names uid 1000: the sandbox's must win.
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nimageuser:x:1000:1000::/home/imageuser:/bin/sh\n"), 0o644)
	return root
}

// dockerImage imports root into the local Docker engine as a one-layer image and returns
// its reference and a `docker save` tarball of it.
func dockerImage(t *testing.T, root string) (string, string) {
	t.Helper()
	ref := importImage(t, root, "busybox")
	saved := filepath.Join(t.TempDir(), "image.tar")
	if out, err := exec.Command("docker", "save", "-o", saved, ref).CombinedOutput(); err != nil {
		t.Fatalf("docker save: %v\n%s", err, out)
	}
	return ref, saved
}

// upstream serves plain HTTP on the host's loopback: what the sandbox reaches through the
// proxy only.
func upstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello-through-proxy")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// airlock runs `airlock sandbox run` with home as AIRLOCK_HOME and a config allowing GET
// /allowed* on the upstream at addr.
func airlock(t *testing.T, home, addr string, args ...string) (int, string) {
	t.Helper()
	host, _, _ := net.SplitHostPort(addr)
	policyDir := filepath.Join(home, "policy")
	os.MkdirAll(policyDir, 0o700)
	os.WriteFile(filepath.Join(policyDir, "policy.rego"), []byte(strings.ReplaceAll(e2etest.UpstreamPolicy, `"upstream.test"`, `"`+host+`"`)), 0o600)
	cfg := filepath.Join(home, "airlock.yaml")
	os.WriteFile(cfg, []byte("policy: "+policyDir+"\nallow_private: [\""+host+"/32\"]\n"), 0o600)
	cmd := exec.Command(e2etest.AirlockBinary(t), append([]string{"sandbox", "run", "--config", cfg}, args...)...)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// inside is what each image sandbox runs: its identity, files, writes and a request.
func inside(addr string) string {
	return `id; echo ---; cat /etc/passwd; echo ---
test -s /etc/ssl/certs/ca-certificates.crt && grep -q "BEGIN CERTIFICATE" /run/airlock/ca-bundle.pem && echo CA-PRESENT
echo "SSL_CERT_FILE=$SSL_CERT_FILE"
touch /rootwrite 2>/dev/null && echo ROOT-WRITABLE; touch /etc/x 2>/dev/null && echo ETC-WRITABLE
echo tmp-ok > /tmp/t && cat /tmp/t; echo home-ok > "$HOME/h" && cat "$HOME/h"
wget -q -O - http://` + addr + `/allowed/x; echo
wget -q -O - http://` + addr + `/denied 2>&1 | grep -q hello-through-proxy && echo DENIED-REACHED
ls /root /home 2>/dev/null | grep -q ` + canary + ` && echo HOST-HOME-SEEN; true`
}

func checkImageRun(t *testing.T, code int, out string) {
	t.Helper()
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"uid=1000(sandbox) gid=1000(sandbox)", "sandbox:x:1000:1000:airlock sandbox:/home/sandbox:/bin/sh",
		"CA-PRESENT", "SSL_CERT_FILE=/run/airlock/ca-bundle.pem", "tmp-ok", "home-ok", "hello-through-proxy"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"imageuser", "ROOT-WRITABLE", "ETC-WRITABLE", "DENIED-REACHED", "HOST-HOME-SEEN"} {
		if strings.Contains(out, bad) {
			t.Errorf("output has %q:\n%s", bad, out)
		}
	}
}

func TestImageSandboxes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	root := busyboxRoot(t)
	ref, saved := dockerImage(t, root)
	addr := upstream(t)
	home := t.TempDir()
	for _, c := range []struct{ name, flag, val string }{
		{"rootfs directory", "--rootfs", root},
		{"docker save tarball", "--image", saved},
		{"docker engine image", "--image", ref},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := airlock(t, home, addr, c.flag, c.val, "--", "sh", "-c", inside(addr))
			checkImageRun(t, code, out)
		})
	}
	// The tarball and the engine's image are one image, unpacked once.
	entries, _ := os.ReadDir(filepath.Join(home, "images", "sha256"))
	if len(entries) != 1 {
		t.Errorf("cache holds %d images; want the one, unpacked once", len(entries))
	}
	if left, _ := filepath.Glob(filepath.Join(home, "images", "*")); len(left) != 1 {
		t.Errorf("cache directory holds %v; want only sha256/", left)
	}
}

// TestRootlessImageRootMounts: a root of its own (here a directory) works for an ordinary
// user too. The overlay of a rootless sandbox is mounted in a user namespace, where the
// kernel uses user.overlay xattrs and refuses redirect_dir=off ("conflicting options");
// the root mode's test above would not see that. Run with AIRLOCK_E2E_ROOTLESS=1 (as
// root it is the root mode's rootfs case again).
func TestRootlessImageRootMounts(t *testing.T) {
	root, addr := busyboxRoot(t), upstream(t)
	code, out := airlock(t, t.TempDir(), addr, "--rootfs", root, "--", "sh", "-c", inside(addr))
	checkImageRun(t, code, out)
}

func TestHostRootMasksSecrets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	// Canaries where a host keeps secrets: /root, /home, /etc/ssh. And a workspace under
	// /root, which must still be mounted.
	ws, err := os.MkdirTemp("/root", "airlock-e2e-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	os.WriteFile(filepath.Join(ws, "f"), []byte("workspace-ok"), 0o644)
	var canaries []string
	for _, dir := range []string{"/root", "/home", "/etc/ssh"} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, canary)
		if err := os.WriteFile(p, []byte(canary), 0o644); err != nil {
			t.Fatal(err)
		}
		canaries = append(canaries, p)
		t.Cleanup(func() { os.Remove(p) })
	}
	home := t.TempDir()
	code, out := airlock(t, home, upstream(t), "--workspace", ws, "--", "sh", "-c",
		"id; cat /workspace/f; echo; cat "+strings.Join(canaries, " ")+" 2>&1; ls /etc/ssh /root /home 2>&1; test -e /etc/ssl/certs/ca-certificates.crt && echo CERTS-OK")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"uid=1000(sandbox)", "workspace-ok", "CERTS-OK"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, p := range canaries {
		if strings.Contains(out, canary+"\n") || strings.Contains(out, canary+canary) || !strings.Contains(out, p+": No such file") {
			t.Errorf("%s readable inside, or not reported missing:\n%s", p, out)
		}
	}
	// The control: with the mask lifted (sandbox.unmask_paths), /etc/ssh's canary shows.
	cfgLifted := filepath.Join(home, "lifted.yaml")
	os.WriteFile(cfgLifted, []byte("sandbox:\n  unmask_paths: [/etc/ssh]\n"), 0o600)
	cmd := exec.Command(e2etest.AirlockBinary(t), "sandbox", "run", "--config", cfgLifted, "--", "cat", "/etc/ssh/"+canary)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home)
	if b, err := cmd.Output(); err != nil || string(b) != canary {
		t.Errorf("with /etc/ssh unmasked: %q, %v; want the canary (the control)", b, err)
	}
}
