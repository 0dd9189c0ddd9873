//go:build e2e

// Package docker_test runs sandboxes through the Docker backend with the real airlock proxy
// on this machine's Docker engine. Run as root, with Docker running:
//
//	sh e2e/docker/build-image.sh && go test -tags e2e -count=1 ./e2e/docker/
//
// (TestMain runs the build script itself when the image is missing.)
package docker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/testkit/e2etest"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

const testImage = "airlock-sandbox-test:latest"

// probeDir holds the static probe binaries (probe, sysprobe), bound read-only into
// sandboxes.
var probeDir string

func TestMain(m *testing.M) {
	native.Init()
	os.Exit(setup(m))
}

func setup(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Println("e2e/docker: skipped, needs root")
		return 0
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		fmt.Printf("e2e/docker: the Docker daemon is not reachable: %v %s\n", err, out)
		return 1
	}
	if out, err := exec.Command("sh", "build-image.sh", testImage).CombinedOutput(); err != nil {
		fmt.Printf("e2e/docker: build the sandbox image: %v\n%s", err, out)
		return 1
	}
	dir, err := os.MkdirTemp("", "airlock-e2e-probe-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer os.RemoveAll(dir)
	defer e2etest.RemoveAirlockBinary()
	os.Chmod(dir, 0o755)
	for name, pkg := range map[string]string{"probe": "./probe", "sysprobe": "../sysprobe"} {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Printf("e2e/docker: build %s: %v\n%s", name, err, out)
			return 1
		}
	}
	probeDir = dir
	return m.Run()
}

// sandboxes counts recorded events by sandbox id.
func sandboxes(r *e2etest.Recorder) map[string]int {
	n := map[string]int{}
	for _, ev := range r.Events() {
		n[ev.SandboxID]++
	}
	return n
}

// realProxy is the airlock proxy with real OPA, and an HTTPS upstream "upstream.test" on
// host loopback with its own CA.
type realProxy struct {
	p      *proxy.Proxy
	ca     *ca.CA
	audit  *e2etest.Recorder
	port   string
	bundle []byte
}

func startRealProxy(t testing.TB, requireAuth bool) *realProxy {
	t.Helper()
	eng := e2etest.Engine(t, e2etest.UpstreamPolicy)
	up, pool := e2etest.TLSUpstream(t, "upstream.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
	}))
	airlockCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	rp := &realProxy{ca: airlockCA, audit: &e2etest.Recorder{}}
	rp.p, err = proxy.New(proxy.Options{
		Decider: eng, CA: airlockCA, Auditor: rp.audit, UpstreamCAs: pool, RequireAuth: requireAuth,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:     e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rp.p.Shutdown(context.Background()) })
	u, _ := url.Parse(up.URL)
	rp.port = u.Port()
	// Only airlock's CA: curl in the image must trust the interception through the CA
	// variables the sandbox module sets, and nothing else.
	rp.bundle = airlockCA.CertPEM()
	return rp
}

func dockerClient(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func newBackend(t testing.TB, o docker.Options) *docker.Backend {
	t.Helper()
	o.Image = testImage
	if o.StateDir == "" {
		o.StateDir = filepath.Join(os.TempDir(), "airlock-e2e-docker")
	}
	b, err := docker.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newSandbox(t testing.TB, o sandbox.Options) *sandbox.Sandbox {
	t.Helper()
	o.ReadOnlyPaths = append(o.ReadOnlyPaths, probeDir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := sandbox.New(ctx, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func run(t testing.TB, s *sandbox.Sandbox, script string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("Run %q: %v (stderr %q)", script, err, res.Stderr)
	}
	return string(res.Stdout) + string(res.Stderr), res.ExitCode
}

func probe(args ...string) string {
	return filepath.Join(probeDir, "probe") + " " + strings.Join(args, " ")
}

// leftovers lists containers and networks carrying the backend's label for id.
func leftovers(t testing.TB, cli *client.Client, id string) []string {
	t.Helper()
	ctx := context.Background()
	f := filters.NewArgs(filters.Arg("label", docker.Label+"="+id))
	var left []string
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		left = append(left, "container "+c.ID[:12])
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		left = append(left, "network "+n.Name)
	}
	return left
}
