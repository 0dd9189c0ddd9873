package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestImageEnvUnderTheSandboxs(t *testing.T) {
	o := Options{CABundle: []byte("x"), Env: []string{"FOO=user", "PATH=/user/bin"},
		Image: &ImageConfig{Env: []string{"PATH=/opt/app/bin:/usr/bin", "HTTP_PROXY=http://evil:1", "SSL_CERT_FILE=/img.pem", "HOME=/root", "LANG_APP=img", "FOO=img"}}}
	env := baseEnv(o)
	for _, want := range []string{"PATH=/user/bin", "HTTP_PROXY=http://127.0.0.1:3128", "SSL_CERT_FILE=" + CABundlePath,
		"HOME=" + HomeDir, "LANG_APP=img", "FOO=user"} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %s: %v", want, env)
		}
	}
	for _, kv := range env {
		if strings.Contains(kv, "evil") || kv == "HOME=/root" || kv == "FOO=img" {
			t.Errorf("image entry %s won over the sandbox's own: %v", kv, env)
		}
	}
	o.Env = nil
	if env := baseEnv(o); !slices.Contains(env, "PATH=/opt/app/bin:/usr/bin") {
		t.Errorf("the image's PATH is not used: %v", env)
	}
	if env := baseEnv(Options{}); !slices.Contains(env, "PATH="+DefaultPath) {
		t.Errorf("no image: PATH is not the default: %v", env)
	}
}

func imageRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.MkdirAll(filepath.Join(root, "srv/app"), 0o755)
	os.Symlink("/srv/app", filepath.Join(root, "app"))
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\nweb:x:33:33::/var/www:/bin/sh\n"), 0o644)
	return root
}

func TestImageUID(t *testing.T) {
	root := imageRoot(t)
	for _, c := range []struct {
		user string
		uid  int
		err  string
	}{
		{"node", 1000, ""}, {"node:node", 1000, ""}, {"1000:1000", 1000, ""}, {"root", 0, ""},
		{"web", 33, ""}, {"4242", 4242, ""}, {"ghost", 0, "not in the image's /etc/passwd"},
	} {
		uid, err := ImageUID(root, c.user)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: got %d, %v; want an error saying %q", c.user, uid, err, c.err)
			}
			continue
		}
		if err != nil || uid != c.uid {
			t.Errorf("%s: got %d, %v; want %d", c.user, uid, err, c.uid)
		}
	}
	// The host's /etc/passwd is never read: a root without one names no user.
	if _, err := ImageUID(t.TempDir(), "root"); err == nil || !strings.Contains(err.Error(), "no /etc/passwd") {
		t.Errorf("image without passwd: %v", err)
	}
}

func TestCheckImage(t *testing.T) {
	root := imageRoot(t)
	for _, c := range []struct {
		ic  ImageConfig
		err string
	}{
		{ImageConfig{User: "node", WorkingDir: "/srv/app"}, ""},
		{ImageConfig{User: "root", WorkingDir: "/app"}, ""}, // a link within the image
		{ImageConfig{User: "web"}, "is uid 33"},
		{ImageConfig{WorkingDir: "/nonexistent"}, "not a directory of the image"},
		{ImageConfig{WorkingDir: "/etc/passwd"}, "not a directory of the image"},
		{ImageConfig{Env: []string{"=x"}}, "want K=V"},
	} {
		err := checkImage(Options{Rootfs: root, Image: &c.ic})
		if (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%+v: got %v, want %q", c.ic, err, c.err)
		}
	}
	if err := checkImage(Options{Rootfs: "/", Image: &ImageConfig{}}); err == nil {
		t.Error("an image configuration on the host's root was accepted")
	}
}
