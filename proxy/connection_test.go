package proxy

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// connectionPolicy keys on headers that a sandbox may also name in Connection: /foo is denied
// when X-Foo is "bad", /need-bar is denied unless X-Bar is present, /held is held for approval
// unless X-Skip is "yes" (then allowed outright); everything else is allowed.
const connectionPolicy = `package airlock

default decision := {"action": "allow", "rule": "t.allow"}

decision := {"action": "deny", "rule": "t.foo_bad", "reason": "x-foo is bad"} if {
	input.phase == "request"
	input.request.path == "/foo"
	input.request.headers["x-foo"][_] == "bad"
}

decision := {"action": "deny", "rule": "t.need_bar", "reason": "x-bar is required"} if {
	input.phase == "request"
	input.request.path == "/need-bar"
	not input.request.headers["x-bar"]
}

decision := {"action": "approve", "rule": "t.held", "reason": "held"} if {
	input.phase == "request"
	input.request.path == "/held"
	not skip
}

decision := {"action": "allow", "rule": "t.skip"} if {
	input.phase == "request"
	input.request.path == "/held"
	skip
}

skip if input.request.headers["x-skip"][_] == "yes"
`

func withPolicy(t *testing.T, src string) envOpt {
	t.Helper()
	eng := e2etest.Engine(t, src)
	return func(o *Options) { o.Decider = eng }
}

// TestConnectionListedHeadersAreNeitherSeenNorSent: a header the sandbox names in Connection
// is hop-by-hop, so it is not forwarded; the policy decides on exactly the forwarded headers,
// so it does not see it either, in both directions (a deny keyed on its presence does not
// fire, a requirement of it is not met), on plain and intercepted requests, and a held
// request's record and binding hold the same set.
func TestConnectionListedHeadersAreNeitherSeenNorSent(t *testing.T) {
	svc := approvals(t, approval.Config{})
	e := newEnv(t, withPolicy(t, connectionPolicy), withApprover(svc))
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			base := e.http.URL
			if scheme == "https" {
				base = e.https.URL
			}
			c := e.client(nil)
			do := func(path string, h map[string]string) reply {
				req, _ := http.NewRequest(http.MethodGet, base+path, nil)
				for k, v := range h {
					req.Header.Set(k, v)
				}
				return wait(t, send(c, req))
			}
			upstreamHas := func(name string) []string {
				t.Helper()
				ups := e.drain()
				if len(ups) != 1 {
					t.Fatalf("upstream saw %d requests, want 1", len(ups))
				}
				return ups[0].Header.Values(name)
			}
			e.drain()

			// Sent as a plain header, the policy sees it.
			if r := do("/foo", map[string]string{"X-Foo": "bad"}); r.status != http.StatusForbidden || !strings.Contains(r.body, "t.foo_bad") {
				t.Fatalf("X-Foo: bad: got %d %q, want 403 from t.foo_bad", r.status, r.body)
			}
			// Named in Connection it is not forwarded, so the policy must not deny on it...
			for _, conn := range []string{"X-Foo", "x-foo", "keep-alive, X-Foo", " X-FOO "} {
				r := do("/foo", map[string]string{"Connection": conn, "X-Foo": "bad"})
				if r.status != http.StatusOK {
					t.Fatalf("Connection: %q + X-Foo: bad: got %d %q, want 200 (X-Foo is not forwarded)", conn, r.status, r.body)
				}
				if v := upstreamHas("X-Foo"); len(v) != 0 {
					t.Fatalf("Connection: %q: upstream got X-Foo %q", conn, v)
				}
			}
			// ...nor count it as present when it requires it.
			if r := do("/need-bar", map[string]string{"X-Bar": "1"}); r.status != http.StatusOK {
				t.Fatalf("X-Bar: got %d %q, want 200", r.status, r.body)
			}
			if v := upstreamHas("X-Bar"); len(v) != 1 {
				t.Fatalf("upstream X-Bar %q, want one value", v)
			}
			if r := do("/need-bar", map[string]string{"Connection": "X-Bar", "X-Bar": "1"}); r.status != http.StatusForbidden || !strings.Contains(r.body, "t.need_bar") {
				t.Fatalf("Connection: X-Bar + X-Bar: got %d %q, want 403 from t.need_bar (X-Bar is not forwarded)", r.status, r.body)
			}
			e.drain()

			// A header that lets a request skip approval counts only if it is forwarded.
			ch := send(c, func() *http.Request {
				req, _ := http.NewRequest(http.MethodGet, base+"/held", nil)
				req.Header.Set("Connection", "X-Skip, X-Other")
				req.Header.Set("X-Skip", "yes")
				req.Header.Set("X-Other", "o")
				req.Header.Set("X-Kept", "k")
				return req
			}())
			recs := waitPending(t, svc, 1)
			rec := recs[0]
			for _, k := range []string{"X-Skip", "X-Other", "Connection"} {
				if v, ok := rec.Headers[k]; ok {
					t.Errorf("approval record shows %s %q, which is not forwarded", k, v)
				}
			}
			if rec.Headers.Get("X-Kept") != "k" {
				t.Errorf("approval record lost X-Kept: %v", rec.Headers)
			}
			if _, err := svc.Decide(context.Background(), rec.ID, approval.StateApproved, "alice", ""); err != nil {
				t.Fatal(err)
			}
			if r := wait(t, ch); r.status != http.StatusOK {
				t.Fatalf("approved /held: got %d %q", r.status, r.body)
			}
			up := e.drain()
			if len(up) != 1 || up[0].Header.Get("X-Skip") != "" || up[0].Header.Get("X-Other") != "" || up[0].Header.Get("X-Kept") != "k" {
				t.Fatalf("upstream headers of the approved request: %v", up)
			}
		})
	}
}

// TestHoldStoreBoundsAreClearRefusals: a held request over approvals.max_header_bytes is
// refused with 431, and a sandbox past its new-approval limit with 429 and Retry-After, each
// naming its rule and key; neither leaves a record, and both are audited.
func TestHoldStoreBoundsAreClearRefusals(t *testing.T) {
	svc := approvals(t, approval.Config{MaxHeaderBytes: 2048, NewBurst: 1, NewInterval: approval.Duration(time.Hour)})
	e := newEnv(t, withApprover(svc))
	c := e.client(nil)
	post := func(hdr map[string]string) reply {
		req, _ := http.NewRequest(http.MethodPost, e.http.URL+"/write", strings.NewReader("x"))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return wait(t, send(c, req))
	}
	r := post(map[string]string{"X-Big": strings.Repeat("a", 4096)})
	if r.status != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(r.body, "limits.held_header") || !strings.Contains(r.body, "approvals.max_header_bytes") {
		t.Errorf("oversized held headers: got %d %q, want 431 naming limits.held_header", r.status, r.body)
	}
	ch := send(c, func() *http.Request {
		req, _ := http.NewRequest(http.MethodPost, e.http.URL+"/write", strings.NewReader("first"))
		return req
	}())
	rec := waitPending(t, svc, 1)[0]
	r = post(nil)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, "limits.approvals") {
		t.Errorf("past the new-approval burst: got %d Retry-After %q %q, want 429 naming limits.approvals", r.status, r.header.Get("Retry-After"), r.body)
	}
	if all, _ := svc.List(context.Background(), approval.ListFilter{}); len(all) != 1 {
		t.Errorf("records: %d, want only the first", len(all))
	}
	svc.Decide(context.Background(), rec.ID, approval.StateDenied, "alice", "")
	wait(t, ch)
	var rules []string
	for _, ev := range e.audit.Events() {
		rules = append(rules, ev.Rule)
	}
	if j := strings.Join(rules, " "); !strings.Contains(j, "limits.held_header") || !strings.Contains(j, "limits.approvals") {
		t.Errorf("audit rules %v lack the refusals", rules)
	}
}
