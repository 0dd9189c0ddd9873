package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/mount"

	"github.com/airlock-proxy/airlock/sandbox"
)

func testBackend(t *testing.T, o Options) *Backend {
	t.Helper()
	if o.Image == "" {
		o.Image = "img"
	}
	if o.Mode == "" {
		o.Mode, o.Tokens, o.ProxyContainer = ModeInternal, nopTokens{}, "proxy"
	}
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

type nopTokens struct{}

func (nopTokens) IssueToken(context.Context, sandbox.Identity) (string, error) { return "t", nil }
func (nopTokens) RevokeToken(context.Context, string) error                    { return nil }

// TestSpecBoundary: every container gets the whole boundary, whatever the options.
func TestSpecBoundary(t *testing.T) {
	b := testBackend(t, Options{})
	ws := t.TempDir()
	sp, err := b.containerSpec(sandbox.Options{ID: "sbx-1", Workspace: ws, WorkspaceMode: sandbox.WorkspaceRO,
		Memory: 64 << 20, Pids: 77, CPUs: 1.5, TmpSize: 1 << 20, Nofile: 99, Inodes: 500}, "/state/ca.pem", "", "", "/state/pts", slotUser(200000))
	if err != nil {
		t.Fatal(err)
	}
	h, c := sp.Host, sp.Config
	checks := []struct {
		name string
		ok   bool
	}{
		{"cap-drop ALL", slices.Equal(h.CapDrop, []string{"ALL"}) && len(h.CapAdd) == 0},
		{"no-new-privileges", slices.Contains(h.SecurityOpt, "no-new-privileges")},
		{"seccomp profile", len(h.SecurityOpt) == 2 && strings.HasPrefix(h.SecurityOpt[1], "seccomp={")},
		{"read-only rootfs", h.ReadonlyRootfs},
		{"not privileged", !h.Privileged},
		{"init", h.Init != nil && *h.Init},
		{"network none", h.NetworkMode == "none"},
		{"memory", h.Memory == 64<<20 && h.MemorySwap == 64<<20},
		{"pids", h.PidsLimit != nil && *h.PidsLimit == 77},
		{"cpus", h.NanoCPUs == 1_500_000_000},
		{"nofile", len(h.Ulimits) == 3 && h.Ulimits[0].Name == "nofile" && h.Ulimits[0].Soft == 99 && h.Ulimits[0].Hard == 99},
		{"sigpending and msgqueue", h.Ulimits[1].Name == "sigpending" && h.Ulimits[1].Hard == sandbox.SigpendingLimit &&
			h.Ulimits[2].Name == "msgqueue" && h.Ulimits[2].Hard == sandbox.MsgqueueLimit},
		//lint:ignore SA1019 asserts the cgroup v1 TCP bound (see config.go).
		{"tcp buffers", h.KernelMemoryTCP == 16<<20 && h.Sysctls["net.ipv4.tcp_rmem"] == sandbox.TCPSysctls["net.ipv4.tcp_rmem"] &&
			h.Sysctls["net.ipv4.tcp_wmem"] == sandbox.TCPSysctls["net.ipv4.tcp_wmem"]},
		{"tmpfs inodes", strings.Contains(h.Tmpfs["/tmp"], "nr_inodes=500") && strings.Contains(h.Tmpfs[sandbox.HomeDir], "nr_inodes=500") &&
			strings.Contains(h.Tmpfs["/dev/shm"], "nr_inodes=500")},
		{"/proc masked", slices.Contains(h.MaskedPaths, "/proc/cmdline") && slices.Contains(h.MaskedPaths, "/proc/kcore")},
		{"tmp sized", strings.Contains(h.Tmpfs["/tmp"], "size=1048576")},
		{"home sized and owned", strings.Contains(h.Tmpfs[sandbox.HomeDir], "size=1048576") && strings.Contains(h.Tmpfs[sandbox.HomeDir], "uid=201000")},
		{"the sandbox's own user", c.User == "201000:201000"},
		{"label", c.Labels[Label] == "sbx-1"},
		{"name", sp.Name == "airlock-sbx-1"},
		{"workdir", c.WorkingDir == sandbox.WorkspaceDir},
	}
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("%s: not set (host config %+v)", ck.name, h)
		}
	}
	wantMounts := []mount.Mount{
		{Type: mount.TypeBind, Source: ws, Target: sandbox.WorkspaceDir, ReadOnly: true},
		{Type: mount.TypeBind, Source: "/state/pts", Target: "/dev/pts"},
		{Type: mount.TypeBind, Source: "/state/ca.pem", Target: sandbox.CABundlePath, ReadOnly: true},
	}
	if !slices.Equal(h.Mounts, wantMounts) {
		t.Errorf("mounts %+v, want %+v", h.Mounts, wantMounts)
	}
	for _, m := range h.Mounts {
		if strings.Contains(m.Source, "docker.sock") {
			t.Errorf("docker socket mounted: %+v", m)
		}
	}
}

func TestSpecInternalNetworkAndRW(t *testing.T) {
	b := testBackend(t, Options{User: "2000:3000", Runtime: "runsc"})
	sp, err := b.containerSpec(sandbox.Options{ID: "sbx-2", Workspace: t.TempDir(), WorkspaceMode: sandbox.WorkspaceRW, Pids: 5, TmpSize: 10}, "", "airlock-sbx-2", "172.30.0.2", "", "2000:3000")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(sp.Host.NetworkMode); got != "airlock-sbx-2" {
		t.Errorf("network mode %q, want airlock-sbx-2", got)
	}
	// Docker's DNS may forward only to the proxy container, never to the daemon's resolvers.
	if len(sp.Host.DNS) != 1 || sp.Host.DNS[0] != "172.30.0.2" {
		t.Errorf("DNS %v, want only the proxy container [172.30.0.2]", sp.Host.DNS)
	}
	if len(sp.Host.Mounts) != 1 || sp.Host.Mounts[0].ReadOnly {
		t.Errorf("mounts %+v, want one read-write workspace", sp.Host.Mounts)
	}
	if sp.Config.User != "2000:3000" || !strings.Contains(sp.Host.Tmpfs[sandbox.HomeDir], "uid=2000,gid=3000") {
		t.Errorf("user %q home %q, want 2000:3000", sp.Config.User, sp.Host.Tmpfs[sandbox.HomeDir])
	}
	if sp.Host.Runtime != "runsc" {
		t.Errorf("runtime %q, want runsc", sp.Host.Runtime)
	}
	if sp.Host.Memory != 0 || sp.Host.MemorySwap != 0 {
		t.Errorf("memory %d swap %d, want unlimited", sp.Host.Memory, sp.Host.MemorySwap)
	}
}

func TestSpecRefuses(t *testing.T) {
	b := testBackend(t, Options{})
	tests := []struct {
		name string
		o    sandbox.Options
		want string
	}{
		{"cow workspace", sandbox.Options{ID: "x", Workspace: "/tmp", WorkspaceMode: sandbox.WorkspaceCoW}, "cow"},
		{"docker socket", sandbox.Options{ID: "x", ReadOnlyPaths: []string{"/var/run/docker.sock"}}, "Docker socket"},
		{"directory of the docker socket", sandbox.Options{ID: "x", ReadOnlyPaths: []string{"/run"}}, "Docker socket"},
		{"root", sandbox.Options{ID: "x", Workspace: "/"}, "Docker socket"},
		{"relative", sandbox.Options{ID: "x", ReadOnlyPaths: []string{"usr"}}, "absolute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.containerSpec(tt.o, "", "", "", "", "201000:201000")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"no image", Options{}, "image is required"},
		{"root user", Options{Image: "i", User: "0:0"}, "must not be root"},
		{"root uid", Options{Image: "i", User: "0"}, "must not be root"},
		{"root group", Options{Image: "i", User: "1000:0"}, "must not be root"},
		{"named user", Options{Image: "i", User: "sandbox"}, "numeric"},
		{"internal without tokens", Options{Image: "i", Mode: ModeInternal, ProxyContainer: "p"}, "token issuer"},
		{"internal without proxy container", Options{Image: "i", Mode: ModeInternal, Tokens: nopTokens{}}, "proxy's container"},
		{"unknown mode", Options{Image: "i", Mode: "bridge"}, "want netns or internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.o)
			if err == nil {
				b.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

func TestProxyEnvCarriesCredential(t *testing.T) {
	env := proxyEnv("sbx-9", "tok", "172.30.0.2:3128")
	for _, kv := range env {
		if !strings.HasSuffix(kv, "=http://sbx-9:tok@172.30.0.2:3128") {
			t.Errorf("%s: want http://sbx-9:tok@172.30.0.2:3128", kv)
		}
	}
	got := sandbox.MergeEnv([]string{"A=1", "HTTP_PROXY=http://127.0.0.1:3128"}, env)
	if !slices.Contains(got, "A=1") || slices.Contains(got, "HTTP_PROXY=http://127.0.0.1:3128") || len(got) != 5 {
		t.Errorf("merged %v: want A=1 kept and the proxy variables replaced", got)
	}
}

func TestOwnerGone(t *testing.T) {
	host, _ := os.Hostname()
	tests := []struct {
		owner string
		want  bool
	}{
		{owner(), false},
		{host + "/" + strconv.Itoa(os.Getpid()) + "/1", true}, // same pid, other start: reused pid
		{host + "/999999999/5", true},
		{"another-host/999999999/5", false},
		{"garbage", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := ownerGone(tt.owner); got != tt.want {
			t.Errorf("ownerGone(%q) = %v, want %v", tt.owner, got, tt.want)
		}
	}
}

// TestSpecSeccompProfile: the container's profile is the shared sandbox policy for this
// architecture only, with AIO when the options allow it.
func TestSpecSeccompProfile(t *testing.T) {
	b := testBackend(t, Options{})
	profile := func(o sandbox.Options) (p struct {
		DefaultAction   string   `json:"defaultAction"`
		DefaultErrnoRet int      `json:"defaultErrnoRet"`
		Architectures   []string `json:"architectures"`
		Syscalls        []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
		} `json:"syscalls"`
	}) {
		t.Helper()
		sp, err := b.containerSpec(o, "", "", "", "", "201000:201000")
		if err != nil {
			t.Fatal(err)
		}
		opt, ok := strings.CutPrefix(sp.Host.SecurityOpt[1], "seccomp=")
		if !ok {
			t.Fatalf("security options %v", sp.Host.SecurityOpt)
		}
		if err := json.Unmarshal([]byte(opt), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	aioAllowed := func(o sandbox.Options) bool {
		for _, s := range profile(o).Syscalls {
			if slices.Contains(s.Names, "io_setup") {
				return s.Action == "SCMP_ACT_ALLOW"
			}
		}
		return false
	}
	p := profile(sandbox.Options{ID: "x"})
	native := map[string]string{"amd64": "SCMP_ARCH_X86_64", "arm64": "SCMP_ARCH_AARCH64"}[runtime.GOARCH]
	if p.DefaultAction != "SCMP_ACT_ERRNO" || p.DefaultErrnoRet != 38 || !slices.Equal(p.Architectures, []string{native}) {
		t.Errorf("profile %s/%d for %v, want an ENOSYS default for %s alone", p.DefaultAction, p.DefaultErrnoRet, p.Architectures, native)
	}
	if aioAllowed(sandbox.Options{ID: "x"}) || !aioAllowed(sandbox.Options{ID: "x", AllowAIO: true}) {
		t.Error("io_setup: want refused by default and allowed with AllowAIO")
	}
}

// TestSpecProtectsWorkspace: in a read-write workspace, git's hooks and config and the
// protected paths are bound read-only over the workspace, the git directory onto itself.
func TestSpecProtectsWorkspace(t *testing.T) {
	b := testBackend(t, Options{})
	ws := t.TempDir()
	for _, d := range []string{".git/hooks", ".vscode"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", "config"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []sandbox.WorkspaceMode{sandbox.WorkspaceRW, sandbox.WorkspaceRO} {
		sp, err := b.containerSpec(sandbox.Options{ID: "x", Workspace: ws, WorkspaceMode: mode}, "", "", "", "", "201000:201000")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range sp.Host.Mounts[1:] { // absent git files are not bound, only swept
			got = append(got, fmt.Sprintf("%s %s %v", strings.TrimPrefix(m.Source, ws), m.Target, m.ReadOnly))
		}
		want := []string{"/.git /workspace/.git false", "/.vscode /workspace/.vscode true",
			"/.git/config /workspace/.git/config true", "/.git/hooks /workspace/.git/hooks true"}
		if mode == sandbox.WorkspaceRO {
			want = nil // the whole workspace is read-only
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: mounts %q, want %q", mode, got, want)
		}
	}
}

// TestUserFor: a container runs as a uid of the sandbox's own (a reserved range), never a
// user of the host, unless it writes a workspace that a user (not root) owns: then as that
// owner. airlock's hidden paths inside the workspace are masked.
func TestUserFor(t *testing.T) {
	b := testBackend(t, Options{})
	owned := t.TempDir()
	if os.Geteuid() == 0 {
		if err := os.Chown(owned, 4242, 4343); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name string
		o    sandbox.Options
		want string
	}{
		{"no workspace", sandbox.Options{ID: "x"}, ""},
		{"read-only workspace", sandbox.Options{ID: "x", Workspace: owned, WorkspaceMode: sandbox.WorkspaceRO}, ""},
		{"root's read-write workspace", sandbox.Options{ID: "x", Workspace: t.TempDir(), WorkspaceMode: sandbox.WorkspaceRW}, ""},
		{"a user's read-write workspace", sandbox.Options{ID: "x", Workspace: owned, WorkspaceMode: sandbox.WorkspaceRW}, "4242:4343"},
	} {
		if tt.want != "" && os.Geteuid() != 0 {
			continue
		}
		if got, err := b.userFor(tt.o); err != nil || got != tt.want {
			t.Errorf("%s: %q %v, want %q", tt.name, got, err, tt.want)
		}
	}
	if u := slotUser(100000 + 7*65536); u != "559752:559752" {
		t.Errorf("slotUser = %q", u)
	}
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "token"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := b.containerSpec(sandbox.Options{ID: "x", Workspace: ws, HiddenPaths: []string{filepath.Join(ws, "token"), "/etc/airlock.yaml"}},
		"", "", "", "", slotUser(100000))
	if err != nil || !slices.Contains(sp.Host.MaskedPaths, "/workspace/token") || slices.Contains(sp.Host.MaskedPaths, "/etc/airlock.yaml") {
		t.Errorf("masked paths %v (%v): want /workspace/token, not the image's /etc", sp.Host.MaskedPaths, err)
	}
}
