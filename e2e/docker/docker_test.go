//go:build e2e

package docker_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
)

// TestNetNSThroughProxy: a --network none container whose proxy listener is opened in its
// own network namespace reaches the allowed HTTPS upstream through the real proxy (curl,
// intercepted with airlock's CA from the CA variables) and plain HTTP (busybox wget), is
// refused elsewhere by policy, cannot connect or resolve anything directly, runs with the
// whole boundary, and leaves nothing behind.
func TestNetNSThroughProxy(t *testing.T) {
	rp := startRealProxy(t, false)
	cli := dockerClient(t)
	b := newBackend(t, docker.Options{Client: cli, Mode: docker.ModeNetNS})
	ws := t.TempDir()
	// The workspace's owner: the container runs as that uid so it can write there.
	if err := os.Chown(ws, 1234, 1234); err != nil {
		t.Fatal(err)
	}
	// The proxy listener only (transparent egress off): TestNetNSTransparent covers the default.
	o := sandbox.Options{ID: "sbx-docker-netns", Labels: map[string]string{"task": "e2e"}, Backend: b, Proxy: rp.p,
		CABundle: rp.bundle, Workspace: ws, Memory: 128 << 20, Pids: 64, CPUs: 1, ProxyOnly: true}
	s := newSandbox(t, o)
	base := "https://upstream.test:" + rp.port
	tests := []struct {
		name, script, want string
		wantOK             bool
	}{
		{"curl https allowed", "curl -sS " + base + "/allowed/curl", "hello GET /allowed/curl", true},
		{"curl https denied by policy", "curl -sS -o /dev/null -w '%{http_code}' " + base + "/secret", "403", true},
		{"busybox wget http allowed", "wget -q -O - http://upstream.test:" + rp.port + "/allowed/wget 2>&1; true", "", true},
		{"curl without the proxy", "curl -sS -m 5 --noproxy '*' " + base + "/allowed", "", false},
		{"curl without airlock's CA", "curl -sS --cacert /dev/null " + base + "/allowed", "", false},
		{"direct tcp to the upstream", probe("tcp", "127.0.0.1:"+rp.port), "refused", false},
		{"dns from resolv.conf", probe("dns", "example.com"), "refused", false},
		{"workspace writable", "echo hi > /workspace/f && cat /workspace/f", "hi", true},
		{"root fs read-only", "touch /etc/x", "Read-only file system", false},
		{"tmp is tmpfs", "grep ' /tmp ' /proc/mounts", "tmpfs", true},
		{"non-root, the workspace's owner", "id -u", "1234", true},
		{"no capabilities", "grep CapEff /proc/self/status", "0000000000000000", true},
		{"no new privileges", "grep NoNewPrivs /proc/self/status", "1", true},
		{"only lo", "ls /sys/class/net", "lo", true},
		{"ca variables", "echo $SSL_CERT_FILE $CURL_CA_BUNDLE && head -1 $SSL_CERT_FILE", "BEGIN CERTIFICATE", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := run(t, s, tt.script)
			if (code == 0) != tt.wantOK {
				t.Errorf("%s: exit %d, want success %v (output %q)", tt.script, code, tt.wantOK, out)
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("%s: output %q, want %q", tt.script, out, tt.want)
			}
		})
	}
	if out, _ := run(t, s, "ls /sys/class/net"); strings.TrimSpace(out) != "lo" {
		t.Errorf("interfaces %q, want only lo", out)
	}
	if fi, err := os.Stat(filepath.Join(ws, "f")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1234 {
		t.Errorf("file written to the workspace: %v, want owned by 1234", err)
	}
	if got := sandboxes(rp.audit); got["sbx-docker-netns"] < 3 || len(got) != 1 {
		t.Errorf("audit events by sandbox %v, want at least 3, all from sbx-docker-netns", got)
	}
	// The container as Docker sees it.
	ids := containersOf(t, "sbx-docker-netns")
	if len(ids) != 1 {
		t.Fatalf("containers %v, want one", ids)
	}
	ci, err := cli.ContainerInspect(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	h := ci.HostConfig
	if h.NetworkMode != "none" || !h.ReadonlyRootfs || h.Privileged || h.Init == nil || !*h.Init ||
		len(h.CapDrop) != 1 || h.CapDrop[0] != "ALL" || h.PidsLimit == nil || *h.PidsLimit != 64 || h.Memory != 128<<20 || h.NanoCPUs != 1e9 {
		t.Errorf("host config %+v: want network none, read-only, init, drop ALL, pids 64, 128M, 1 CPU", h)
	}
	for _, m := range ci.Mounts {
		if strings.Contains(m.Source, "docker.sock") {
			t.Errorf("docker socket mounted: %+v", m)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, cli, "sbx-docker-netns"); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if _, err := os.Stat(filepath.Join(os.TempDir(), "airlock-e2e-docker", "sbx-docker-netns")); !os.IsNotExist(err) {
		t.Errorf("state directory left behind: %v", err)
	}
}

func containersOf(t *testing.T, id string) []string {
	t.Helper()
	var ids []string
	for _, l := range leftovers(t, dockerClient(t), id) {
		if c, ok := strings.CutPrefix(l, "container "); ok {
			ids = append(ids, c)
		}
	}
	return ids
}

// proxyHolder is a container playing the proxy's container on the internal networks: the
// in-process proxy serves a listener opened inside its network namespace (so the test needs
// no airlock image). It sits on Docker's default bridge, reachable from the host.
type proxyHolder struct {
	id, hostIP string
	pid        int // host pid of the container's init
}

func startProxyHolder(t *testing.T, rp *realProxy) *proxyHolder {
	t.Helper()
	cli := dockerClient(t)
	ctx := context.Background()
	name := fmt.Sprintf("airlock-e2e-proxy-%d", os.Getpid())
	created, err := cli.ContainerCreate(ctx, &container.Config{Image: testImage, Cmd: []string{"sleep", "infinity"},
		Labels: map[string]string{docker.Label: "e2e-proxy-holder"}},
		&container.HostConfig{CapDrop: []string{"ALL"}, Init: ptr(true)}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.ContainerRemove(ctx, created.ID, container.RemoveOptions{Force: true}) })
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	ci, err := cli.ContainerInspect(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The holder's proxy listens on all its addresses (sandbox.ListenInNetns binds only
	// loopback).
	ln, err := listenAllInNetns(ci.State.Pid)
	if err != nil {
		t.Fatal(err)
	}
	go rp.p.Serve(ln)
	t.Cleanup(func() { ln.Close() })
	return &proxyHolder{id: created.ID, hostIP: ci.NetworkSettings.Networks["bridge"].IPAddress, pid: ci.State.Pid}
}

func ptr[T any](v T) *T { return &v }

// TestInternalNetworkCredential: in internal-network mode the sandbox reaches the proxy
// only with the credential in its HTTP_PROXY, Docker's DNS gives it nothing outside, a
// direct connection fails, the credential is useless after Close, and the network and
// container are gone.
//
// The DNS proof. Docker's embedded DNS (127.0.0.11) forwards names it does not know to the
// container's resolvers, from internal networks too (seen here on 20.10), by default the
// daemon's. The backend makes the proxy container the sandbox's only resolver; airlock
// serves no DNS there. Here a resolver answering every name runs for a while in the
// stand-in proxy container: a query through Docker's DNS reaches it or nothing
// (forwardedOnlyToTheProxy); once it is gone, outside names get no answer at all.
func TestInternalNetworkCredential(t *testing.T) {
	rp := startRealProxy(t, true)
	holder := startProxyHolder(t, rp)
	dns, err := startDNSResponderInNetns(holder.pid)
	if err != nil {
		t.Fatal(err)
	}
	defer dns.Close()
	cli := dockerClient(t)
	b := newBackend(t, docker.Options{Client: cli, Mode: docker.ModeInternal, Tokens: rp.p, ProxyContainer: holder.id})
	const id = "sbx-docker-internal"
	s, err := sandbox.New(context.Background(), sandbox.Options{ID: id, Backend: b, CABundle: rp.bundle,
		ReadOnlyPaths: []string{probeDir}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.Close(context.Background())
		}
	})
	base := "https://upstream.test:" + rp.port
	proxyURL, _ := run(t, s, "printf %s \"$HTTP_PROXY\"")
	u, err := url.Parse(proxyURL)
	if err != nil || u.User == nil || u.User.Username() != id {
		t.Fatalf("HTTP_PROXY %q: want http://%s:TOKEN@proxy:3128", redact(proxyURL), id)
	}
	tests := []struct {
		name, script, want string
		wantOK             bool
	}{
		{"curl https allowed", "curl -sS " + base + "/allowed/internal", "hello GET /allowed/internal", true},
		{"curl denied by policy", "curl -sS -o /dev/null -w '%{http_code}' " + base + "/secret", "403", true},
		{"no credential", "curl -sS -o /dev/null -w '%{http_code}' -x http://" + u.Host + " http://upstream.test:" + rp.port + "/allowed", "407", true},
		{"direct tcp to the host", probe("tcp", holder.hostIP+":"+rp.port), "refused", false},
		{"docker dns knows the proxy container", "nslookup " + strings.TrimPrefix(containerName(t, holder.id), "/") + " 127.0.0.11", "Address", true},
		{"the proxy container's resolver answers when asked directly", "nslookup control.airlock.test " + u.Hostname(), answerIP, true},
	}
	noResolver := []struct {
		name, script, want string
		wantOK             bool
	}{
		{"docker dns gives nothing outside", probe("dns", "airlock-canary.example.com"), "refused", false},
		{"docker dns, another name", "nslookup example.com 127.0.0.11", "", false},
	}
	for i, tt := range append(tests, noResolver...) {
		if i == len(tests) {
			forwardedOnlyToTheProxy(t, s, cli, id, u.Hostname(), dns)
			// As with the real proxy container: no resolver there.
			dns.Close()
		}
		t.Run(tt.name, func(t *testing.T) {
			out, code := run(t, s, tt.script)
			if (code == 0) != tt.wantOK {
				t.Errorf("%s: exit %d, want success %v (output %q)", tt.script, code, tt.wantOK, redact(out))
			}
			if !strings.Contains(out, tt.want) {
				t.Errorf("%s: output %q, want %q", tt.script, redact(out), tt.want)
			}
		})
	}
	if asked := dns.asked(); !slices.Contains(asked, "control.airlock.test.") {
		t.Errorf("the resolver in the proxy container saw %q, not the direct control query", asked)
	}
	if got := sandboxes(rp.audit); got[id] < 2 {
		t.Errorf("audit events by sandbox %v, want at least 2 from %s", got, id)
	}
	// The same credential from the host, before and after Close.
	viaHost := func() int {
		t.Helper()
		c, err := net.DialTimeout("tcp", net.JoinHostPort(holder.hostIP, "3128"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		pw, _ := u.User.Password()
		auth := base64.StdEncoding.EncodeToString([]byte(id + ":" + pw))
		fmt.Fprintf(c, "GET http://upstream.test:%s/allowed/host HTTP/1.1\r\nHost: upstream.test\r\nProxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n", rp.port, auth)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufioReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := viaHost(); code == http.StatusProxyAuthRequired {
		t.Fatalf("the credential was refused before Close (%d): the after-Close check would prove nothing", code)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	closed = true
	if code := viaHost(); code != http.StatusProxyAuthRequired {
		t.Errorf("credential after Close: status %d, want 407", code)
	}
	if left := leftovers(t, cli, id); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	hc, err := cli.ContainerInspect(context.Background(), holder.id)
	if err != nil {
		t.Fatal(err)
	}
	if _, still := hc.NetworkSettings.Networks["airlock-"+id]; still {
		t.Errorf("proxy container still on the sandbox's network")
	}
}

// forwardedOnlyToTheProxy checks where Docker's DNS sends a name it does not know: the
// sandbox container's only resolver is the proxy container (proxyIP), and a query through
// 127.0.0.11 is either answered by the resolver running there (the 20.10 engine forwards
// from internal networks) or not answered and not forwarded at all (engines that forward
// nothing from internal networks). Any other answer came from elsewhere.
func forwardedOnlyToTheProxy(t *testing.T, s *sandbox.Sandbox, cli *client.Client, id, proxyIP string, dns *dnsResponder) {
	t.Helper()
	t.Run("docker dns forwards to the proxy container or nowhere", func(t *testing.T) {
		ids := containersOf(t, id)
		if len(ids) != 1 {
			t.Fatalf("containers of %s: %v", id, ids)
		}
		ci, err := cli.ContainerInspect(context.Background(), ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ci.HostConfig.DNS, []string{proxyIP}) {
			t.Errorf("sandbox container's resolvers %v, want only the proxy container [%s]", ci.HostConfig.DNS, proxyIP)
		}
		out, code := run(t, s, "nslookup forwarded.airlock.test 127.0.0.11")
		asked := slices.Contains(dns.asked(), "forwarded.airlock.test.")
		switch {
		case code == 0 && strings.Contains(out, answerIP) && asked:
			t.Log("this engine forwards from internal networks: the query went to the proxy container")
		case code != 0 && !asked:
			t.Log("this engine forwards nothing from internal networks")
		default:
			t.Errorf("nslookup through Docker's DNS: exit %d, output %q, seen by the proxy container's resolver: %v; want its answer, or no answer and no query", code, redact(out), asked)
		}
	})
}

func containerName(t *testing.T, id string) string {
	t.Helper()
	ci, err := dockerClient(t).ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ci.Name
}

// redact hides a proxy credential in test output.
func redact(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		if j := strings.Index(s[i:], "@"); j >= 0 {
			return s[:i+3] + "[redacted]" + s[i+j:]
		}
	}
	return s
}

// TestTimeoutAndStdin: a command that outlives its timeout is killed with its children
// (exit 124) and the sandbox stays usable; stdin reaches the command.
func TestTimeoutAndStdin(t *testing.T) {
	b := newBackend(t, docker.Options{Mode: docker.ModeNetNS})
	s := newSandbox(t, sandbox.Options{ID: "sbx-docker-timeout", Backend: b})
	ctx := context.Background()
	res, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", "sleep 300 & sleep 301; echo not killed"}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode != sandbox.ExitTimeout || strings.Contains(string(res.Stdout), "not killed") {
		t.Errorf("timed out %v exit %d stdout %q, want a timeout with exit 124", res.TimedOut, res.ExitCode, res.Stdout)
	}
	if out, _ := run(t, s, "ps -o args | grep -c '^sleep 30[01]'"); strings.TrimSpace(out) != "0" {
		t.Errorf("%s sleeps still running after the timeout, want 0", strings.TrimSpace(out))
	}
	res, err = s.Run(ctx, sandbox.Command{Args: []string{"tr", "a-z", "A-Z"}, Stdin: strings.NewReader("through stdin")})
	if err != nil || string(res.Stdout) != "THROUGH STDIN" || res.ExitCode != 0 {
		t.Errorf("stdin: %v exit %d stdout %q, want THROUGH STDIN", err, res.ExitCode, res.Stdout)
	}
	if out, code := run(t, s, "exit 7"); code != 7 {
		t.Errorf("exit status %d (%q), want 7", code, out)
	}
}

// TestRemoveLeftovers: a container and network left by an airlock process that died are
// removed; those of a live owner stay.
func TestRemoveLeftovers(t *testing.T) {
	cli := dockerClient(t)
	ctx := context.Background()
	host, _ := os.Hostname()
	dead := host + "/999999999/1"
	mk := func(id, owner string) string {
		labels := map[string]string{docker.Label: id, docker.OwnerLabel: owner}
		c, err := cli.ContainerCreate(ctx, &container.Config{Image: testImage, Cmd: []string{"true"}, Labels: labels},
			&container.HostConfig{NetworkMode: "none"}, nil, nil, "airlock-"+id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}) })
		n, err := cli.NetworkCreate(ctx, "airlock-"+id, network.CreateOptions{Internal: true, Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.NetworkRemove(ctx, n.ID) })
		return c.ID
	}
	mk("sbx-left-dead", dead)
	live := mk("sbx-left-live", fmt.Sprintf("%s/%d/%s", host, os.Getpid(), startOf(t, os.Getpid())))
	b := newBackend(t, docker.Options{Client: cli, Mode: docker.ModeNetNS})
	n, err := b.RemoveLeftovers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("removed %d sandboxes, want 1", n)
	}
	if left := leftovers(t, cli, "sbx-left-dead"); len(left) != 0 {
		t.Errorf("dead owner's objects left: %v", left)
	}
	if left := leftovers(t, cli, "sbx-left-live"); len(left) != 2 {
		t.Errorf("live owner's objects %v, want its container %s and network kept", left, live[:12])
	}
}

func startOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[19]
}
