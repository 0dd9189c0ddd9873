//go:build e2e

// Package sandbox_test is the escape suite of the native sandbox: real programs inside a
// sandbox try to get out, and each attempt must fail. Run as root:
//
//	go test -tags e2e -count=1 ./e2e/sandbox/
package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/testkit/e2etest"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	native.Init()
	if code, ran := e2etest.RunRootless(); ran { // AIRLOCK_E2E_ROOTLESS=1: as airlock-test
		os.Exit(code)
	}
	code := m.Run()
	e2etest.RemoveAirlockBinary()
	os.Exit(code)
}

const canary = "airlock-canary-5f2c9a"

func newSandbox(t *testing.T, o sandbox.Options) *sandbox.Sandbox {
	t.Helper()
	if e2etest.Rootless() && o.WorkspaceMode == sandbox.WorkspaceCoW && o.Workspace != "" {
		t.Skip("rootless: a copy-on-write workspace needs root")
	}
	if o.Backend == nil {
		// Rootless, a memory or CPU bound a test sets is accepted unenforced.
		o.Backend = &native.Native{StateDir: filepath.Join(os.TempDir(), fmt.Sprintf("airlock-e2e-state-%d", os.Geteuid())), AllowUnenforcedLimits: true}
	}
	if o.Rootfs == "" {
		o.Rootfs = e2etest.Rootfs() // AIRLOCK_E2E_ROOTFS: an image's root instead of the host's
	}
	s, err := sandbox.New(context.Background(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func run(t *testing.T, s *sandbox.Sandbox, script string) sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("Run %q: %v", script, err)
	}
	return res
}

func py(code string) string { return "python3 -c '" + code + "'" }

// attempt is one escape: script prints ESCAPED when it gets through. hostControl says
// whether the same script, run on the host, must print ESCAPED (proving it can detect a way
// out).
type attempt struct {
	name        string
	script      string
	hostControl bool
}

func attempts(h *e2etest.Host, otherWorkspace string) []attempt {
	connect := func(fam, addr, port string) string {
		return py(`import socket; s = socket.socket(socket.` + fam + `); s.settimeout(3); s.connect(("` + addr + `", ` + port + `)); print("ESCAPED")`)
	}
	a := []attempt{
		{"tcp to host loopback IPv4", connect("AF_INET", "127.0.0.1", h.TCPPort), true},
		{"tcp to host loopback IPv6", connect("AF_INET6", "::1", h.TCPPort), true},
		{"udp to host loopback", py(`import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); s.sendto(b"x", ("127.0.0.1", ` + h.UDPPort + `)); s.recv(10); print("ESCAPED")`), true},
		{"udp to host loopback IPv6", py(`import socket; s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.settimeout(2); s.sendto(b"x", ("::1", ` + h.UDPPort + `)); s.recv(10); print("ESCAPED")`), true},
		{"dns resolution", py(`import socket; socket.getaddrinfo("example.com", 443); print("ESCAPED")`), false},
		{"dns to a resolver directly", py(`import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01", ("8.8.8.8", 53)); s.recv(512); print("ESCAPED")`), false},
		{"host unix socket in /tmp", py(`import socket; s = socket.socket(socket.AF_UNIX); s.connect("` + h.UnixPath + `"); print("ESCAPED")`), true},
		{"docker socket", `for p in /run/docker.sock /var/run/docker.sock; do ` + py(`import socket,sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print("ESCAPED")`) + ` $p; done`, false},
		{"host abstract unix socket", py(`import socket; s = socket.socket(socket.AF_UNIX); s.connect("\0` + h.Abstract + `"); print("ESCAPED")`), true},
		{"admin API on host loopback", "curl -sS -m 3 --noproxy '*' " + h.Admin, true},
		{"admin API through the proxy", "curl -sS -m 3 " + h.Admin, false},
		{"read /etc/shadow", "cat /etc/shadow && echo ESCAPED", true},
		{"list /root", "ls /root && echo ESCAPED", true},
		{"other sandbox's workspace", "cat " + otherWorkspace + "/secret.txt && echo ESCAPED; cat /proc/*/root/workspace/secret.txt 2>/dev/null && echo ESCAPED", false},
		{"write outside workspace and /tmp", "for d in / /etc /usr /var /opt /dev /run; do touch $d/airlock-e2e 2>/dev/null && echo ESCAPED $d; done; true", false},
		{"canary in environment", "env | grep " + canary + " && echo ESCAPED; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep " + canary + " && echo ESCAPED; true", true},
		{"ptrace", "strace -o /dev/null true && echo ESCAPED", true},
		{"ptrace a sibling", "sleep 30 & " + py(`import ctypes,sys; libc = ctypes.CDLL(None, use_errno=True); r = libc.ptrace(16, int(sys.argv[1]), 0, 0); print("ESCAPED" if r == 0 else "refused")`) + " $!; kill -9 $!", true},
		{"user namespace", "unshare -U true && echo ESCAPED; unshare -Ur true && echo ESCAPED; true", true},
		{"AF_VSOCK socket", py(`import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); print("ESCAPED")`), false},
		{"AF_PACKET socket", py(`import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW); print("ESCAPED")`), true},
		{"mount", "mount -t tmpfs x /tmp && echo ESCAPED; true", false},
	}
	if h.ExtIP != "" {
		a = append(a,
			attempt{"tcp to host address", connect("AF_INET", h.ExtIP, h.TCPPort), true},
			attempt{"icmp to host address", py(`import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP); s.settimeout(2); s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("` + h.ExtIP + `", 0)); s.recv(64); print("ESCAPED")`), false},
		)
	}
	return a
}

func TestEscapes(t *testing.T) {
	t.Setenv("AIRLOCK_E2E_CANARY", canary)
	h := e2etest.StartHost(t, "airlock-e2e")
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "secret.txt"), []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	newSandbox(t, sandbox.Options{Workspace: other})
	s := newSandbox(t, sandbox.Options{Workspace: t.TempDir(), Proxy: sandboxtest.NewProxy(), Pids: 64, Memory: 256 << 20})
	for _, a := range attempts(h, other) {
		t.Run(a.name, func(t *testing.T) {
			udpBefore := h.UDPSeen.Load()
			res := run(t, s, a.script)
			if strings.Contains(string(res.Stdout), "ESCAPED") {
				t.Errorf("escaped: stdout %q stderr %q", res.Stdout, res.Stderr)
			}
			if n := h.UDPSeen.Load() - udpBefore; n != 0 {
				t.Errorf("host UDP server received %d packets from the sandbox, want 0", n)
			}
			if a.hostControl {
				e2etest.HostControl(t, a.script)
			}
		})
	}
}
