//go:build e2e

// Package clients_test runs the ecosystem's own tools inside a native sandbox through the
// real airlock proxy: HTTPS is intercepted with airlock's CA, which the tools trust only
// through the variables the sandbox module sets. Upstreams are local TLS servers with their
// own CA (a git smart-HTTP server, a Python "simple" index, an npm registry stand-in, a plain
// HTTPS service) reached by name through a static resolver. Run as root:
//
//	go test -tags e2e -count=1 ./e2e/clients/
package clients_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/testkit/e2etest"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/sandbox"
)

func TestMain(m *testing.M) {
	native.Init()
	if code, ran := e2etest.RunRootless(); ran { // AIRLOCK_E2E_ROOTLESS=1: as airlock-test
		os.Exit(code)
	}
	code := m.Run()
	e2etest.RemoveAirlockBinary() // TestCurlInAnImage's
	os.Exit(code)
}

// policy: the four test hosts may be reached; on each, reads are allowed (and git's
// upload-pack POST, which is a read), /denied... and /private... are refused, and a git push
// (receive-pack POST) is held for approval.
const policy = `package airlock

default decision := {"action": "deny", "rule": "clients.default", "reason": "not on the clients allowlist"}

hosts := {"upstream.test", "git.test", "pypi.test", "registry.test"}

refused if startswith(input.request.path, "/denied")

refused if startswith(input.request.path, "/private")

decision := {"action": "allow", "rule": "clients.connect"} if {
	input.phase == "connect"
	input.request.host in hosts
}

# Raw TCP (transparent egress): ssh.test on any port passes through uninspected.
decision := {"action": "allow", "tunnel": true, "rule": "clients.raw"} if {
	input.phase == "connect"
	input.request.host == "ssh.test"
}

decision := {"action": "allow", "rule": "clients.read"} if {
	input.phase == "request"
	input.request.host in hosts
	input.request.method in {"GET", "HEAD"}
	not refused
}

decision := {"action": "allow", "rule": "clients.git_fetch"} if {
	input.phase == "request"
	input.request.host == "git.test"
	input.request.method == "POST"
	endswith(input.request.path, "/git-upload-pack")
	not refused
}

decision := {"action": "approve", "rule": "clients.git_push", "reason": "a push needs a human"} if {
	input.phase == "request"
	input.request.host == "git.test"
	input.request.method == "POST"
	endswith(input.request.path, "/git-receive-pack")
	not refused
}
`

type env struct {
	proxy     *proxy.Proxy
	ca        *ca.CA
	audit     *e2etest.Recorder
	approval  *approval.Service
	port      string // the one HTTPS upstream port, for every test host
	plainPort string // a plain HTTP upstream (upstream.test only)
	git       *gitServer
	sb        *sandbox.Sandbox
	workspace string
	bundle    []byte // system roots and airlock's CA

	mu   sync.Mutex
	hits []string // "host method path" as upstreams received them
}

func (e *env) hit(r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hits = append(e.hits, strings.Split(r.Host, ":")[0]+" "+r.Method+" "+r.URL.Path)
}

func (e *env) reached(substr string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, h := range e.hits {
		if strings.Contains(h, substr) {
			return true
		}
	}
	return false
}

func (e *env) url(host, path string) string { return "https://" + host + ":" + e.port + path }

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{audit: &e2etest.Recorder{}, workspace: filepath.Join(dir, "workspace")}
	if err := os.MkdirAll(e.workspace, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(e.workspace, 0o777)

	e.git = newGitServer(t, filepath.Join(dir, "git"))
	pypi := newPackageIndex(t)
	npm := newRegistry(t)
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hit(r)
		switch strings.Split(r.Host, ":")[0] {
		case "git.test":
			e.git.ServeHTTP(w, r)
		case "pypi.test":
			pypi.ServeHTTP(w, r)
		case "registry.test":
			npm.ServeHTTP(w, r)
		default:
			fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
		}
	})
	upCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(mux)
	up.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return upCA.Leaf(h.ServerName)
	}}
	up.StartTLS()
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	e.port = u.Port()
	npm.base = e.url("registry.test", "")
	plain := httptest.NewServer(mux)
	t.Cleanup(plain.Close)
	u, _ = url.Parse(plain.URL)
	e.plainPort = u.Port()

	eng := e2etest.Engine(t, policy)
	e.approval = e2etest.Approvals(t, dir)

	e.ca, err = ca.New()
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Certificate())
	e.proxy, err = proxy.New(proxy.Options{
		Decider: eng, CA: e.ca, Auditor: e.audit, Approver: e.approval, UpstreamCAs: roots,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:     e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")},
		Limits:       proxy.Limits{MaxBodyBytes: e.approval.MaxBody()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.proxy.Shutdown(context.Background()) })

	sys, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Skip("no system CA bundle")
	}
	bundle := append(append(sys, '\n'), e.ca.CertPEM()...)
	e.bundle = bundle
	e.sb = newSandbox(t, sandbox.Options{ID: "sbx-clients", Labels: map[string]string{"suite": "clients"},
		Proxy: e.proxy, CABundle: bundle, Workspace: e.workspace, Timeout: 2 * time.Minute})
	return e
}

// newSandbox makes a native sandbox, closed when the test ends, on the root
// AIRLOCK_E2E_ROOTFS names if it is set (an image's root instead of the host's).
func newSandbox(t *testing.T, o sandbox.Options) *sandbox.Sandbox {
	t.Helper()
	o.Backend = &native.Native{}
	o.Rootfs = e2etest.Rootfs()
	sb, err := sandbox.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb
}

// run runs a shell script in the sandbox and returns its combined output and exit code.
func (e *env) run(t *testing.T, script string) (string, int) {
	t.Helper()
	res, err := e.sb.Run(context.Background(), sandbox.Command{Args: []string{"sh", "-c", script}, Dir: "/workspace"})
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	return string(res.Stdout) + string(res.Stderr), res.ExitCode
}

func (e *env) pending(t *testing.T) approval.Record { return e2etest.Pending(t, e.approval) }

// clientCase is a script run in the sandbox and what it must show.
type clientCase struct {
	name    string
	script  string
	want    []string // substrings of the output
	ok      bool     // exit status 0 wanted (else non-zero)
	reached string   // an upstream hit that must have happened ("" none)
	never   string   // an upstream hit that must not have happened
}

// runCases runs each case in the sandbox, as a subtest, and checks its exit status, its
// output and the upstream hits it made or must not have made.
func (e *env) runCases(t *testing.T, cases []clientCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			out, code := e.run(t, tt.script)
			t.Logf("exit %d:\n%s", code, out)
			if (code == 0) != tt.ok {
				t.Errorf("exit status %d, want success=%v; output:\n%s", code, tt.ok, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not contain %q:\n%s", w, out)
				}
			}
			if tt.reached != "" && !e.reached(tt.reached) {
				t.Errorf("upstream never received %q", tt.reached)
			}
			if tt.never != "" && e.reached(tt.never) {
				t.Errorf("upstream received %q, want it refused before", tt.never)
			}
		})
	}
}

// TestSuiteRoot: with AIRLOCK_E2E_ROOTFS set, the suite's sandboxes run on that root, not
// the host's: a file of the host's /etc that the root lacks is not there inside, and the
// top layer's files airlock writes are.
func TestSuiteRoot(t *testing.T) {
	root := e2etest.Rootfs()
	if root == "" {
		t.Skip("AIRLOCK_E2E_ROOTFS is not set: the sandboxes run on the host's root")
	}
	// Names airlock's top layer puts in /etc (rootfs_linux.go).
	placed := map[string]bool{"passwd": true, "group": true, "hosts": true, "hostname": true, "resolv.conf": true, "ssl": true, "pki": true}
	hostEtc, err := os.ReadDir("/etc")
	if err != nil {
		t.Fatal(err)
	}
	absent := ""
	for _, e := range hostEtc {
		if _, err := os.Lstat(filepath.Join(root, "etc", e.Name())); os.IsNotExist(err) && !placed[e.Name()] {
			absent = "/etc/" + e.Name()
			break
		}
	}
	if absent == "" {
		t.Skipf("%s/etc has every entry of the host's /etc: nothing tells the two roots apart", root)
	}
	sb := newSandbox(t, sandbox.Options{ID: "sbx-clients-root", Timeout: time.Minute})
	res, err := sb.Run(context.Background(), sandbox.Command{Args: []string{"sh", "-c",
		"test -e " + absent + " && echo HOST-ETC; test -s /etc/resolv.conf && grep -q sandbox /etc/passwd && echo TOP-LAYER"}})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout) + string(res.Stderr)
	if strings.Contains(out, "HOST-ETC") || !strings.Contains(out, "TOP-LAYER") {
		t.Errorf("the sandbox sees the host's %s, or not airlock's top layer: not on %s\n%s", absent, root, out)
	}
}
