//go:build e2e

package docker_test

import (
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
)

// TestNetNSTransparent: in a --network none container, transparent egress (the default)
// takes TCP and DNS as in a native sandbox: a client ignoring the proxy reaches an allowed
// upstream through the policy, names resolve to airlock's range, and a refused path is
// refused with the policy's reason.
func TestNetNSTransparent(t *testing.T) {
	rp := startRealProxy(t, false)
	b := newBackend(t, docker.Options{Client: dockerClient(t), Mode: docker.ModeNetNS})
	s := newSandbox(t, sandbox.Options{ID: "sbx-docker-transparent", Backend: b, Proxy: rp.p,
		CABundle: rp.bundle, Memory: 128 << 20, Pids: 64})
	base := "https://upstream.test:" + rp.port
	for _, tt := range []struct {
		name, script, want string
		wantOK             bool
	}{
		{"resolver is airlock", "cat /etc/resolv.conf", "nameserver 127.0.0.1", true},
		{"names from airlock's range", "nslookup upstream.test", "198.18.", true},
		{"curl ignoring the proxy, allowed", "curl -sS -m 20 --noproxy '*' " + base + "/allowed/transparent", "hello GET /allowed/transparent", true},
		{"curl ignoring the proxy, refused by policy", "curl -sS -m 20 --noproxy '*' -o /dev/null -w '%{http_code}' " + base + "/secret", "403", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, code := run(t, s, tt.script)
			if (code == 0) != tt.wantOK || !strings.Contains(out, tt.want) {
				t.Errorf("%s: exit %d, output %q; want success %v and %q", tt.script, code, out, tt.wantOK, tt.want)
			}
		})
	}
}
