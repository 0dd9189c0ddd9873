//go:build e2e

package approval_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

func TestMain(m *testing.M) {
	native.Init()
	os.Exit(m.Run())
}

// received is one request as the upstream got it.
type received struct {
	Method, URI string
	Header      http.Header
	Body        []byte
}

// sbxEnv is the real proxy with real OPA, a real approval service (SQLite) and an HTTPS
// upstream "upstream.test", for sandboxes to send held writes through.
type sbxEnv struct {
	svc    *approval.Service
	proxy  *proxy.Proxy
	audit  *e2etest.Recorder
	base   string // https://upstream.test:PORT
	bundle []byte

	mu  sync.Mutex
	got []received
}

func newSbxEnv(t *testing.T, limits proxy.Limits) *sbxEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("native sandboxes need root")
	}
	e := &sbxEnv{audit: &e2etest.Recorder{}}
	e.svc = e2etest.Approvals(t, t.TempDir())
	up, pool := e2etest.TLSUpstream(t, "upstream.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.got = append(e.got, received{Method: r.Method, URI: r.RequestURI, Header: r.Header.Clone(), Body: b})
		e.mu.Unlock()
		io.WriteString(w, "created\n")
	}))
	u, _ := url.Parse(up.URL)
	e.base = "https://upstream.test:" + u.Port()
	airlockCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	if limits.MaxBodyBytes == 0 {
		limits.MaxBodyBytes = e.svc.MaxBody()
	}
	e.proxy, err = proxy.New(proxy.Options{
		Decider: e2etest.Engine(t, e2etest.HeldWritePolicy), CA: airlockCA, Auditor: e.audit, Approver: e.svc, UpstreamCAs: pool,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:     e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")},
		Limits:       limits,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.proxy.Shutdown(context.Background()) })
	roots, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Skip("no system CA bundle")
	}
	e.bundle = append(append(roots, '\n'), airlockCA.CertPEM()...)
	return e
}

func (e *sbxEnv) sandbox(t *testing.T, id string, memory int64) *sandbox.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := sandbox.New(ctx, sandbox.Options{Backend: &native.Native{}, ID: id, Proxy: e.proxy, CABundle: e.bundle, Memory: memory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb
}

// run starts script in sb and returns a channel with its output and exit code.
func run(sb *sandbox.Sandbox, script string) <-chan string {
	ch := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		res, err := sb.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", script}})
		if err != nil {
			ch <- "run error: " + err.Error()
			return
		}
		ch <- fmt.Sprintf("%s%s\nexit=%d", res.Stdout, res.Stderr, res.ExitCode)
	}()
	return ch
}

func output(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(3 * time.Minute):
		t.Fatal("sandbox command did not finish")
		return ""
	}
}

// pendingOf waits until sandbox id has n pending approvals and returns them.
func (e *sbxEnv) pendingOf(t *testing.T, id string, n int) []approval.Record {
	t.Helper()
	return e2etest.PendingOf(t, e.svc, id, n)
}

func (e *sbxEnv) received() []received {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]received(nil), e.got...)
}

func (e *sbxEnv) decide(t *testing.T, id string, state approval.State) {
	t.Helper()
	if _, err := e.svc.Decide(context.Background(), id, state, "tester", "e2e"); err != nil {
		t.Fatal(err)
	}
}

// TestSandboxReplayIsBoundToEveryByte: curl inside a native sandbox posts a write that is
// approved. Within the retry window, the same write with another Cookie, with a
// method-override header, with one more query parameter or with one body byte changed (curl
// and python) is held again for a new approval, with the difference shown to the approver;
// only the identical retry passes without a prompt. The upstream receives exactly the
// approved requests.
func TestSandboxReplayIsBoundToEveryByte(t *testing.T) {
	e := newSbxEnv(t, proxy.Limits{})
	sb := e.sandbox(t, "sbx-replay", 0)
	curl := func(cookie, extra, query, body string) string {
		return fmt.Sprintf("curl -sS -o /dev/null -w '%%{http_code}' -H 'Content-Type: application/json' -H 'Cookie: %s' %s --data-binary '%s' '%s/write?repo=app%s'",
			cookie, extra, body, e.base, query)
	}
	const body = `{"title":"bug"}`
	first := run(sb, curl("session=agent", "", "", body))
	rec := e.pendingOf(t, "sbx-replay", 1)[0]
	if got := rec.Headers.Get("Cookie"); got != "session=agent" {
		t.Errorf("record Cookie: got %q, want the sandbox's", got)
	}
	e.decide(t, rec.ID, approval.StateApproved)
	if out := output(t, first); !strings.HasPrefix(out, "200") {
		t.Fatalf("approved write: %s", out)
	}

	for _, v := range []struct{ name, script, shows string }{
		{"curl, other Cookie", curl("session=admin", "", "", body), "session=admin"},
		{"curl, method override", curl("session=agent", "-H 'X-HTTP-Method-Override: DELETE'", "", body), "method override"},
		{"curl, extra query parameter", curl("session=agent", "", "&_method=DELETE", body), "_method"},
		{"curl, one body byte", curl("session=agent", "", "", `{"title":"bud"}`), `bud`},
		{"python requests, other Cookie", `python3 -c "
import requests
r = requests.post('` + e.base + `/write?repo=app', data=b'{\"title\":\"bug\"}', headers={'Content-Type': 'application/json', 'Cookie': 'session=stolen'})
print(r.status_code)"`, "session=stolen"},
	} {
		t.Run(v.name, func(t *testing.T) {
			ch := run(sb, v.script)
			held := e.pendingOf(t, "sbx-replay", 1)[0]
			all, _ := json.Marshal(held)
			if !strings.Contains(string(all), v.shows) {
				t.Errorf("record does not show %q: %s", v.shows, all)
			}
			e.decide(t, held.ID, approval.StateDenied)
			if out := output(t, ch); !strings.Contains(out, "403") {
				t.Errorf("denied variant: %s", out)
			}
		})
	}
	if out := output(t, run(sb, curl("session=agent", "", "", body))); !strings.HasPrefix(out, "200") {
		t.Errorf("identical retry within the window: %s, want 200 without a prompt", out)
	}
	got := e.received()
	if len(got) != 2 {
		t.Fatalf("upstream received %d requests, want 2 (the approval and its one retry)", len(got))
	}
	for _, r := range got {
		if r.Header.Get("Cookie") != "session=agent" || string(r.Body) != body || r.URI != "/write?repo=app" || r.Header.Get("X-Http-Method-Override") != "" {
			t.Errorf("upstream received %s %s Cookie %q body %q; want only the approved request", r.Method, r.URI, r.Header.Get("Cookie"), r.Body)
		}
	}
}

// TestSandboxHeldBudget: a sandbox limited to 64 MiB fires 40 parallel 1 MiB posts that
// need approval (as the attack on 13.6 did with 250). airlock holds what the sandbox's
// budget allows (8 MiB of bodies by default: 8 requests) and refuses the rest at once with
// 413 (limits.held_bytes), and a second sandbox's held write is held, approved and sent
// meanwhile.
func TestSandboxHeldBudget(t *testing.T) {
	e := newSbxEnv(t, proxy.Limits{})
	flood := e.sandbox(t, "sbx-flood", 64<<20)
	quiet := e.sandbox(t, "sbx-quiet", 0)
	script := `python3 - <<'EOF'
import threading, urllib.request, urllib.error, collections
body = b'x' * (1 << 20)
out = collections.Counter()
lock = threading.Lock()
def post(i):
    req = urllib.request.Request('` + e.base + `/write?i=%d' % i, data=body, method='POST')
    try:
        code, rule = urllib.request.urlopen(req, timeout=170).status, ''
    except urllib.error.HTTPError as x:
        code, rule = x.code, x.headers.get('X-Airlock-Rule')
    except Exception as x:
        code, rule = 0, type(x).__name__ + ':' + str(getattr(x, 'reason', x)).replace(' ', '_')
    with lock:
        out['%s %s' % (code, rule)] += 1
ts = [threading.Thread(target=post, args=(i,)) for i in range(40)]
[t.start() for t in ts]
[t.join() for t in ts]
for k, v in sorted(out.items()):
    print(k, v)
EOF`
	floodOut := run(flood, script)
	// Wait until all 40 have reached airlock: each is either waiting or already refused.
	budget := int(approval.DefaultMaxHeldBytesPerSandbox / approval.DefaultMaxBody)
	var held []approval.Record
	for deadline := time.Now().Add(150 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		recs, err := e.svc.List(context.Background(), approval.ListFilter{State: approval.StatePending})
		if err != nil {
			t.Fatal(err)
		}
		refusals := 0
		for _, ev := range e.audit.Events() {
			if ev.SandboxID == "sbx-flood" && ev.Kind == "request" && strings.HasPrefix(ev.Rule, "limits.held") {
				refusals++
			}
		}
		if len(recs) > budget {
			t.Fatalf("%d requests of sbx-flood wait for approval; its budget allows %d", len(recs), budget)
		}
		if len(recs)+refusals == 40 {
			held = recs
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 150s: %d waiting, %d refused of 40", len(recs), refusals)
		}
	}
	if len(held) != budget {
		t.Errorf("requests of sbx-flood held: got %d, want %d (its byte budget)", len(held), budget)
	}

	// The other sandbox is not touched.
	ch := run(quiet, "curl -sS -o /dev/null -w '%{http_code}' --data-binary 'hello' '"+e.base+"/write?from=quiet'")
	q := e.pendingOf(t, "sbx-quiet", 1)[0]
	e.decide(t, q.ID, approval.StateApproved)
	if out := output(t, ch); !strings.HasPrefix(out, "200") {
		t.Errorf("the quiet sandbox's approved write while the other floods: %s", out)
	}
	for _, r := range held {
		e.decide(t, r.ID, approval.StateDenied)
	}
	out := output(t, floodOut)
	denied, refused := 0, 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		n, _ := strconv.Atoi(f[2])
		switch f[0] + " " + f[1] {
		case "403 e2e.write":
			denied += n
		case "413 limits.held_bytes", "429 limits.held":
			refused += n
		default:
			t.Errorf("flood outcome %q: neither held-then-denied nor a budget refusal", line)
		}
	}
	if denied != len(held) || refused != 40-len(held) {
		t.Errorf("flood outcome:\n%s\nwant %d held then denied and %d refused by the budget", out, len(held), 40-len(held))
	}
	if recs, _ := e.svc.List(context.Background(), approval.ListFilter{}); len(recs) != len(held)+1 {
		t.Errorf("approvals recorded: got %d, want %d (nothing over the budget reached the approvers)", len(recs), len(held)+1)
	}
}

// TestSandboxDisconnectIsAttributed: an agent that gives up while its write is held (curl
// --max-time) ends the approval as disconnected, by airlock, and the audit event says so;
// approving it afterwards is refused and nothing is sent.
func TestSandboxDisconnectIsAttributed(t *testing.T) {
	e := newSbxEnv(t, proxy.Limits{})
	sb := e.sandbox(t, "sbx-gone", 0)
	ch := run(sb, "curl -sS --max-time 3 --data-binary 'x' '"+e.base+"/write?gone=1'")
	rec := e.pendingOf(t, "sbx-gone", 1)[0]
	output(t, ch)
	var got approval.Record
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got, _ = e.svc.Get(context.Background(), rec.ID)
		if got.State != approval.StatePending {
			break
		}
	}
	if got.State != approval.StateDisconnected || got.DecidedBy != approval.DecidedBySystem {
		t.Fatalf("record after the agent gave up: %s by %s, want disconnected by airlock", got.State, got.DecidedBy)
	}
	if _, err := e.svc.Decide(context.Background(), rec.ID, approval.StateApproved, "tester", ""); err == nil {
		t.Error("approving a disconnected request: got nil error, want ErrDecided")
	}
	found := false
	for _, ev := range e.audit.Events() {
		if ev.ApprovalID == rec.ID {
			found = true
			if ev.ErrorClass != "approval_disconnected" || ev.Approver != "" || !strings.Contains(ev.Reason, "agent disconnected") {
				t.Errorf("audit event: class %q approver %q reason %q; want approval_disconnected, no approver", ev.ErrorClass, ev.Approver, ev.Reason)
			}
		}
	}
	if !found {
		t.Error("no audit event for the disconnected request")
	}
	if n := len(e.received()); n != 0 {
		t.Errorf("upstream received %d requests, want none", n)
	}
}
