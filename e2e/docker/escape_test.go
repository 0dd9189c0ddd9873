//go:build e2e

package docker_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/sandbox/sandboxtest"
)

const canary = "airlock-canary-d0c4e7"

// host is what the host offers that a sandbox must not reach.
type host struct {
	tcpPort, udpPort string
	udpSeen          atomic.Int64
	extIP            string
	unixPath         string
	abstract         string
	admin            string
}

func startHost(t *testing.T) *host {
	t.Helper()
	h := &host{}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, h.tcpPort, _ = net.SplitHostPort(ln.Addr().String())
	pc, err := net.ListenPacket("udp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			h.udpSeen.Add(1)
			_, _ = pc.WriteTo(buf[:n], addr)
		}
	}()
	_, h.udpPort, _ = net.SplitHostPort(pc.LocalAddr().String())
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			h.extIP = ipn.IP.String()
			break
		}
	}
	h.unixPath = filepath.Join(os.TempDir(), fmt.Sprintf("airlock-e2e-docker-%d.sock", os.Getpid()))
	_ = os.Remove(h.unixPath)
	ul, err := net.Listen("unix", h.unixPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ul.Close() })
	if err := os.Chmod(h.unixPath, 0o777); err != nil {
		t.Fatal(err)
	}
	h.abstract = fmt.Sprintf("airlock-e2e-docker-%d", os.Getpid())
	al, err := net.Listen("unix", "@"+h.abstract)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ESCAPED admin")
	}))
	t.Cleanup(admin.Close)
	h.admin = admin.URL
	return h
}

// attempt is one escape: the script prints ESCAPED when it gets through. hostControl: the
// same script run on the host must print ESCAPED, proving it can detect a way out (the
// probe is run from the same path on the host).
type attempt struct {
	name        string
	script      string
	hostControl bool
}

// attempts is the native escape suite's table (e2e/sandbox/escape_test.go) for the Docker
// backend, with the busybox image and the static probe instead of python. Not applicable
// here, and left out:
//   - "read /etc/shadow", "list /root": the container's /etc and /root are the image's,
//     not the host's; the read-only root is checked below instead.
//   - "other sandbox's workspace": each container sees only its own binds; covered by
//     "host paths are not there".
//   - "ptrace" / "ptrace a sibling": processes of one container may trace each other as
//     on any host (Docker's seccomp allows ptrace); the boundary is the container, and
//     tracing anything outside it is impossible without a shared pid namespace (checked
//     by "host processes are invisible").
func attempts(h *host) []attempt {
	a := []attempt{
		{"tcp to host loopback IPv4", probe("tcp", "127.0.0.1:"+h.tcpPort), true},
		{"tcp to host loopback IPv6", probe("tcp", "[::1]:"+h.tcpPort), true},
		{"udp to host loopback", probe("udp", "127.0.0.1:"+h.udpPort), true},
		{"dns resolution", probe("dns", "example.com"), false},
		{"host unix socket in /tmp", probe("unix", h.unixPath), true},
		{"docker socket", probe("unix", "/var/run/docker.sock") + "; " + probe("unix", "/run/docker.sock"), false},
		{"host abstract unix socket", probe("unix", "@"+h.abstract), true},
		{"admin API on host loopback", "curl -sS -m 3 --noproxy '*' " + h.admin, true},
		{"admin API through the proxy", "curl -sS -m 3 " + h.admin, false},
		{"write outside workspace and /tmp", "for d in / /etc /usr /var /opt /dev /run /bin; do touch $d/airlock-e2e 2>/dev/null && echo ESCAPED $d; done; true", false},
		{"canary in environment", "env | grep " + canary + " && echo ESCAPED; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep " + canary + " && echo ESCAPED; true", true},
		{"host processes are invisible", "ls /proc | grep -qx " + fmt.Sprint(os.Getpid()) + " && echo ESCAPED; true", true},
		{"host paths are not there", "ls " + filepath.Dir(h.unixPath) + "/airlock-e2e-docker-*.sock 2>/dev/null && echo ESCAPED; true", true},
		{"user namespace", "unshare -U true && echo ESCAPED; unshare -Ur true && echo ESCAPED; true", true},
		{"AF_VSOCK socket", probe("socket", "40", "1"), false},
		{"AF_VSOCK datagram socket", probe("socket", "40", "2"), false},
		{"AF_PACKET socket", probe("socket", "17", "3"), true},
		{"raw ICMP socket", probe("socket", "2", "3", "1"), true},
		{"netlink socket", probe("socket", "16", "3"), true},
		{"mount", "mount -t tmpfs x /tmp && echo ESCAPED; true", false},
	}
	if h.extIP != "" {
		a = append(a,
			attempt{"tcp to host address", probe("tcp", h.extIP+":"+h.tcpPort), true},
			attempt{"udp to host address", probe("udp", h.extIP+":"+h.udpPort), true},
		)
	}
	return a
}

// TestEscapes runs the table against both modes: netns (no network; the test proxy's
// listener inside the container) and internal (its own internal network, the real proxy
// in a stand-in proxy container, credential in HTTP_PROXY).
func TestEscapes(t *testing.T) {
	t.Setenv("AIRLOCK_E2E_CANARY", canary)
	h := startHost(t)
	modes := []struct {
		name string
		new  func(t *testing.T) *sandbox.Sandbox
	}{
		{"netns", func(t *testing.T) *sandbox.Sandbox {
			b := newBackend(t, docker.Options{Mode: docker.ModeNetNS})
			return newSandbox(t, sandbox.Options{ID: "sbx-docker-escape", Backend: b, Proxy: sandboxtest.NewProxy(),
				Workspace: t.TempDir(), Pids: 64, Memory: 256 << 20})
		}},
		{"internal", func(t *testing.T) *sandbox.Sandbox {
			rp := startRealProxy(t, true)
			holder := startProxyHolder(t, rp)
			b := newBackend(t, docker.Options{Mode: docker.ModeInternal, Tokens: rp.p, ProxyContainer: holder.id})
			return newSandbox(t, sandbox.Options{ID: "sbx-docker-escape-int", Backend: b,
				Workspace: t.TempDir(), Pids: 64, Memory: 256 << 20})
		}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s := m.new(t)
			for _, a := range attempts(h) {
				t.Run(a.name, func(t *testing.T) { try(t, h, s, a) })
			}
		})
	}
}

func try(t *testing.T, h *host, s *sandbox.Sandbox, a attempt) {
	udpBefore := h.udpSeen.Load()
	out, _ := run(t, s, a.script)
	if strings.Contains(out, "ESCAPED") {
		t.Errorf("escaped: %q", out)
	}
	if n := h.udpSeen.Load() - udpBefore; n != 0 {
		t.Errorf("host UDP server received %d packets from the sandbox, want 0", n)
	}
	if a.hostControl {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", a.script)
		cmd.WaitDelay = time.Second
		hostOut, _ := cmd.CombinedOutput()
		if !strings.Contains(string(hostOut), "ESCAPED") {
			t.Errorf("control: the attempt does not get through on the host either (out %q), so it proves nothing", hostOut)
		}
	}
}
