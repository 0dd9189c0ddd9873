//go:build e2e

package docker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// approvalProxy is the real proxy with a real approval service, for Docker sandboxes.
type approvalProxy struct {
	p      *proxy.Proxy
	svc    *approval.Service
	base   string
	bundle []byte
	mu     sync.Mutex
	cookie []string // Cookie of each request the upstream received
}

func startApprovalProxy(t *testing.T, limits proxy.Limits) *approvalProxy {
	t.Helper()
	ap := &approvalProxy{svc: e2etest.Approvals(t, t.TempDir())}
	up, pool := e2etest.TLSUpstream(t, "upstream.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		ap.mu.Lock()
		ap.cookie = append(ap.cookie, r.Header.Get("Cookie"))
		ap.mu.Unlock()
		io.WriteString(w, "created\n")
	}))
	airlockCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	limits.MaxBodyBytes = ap.svc.MaxBody()
	ap.p, err = proxy.New(proxy.Options{
		Decider: e2etest.Engine(t, e2etest.HeldWritePolicy), CA: airlockCA, Approver: ap.svc, UpstreamCAs: pool,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:     e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")},
		Limits:       limits,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ap.p.Shutdown(context.Background()) })
	u, _ := url.Parse(up.URL)
	ap.base = "https://upstream.test:" + u.Port()
	ap.bundle = airlockCA.CertPEM()
	return ap
}

// pending waits until sandbox id has n pending approvals.
func (ap *approvalProxy) pending(t *testing.T, id string, n int) []approval.Record {
	t.Helper()
	return e2etest.PendingOf(t, ap.svc, id, n)
}

func (ap *approvalProxy) decide(t *testing.T, id string, state approval.State) {
	t.Helper()
	if _, err := ap.svc.Decide(context.Background(), id, state, "tester", "e2e"); err != nil {
		t.Fatal(err)
	}
}

// runAsync runs script in s in the background.
func runAsync(t *testing.T, s *sandbox.Sandbox, script string) <-chan string {
	ch := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", script}})
		if err != nil {
			ch <- "run error: " + err.Error()
			return
		}
		ch <- string(res.Stdout) + string(res.Stderr)
	}()
	return ch
}

func waitOut(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(2 * time.Minute):
		t.Fatal("sandbox command did not finish")
		return ""
	}
}

// TestDockerApprovals: through Docker sandboxes (netns mode), an approved write replayed with
// another Cookie is held again (and the identical retry passes once); a sandbox at its limit
// of waiting requests is refused with 429 while another container's write is held, approved
// and sent.
func TestDockerApprovals(t *testing.T) {
	ap := startApprovalProxy(t, proxy.Limits{MaxHeldPerSandbox: 2})
	b := newBackend(t, docker.Options{Client: dockerClient(t), Mode: docker.ModeNetNS})
	opts := func(id string) sandbox.Options {
		return sandbox.Options{ID: id, Backend: b, Proxy: ap.p, CABundle: ap.bundle, Memory: 128 << 20, Pids: 64}
	}
	a, other := newSandbox(t, opts("sbx-docker-apr-a")), newSandbox(t, opts("sbx-docker-apr-b"))
	post := func(cookie, tag string) string {
		return fmt.Sprintf("curl -sS -o /dev/null -w '%%{http_code} ' -H 'Cookie: %s' --data-binary '{\"n\":1}' '%s/write?tag=%s'", cookie, ap.base, tag)
	}

	ch := runAsync(t, a, post("session=agent", "x"))
	rec := ap.pending(t, "sbx-docker-apr-a", 1)[0]
	if rec.Headers.Get("Cookie") != "session=agent" {
		t.Errorf("record Cookie: got %q", rec.Headers.Get("Cookie"))
	}
	ap.decide(t, rec.ID, approval.StateApproved)
	if out := waitOut(t, ch); !strings.HasPrefix(out, "200") {
		t.Fatalf("approved write: %q", out)
	}
	ch = runAsync(t, a, post("session=admin", "x"))
	again := ap.pending(t, "sbx-docker-apr-a", 1)[0]
	if again.Headers.Get("Cookie") != "session=admin" {
		t.Errorf("replay record Cookie: got %q", again.Headers.Get("Cookie"))
	}
	ap.decide(t, again.ID, approval.StateDenied)
	if out := waitOut(t, ch); !strings.HasPrefix(out, "403") {
		t.Errorf("replay with another Cookie: %q, want held and denied (403)", out)
	}
	if out := waitOut(t, runAsync(t, a, post("session=agent", "x"))); !strings.HasPrefix(out, "200") {
		t.Errorf("identical retry: %q, want 200 without a prompt", out)
	}

	// Budget: two waiting, the third refused; the other container is untouched.
	held := runAsync(t, a, post("c", "1")+" & "+post("c", "2")+" & wait")
	ap.pending(t, "sbx-docker-apr-a", 2)
	out := waitOut(t, runAsync(t, a, "curl -sS -o /dev/null -w '%{http_code} %header{x-airlock-rule}' --data-binary x '"+ap.base+"/write?tag=3'"))
	if out != "429 limits.held" {
		t.Errorf("third waiting request: %q, want 429 limits.held", out)
	}
	ch = runAsync(t, other, post("other", "b"))
	ob := ap.pending(t, "sbx-docker-apr-b", 1)[0]
	ap.decide(t, ob.ID, approval.StateApproved)
	if out := waitOut(t, ch); !strings.HasPrefix(out, "200") {
		t.Errorf("other container while the first is at its limit: %q, want 200", out)
	}
	for _, r := range ap.pending(t, "sbx-docker-apr-a", 2) {
		ap.decide(t, r.ID, approval.StateDenied)
	}
	waitOut(t, held)
	ap.mu.Lock()
	defer ap.mu.Unlock()
	if strings.Join(ap.cookie, ",") != "session=agent,session=agent,other" {
		t.Errorf("upstream received cookies %q; want only the approved requests", ap.cookie)
	}
}
