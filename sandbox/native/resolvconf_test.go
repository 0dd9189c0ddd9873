//go:build linux

package native

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The sandbox's resolver configuration is airlock's whatever the root file system has at
// /etc/resolv.conf: a file is covered, a link into /run gets its target written there.
func TestResolvConfPlan(t *testing.T) {
	cases := []struct {
		name  string
		setup func(rootfs string)
		want  string // the op that shows ResolvConf at /etc/resolv.conf
	}{
		{"file", func(r string) {
			os.WriteFile(filepath.Join(r, "etc/resolv.conf"), []byte("nameserver 10.0.0.2\n"), 0o644)
		},
			"bind resolver configuration"},
		{"link into /run", func(r string) {
			os.Symlink("../run/systemd/resolve/stub-resolv.conf", filepath.Join(r, "etc/resolv.conf"))
		},
			"write resolver configuration at /run/systemd/resolve/stub-resolv.conf"},
		{"none", func(string) {}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rootfs := t.TempDir()
			os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755)
			c.setup(rootfs)
			ops, err := planRoot(&rootConfig{Rootfs: rootfs, RootPaths: []string{"etc"}, NewRoot: "/new", Resolver: true,
				TmpSize: 1 << 20, Inodes: 100, IdmapFD: -1})
			if err != nil {
				t.Fatal(err)
			}
			var found, wrote bool
			for _, op := range ops {
				if op.Kind == "write" && op.Args[0] == "/new"+resolvConfPath && op.Args[1] == ResolvConf {
					wrote = true
				}
				if c.want != "" && strings.HasPrefix(op.Desc, c.want) {
					found = true
					if op.Kind == "write" && op.Args[1] != ResolvConf {
						t.Errorf("wrote %q", op.Args[1])
					}
					if op.Kind == "mount" && op.Args[1] != "/new/etc/resolv.conf" {
						t.Errorf("bound over %s", op.Args[1])
					}
				}
			}
			if !wrote || (c.want != "" && !found) {
				t.Errorf("plan lacks the resolver configuration (wrote %v, %q found %v): %+v", wrote, c.want, found, ops)
			}
			if !strings.Contains(ResolvConf, "nameserver 127.0.0.1") {
				t.Error("ResolvConf does not name airlock's responder")
			}
		})
	}
	// Without transparent egress the root's own configuration stays.
	ops, _ := planRoot(&rootConfig{Rootfs: t.TempDir(), NewRoot: "/new", TmpSize: 1 << 20, Inodes: 100, IdmapFD: -1})
	for _, op := range ops {
		if strings.Contains(op.Desc, "resolver") {
			t.Errorf("resolver configuration planned without transparent egress: %+v", op)
		}
	}
}
