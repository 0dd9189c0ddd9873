//go:build e2e

package docker_test

import (
	"fmt"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/sandbox/sandboxtest"
)

const canary = "airlock-canary-d0c4e7"

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
//   - "ptrace" / "ptrace a sibling": refused by the shared seccomp allowlist, through every
//     ABI: TestDockerSyscallBoundary.
func attempts(h *e2etest.Host) []attempt {
	a := []attempt{
		{"tcp to host loopback IPv4", probe("tcp", "127.0.0.1:"+h.TCPPort), true},
		{"tcp to host loopback IPv6", probe("tcp", "[::1]:"+h.TCPPort), true},
		{"udp to host loopback", probe("udp", "127.0.0.1:"+h.UDPPort), true},
		{"dns resolution", probe("dns", "example.com"), false},
		{"host unix socket in /tmp", probe("unix", h.UnixPath), true},
		{"docker socket", probe("unix", "/var/run/docker.sock") + "; " + probe("unix", "/run/docker.sock"), false},
		{"host abstract unix socket", probe("unix", "@"+h.Abstract), true},
		{"admin API on host loopback", "curl -sS -m 3 --noproxy '*' " + h.Admin, true},
		{"admin API through the proxy", "curl -sS -m 3 " + h.Admin, false},
		{"write outside workspace and /tmp", "for d in / /etc /usr /var /opt /dev /run /bin; do touch $d/airlock-e2e 2>/dev/null && echo ESCAPED $d; done; true", false},
		{"canary in environment", "env | grep " + canary + " && echo ESCAPED; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep " + canary + " && echo ESCAPED; true", true},
		{"host processes are invisible", "ls /proc | grep -qx " + fmt.Sprint(os.Getpid()) + " && echo ESCAPED; true", true},
		{"host paths are not there", "ls " + filepath.Dir(h.UnixPath) + "/airlock-e2e-docker-*.sock 2>/dev/null && echo ESCAPED; true", true},
		{"user namespace", "unshare -U true && echo ESCAPED; unshare -Ur true && echo ESCAPED; true", true},
		{"AF_VSOCK socket", probe("socket", "40", "1"), false},
		{"AF_VSOCK datagram socket", probe("socket", "40", "2"), false},
		{"AF_PACKET socket", probe("socket", "17", "3"), true},
		{"raw ICMP socket", probe("socket", "2", "3", "1"), true},
		{"netlink socket", probe("socket", "16", "3"), true},
		{"mount", "mount -t tmpfs x /tmp && echo ESCAPED; true", false},
	}
	if h.ExtIP != "" {
		a = append(a,
			attempt{"tcp to host address", probe("tcp", h.ExtIP+":"+h.TCPPort), true},
			attempt{"udp to host address", probe("udp", h.ExtIP+":"+h.UDPPort), true},
		)
	}
	return a
}

// TestEscapes runs the table against both modes: netns (no network; the test proxy's
// listener inside the container) and internal (its own internal network, the real proxy
// in a stand-in proxy container, credential in HTTP_PROXY).
func TestEscapes(t *testing.T) {
	t.Setenv("AIRLOCK_E2E_CANARY", canary)
	h := e2etest.StartHost(t, "airlock-e2e-docker")
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

func try(t *testing.T, h *e2etest.Host, s *sandbox.Sandbox, a attempt) {
	udpBefore := h.UDPSeen.Load()
	out, _ := run(t, s, a.script)
	if strings.Contains(out, "ESCAPED") {
		t.Errorf("escaped: %q", out)
	}
	if n := h.UDPSeen.Load() - udpBefore; n != 0 {
		t.Errorf("host UDP server received %d packets from the sandbox, want 0", n)
	}
	if a.hostControl {
		e2etest.HostControl(t, a.script)
	}
}
