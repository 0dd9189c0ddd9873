//go:build e2e

package bypass_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

func TestMain(m *testing.M) {
	native.Init()
	os.Exit(m.Run())
}

// targetPolicy reads the query but not the headers, so its decisions are cached (keyed on the
// query): reads of /public/...
// are allowed unless a parameter is named admin or force; a POST to /write is allowed, and
// held for approval when it carries force.
const targetPolicy = `package airlock

default decision := {"action": "deny", "rule": "target.default", "reason": "not allowed"}

privileged if {
	some name, _ in input.request.query
	name in {"admin", "force"}
}

decision := {"action": "allow", "rule": "target.connect"} if {
	input.phase == "connect"
	input.request.host == "upstream.test"
}

decision := {"action": "allow", "rule": "target.read"} if {
	input.phase == "request"
	input.request.method == "GET"
	startswith(input.request.path, "/public/")
	not privileged
}

decision := {"action": "deny", "rule": "target.privileged", "reason": "admin and force are not for agents"} if {
	input.phase == "request"
	input.request.method == "GET"
	startswith(input.request.path, "/public/")
	privileged
}

decision := {"action": "allow", "rule": "target.write"} if {
	input.phase == "request"
	input.request.method == "POST"
	input.request.path == "/write"
	not input.request.query.force
}

decision := {"action": "approve", "rule": "target.force", "reason": "a forced write needs a human"} if {
	input.phase == "request"
	input.request.method == "POST"
	input.request.path == "/write"
	input.request.query.force
}
`

// sendPy sends one request with exactly the target given, through the sandbox's proxy
// variable, in plain HTTP or (with a host:port) inside a CONNECT tunnel, and prints the
// status and X-Airlock-Rule. http.client checks only for spaces and control bytes, so '#',
// ';' and backslashes go out as written.
const sendPy = `import http.client, os, ssl, sys
from urllib.parse import urlsplit
proxy = urlsplit(os.environ["http_proxy"])
method, target = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:
    host, port = sys.argv[3].rsplit(":", 1)
    c = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=ssl.create_default_context(), timeout=30)
    c.set_tunnel(host, int(port))
else:
    c = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=30)
c.putrequest(method, target, skip_accept_encoding=True)
c.endheaders()
r = c.getresponse()
r.read()
print(r.status, r.getheader("X-Airlock-Rule", ""))
`

// recordingDecider keeps the request-phase inputs the policy decided on.
type recordingDecider struct {
	proxy.Decider
	mu     sync.Mutex
	inputs []rego.Input
}

func (d *recordingDecider) Decide(ctx context.Context, in *rego.Input) (rego.Decision, error) {
	if in.Phase == rego.PhaseRequest {
		d.mu.Lock()
		d.inputs = append(d.inputs, *in)
		d.mu.Unlock()
	}
	return d.Decider.Decide(ctx, in)
}

func (d *recordingDecider) last() (rego.Input, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.inputs) == 0 {
		return rego.Input{}, 0
	}
	return d.inputs[len(d.inputs)-1], len(d.inputs)
}

// TestRequestTargetsFromASandbox: curl and Python in a native sandbox send the ambiguous
// ambiguous request targets, and the decision-cache attack, through the real proxy (plain
// HTTP and intercepted HTTPS). Each is refused with 400 from rule protocol, or the upstream
// receives exactly the path and query the policy decided on; the audit event says the same.
func TestRequestTargetsFromASandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("native sandboxes need root")
	}
	rec := &recordingDecider{Decider: e2etest.Engine(t, targetPolicy)}
	e := newEnv(t, func(o *proxy.Options) { o.Decider = rec })
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "send.py"), []byte(sendPy), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(ws, 0o777)
	sys, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Skip("no system CA bundle")
	}
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.Options{Backend: &native.Native{}, ID: "sbx-targets", Proxy: e.proxy, Workspace: ws,
		CABundle: append(append(sys, '\n'), e.ca.CertPEM()...), Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	run := func(t *testing.T, script string) string {
		t.Helper()
		res, err := sb.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", script}, Dir: "/workspace"})
		if err != nil {
			t.Fatalf("run %q: %v", script, err)
		}
		return strings.TrimSpace(string(res.Stdout) + string(res.Stderr))
	}

	plain := e.upstreamURL()
	tls := "https://" + e.tlsTarget("upstream.test")
	curl := func(method, u string) string {
		return "curl -sS --path-as-is -X " + method + " -o /dev/null -w '%{http_code} %header{x-airlock-rule}' '" + u + "'"
	}
	py := func(target string) string { return "python3 send.py GET '" + target + "'" }
	pyTunnel := func(target string) string {
		return "python3 send.py GET '" + target + "' " + e.tlsTarget("upstream.test")
	}
	tests := []struct {
		name, script string
		status       int
		rule         string
		sent         string // RequestURI the upstream receives; "" nothing
	}{
		{"curl: ';' in the query", curl("GET", plain+"/public/a?x=1;admin=true"), 400, "protocol", ""},
		{"curl https: ';' in the query", curl("GET", tls+"/public/a?x=1;admin=true"), 400, "protocol", ""},
		{"curl: admin as a real pair", curl("GET", plain+"/public/a?x=1&admin=true"), 403, "target.privileged", ""},
		{"curl: force inside a value (allowed, cached)", curl("GET", plain+"/public/a?a=1%03force%04true"), 200, "target.read", "/public/a?a=1%03force%04true"},
		{"curl: force as a real pair after the cached one", curl("GET", plain+"/public/a?a=1&force=true"), 403, "target.privileged", ""},
		{"curl https: force inside a value", curl("GET", tls+"/public/a?a=1%03force%04true"), 200, "target.read", "/public/a?a=1%03force%04true"},
		{"curl https: force as a real pair after it", curl("GET", tls+"/public/a?a=1&force=true"), 403, "target.privileged", ""},
		{"curl: the canonical query", curl("GET", plain+"/public/a?q=a+b&&c&q=%7e"), 200, "target.read", "/public/a?q=a%20b&c=&q=~"},
		{"curl: an encoded name", curl("GET", plain+"/public/a?%61dmin=1"), 403, "target.privileged", ""},
		{"curl: an empty name", curl("GET", plain+"/public/a?=admin"), 400, "protocol", ""},
		{"curl: a control byte in a name", curl("GET", plain+"/public/a?admin%00=1"), 400, "protocol", ""},
		{"curl: a malformed escape", curl("GET", plain+"/public/a?x=%zz"), 400, "protocol", ""},
		{"curl: an encoded slash next to a dot segment", curl("GET", plain+"/public/..%2Fadmin"), 400, "protocol", ""},
		{"curl https: ';' path parameters", curl("GET", tls+"/public/..;/admin"), 400, "protocol", ""},
		{"python: '#' in the target", py(plain + "/public/a?x=1#admin=true"), 400, "protocol", ""},
		{"python: a backslash dot segment", py(plain + "/public/..\\admin"), 400, "protocol", ""},
		{"python tunnel: ';' in the query", pyTunnel("/public/a?x=1;admin=true"), 400, "protocol", ""},
		{"python tunnel: '#' in the path", pyTunnel("/public/a#/../../admin"), 400, "protocol", ""},
		{"python tunnel: the canonical form", pyTunnel("/public/a%2fb?x=%C3%A9&y=1+2"), 200, "target.read", "/public/a%2Fb?x=%C3%A9&y=1%202"},
		{"curl: a write with force inside a value (allowed, cached)", curl("POST", plain+"/write?a=1%03force%04true"), 200, "target.write", "/write?a=1%03force%04true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nev, nseen := e.audit.Len(), e.seenLen()
			_, ninputs := rec.last()
			out := run(t, tt.script)
			if want := fmt.Sprintf("%d %s", tt.status, tt.rule); out != want && !(tt.status == 200 && strings.HasPrefix(out, "200")) {
				t.Errorf("%s: got %q, want %q", tt.script, out, want)
			}
			ups := e.seenSince(nseen)
			if tt.sent == "" {
				if len(ups) > 0 {
					t.Errorf("the upstream received %v, want nothing", uris(ups))
				}
			} else {
				checkSentIsDecided(t, rec, ninputs, ups, tt.sent)
			}
			checkTargetAudit(t, e, nev, tt.status, tt.rule)
		})
	}

	// The cached allow of POST /write?a=1%03force%04true must not answer for a write that
	// really carries force=true: that one is held for approval and, denied, never sent.
	t.Run("curl: a write with force as a real pair is held, not served from the cache", func(t *testing.T) {
		nev, nseen := e.audit.Len(), e.seenLen()
		done := make(chan string, 1)
		go func() {
			res, err := sb.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", curl("POST", plain+"/write?a=1&force=true")}, Dir: "/workspace"})
			if err != nil {
				done <- err.Error()
				return
			}
			done <- strings.TrimSpace(string(res.Stdout) + string(res.Stderr))
		}()
		held := e.pending(t)
		if held.Rule != "target.force" || !strings.HasSuffix(held.URL, "/write?a=1&force=true") {
			t.Errorf("held %s (rule %s), want /write?a=1&force=true under target.force", held.URL, held.Rule)
		}
		if n := len(e.seenSince(nseen)); n != 0 {
			t.Errorf("the upstream received %d requests while the write was held", n)
		}
		if _, err := e.approval.Decide(ctx, held.ID, approval.StateDenied, "tester", "no"); err != nil {
			t.Fatal(err)
		}
		if out := <-done; !strings.HasPrefix(out, "403") {
			t.Errorf("denied write: curl printed %q, want 403", out)
		}
		if ups := e.seenSince(nseen); len(ups) != 0 {
			t.Errorf("the upstream received %v, want nothing", uris(ups))
		}
		evs := e.audit.Since(nev)
		if len(evs) == 0 || evs[len(evs)-1].Rule != "target.force" || evs[len(evs)-1].Decision == "allow" {
			t.Errorf("audit events %+v, want the held write's, not an allow", evs)
		}
	})
}

// checkSentIsDecided: the upstream received one request, for want, and its path and query
// as net/url reads them are those of the last policy input.
func checkSentIsDecided(t *testing.T, rec *recordingDecider, before int, ups []seen, want string) {
	t.Helper()
	if len(ups) != 1 || ups[0].URI != want {
		t.Errorf("the upstream received %v, want exactly %s", uris(ups), want)
		return
	}
	in, n := rec.last()
	if n != before+1 {
		t.Errorf("%d policy evaluations, want 1", n-before)
		return
	}
	u, err := url.ParseRequestURI(ups[0].URI)
	if err != nil {
		t.Fatal(err)
	}
	q := map[string][]string(u.Query())
	if len(q) == 0 {
		q = nil
	}
	if u.EscapedPath() != in.Request.Path || !reflect.DeepEqual(q, in.Request.Query) {
		t.Errorf("the upstream read %s %q, the policy decided on %s %q", u.EscapedPath(), q, in.Request.Path, in.Request.Query)
	}
}

// checkTargetAudit: the case left an audit event with its status, rule and decision.
func checkTargetAudit(t *testing.T, e *env, from, status int, rule string) {
	t.Helper()
	decision := map[int]string{200: "allow", 400: "error", 403: "deny"}[status]
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = got[:0]
		for _, ev := range e.audit.Since(from) {
			if ev.Kind != "request" {
				continue
			}
			if ev.Status == status && ev.Rule == rule && string(ev.Decision) == decision {
				return
			}
			got = append(got, fmt.Sprintf("%d %s %s", ev.Status, ev.Rule, ev.Decision))
		}
	}
	t.Errorf("no request audit event %d %s %s; got %v", status, rule, decision, got)
}
