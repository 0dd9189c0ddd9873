package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/secrets"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// approvals starts a real approval service (SQLite) for a proxy test.
func approvals(t *testing.T, cfg approval.Config) *approval.Service {
	t.Helper()
	cfg.Store = "sqlite:" + filepath.Join(t.TempDir(), "approvals.db")
	if cfg.NewBurst == 0 {
		cfg.NewBurst = 1000 // these tests hold many requests from one sandbox
	}
	svc, err := approval.New(context.Background(), approval.Options{Config: cfg, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

func withApprover(svc *approval.Service) envOpt {
	return func(o *Options) { o.Approver = svc }
}

// waitPending waits until svc has exactly n pending records and returns them, newest first.
func waitPending(t *testing.T, svc *approval.Service, n int) []approval.Record {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		recs, err := svc.List(context.Background(), approval.ListFilter{State: approval.StatePending})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == n {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending approvals: got %d, want %d", len(recs), n)
		}
	}
}

// reply is a response a client got (or its error).
type reply struct {
	status int
	header http.Header
	body   string
	err    error
}

func send(c *http.Client, req *http.Request) <-chan reply {
	ch := make(chan reply, 1)
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			ch <- reply{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
	}()
	return ch
}

func wait(t *testing.T, ch <-chan reply) reply {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("request: %v", r.err)
		}
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no response within 30s")
		return reply{}
	}
}

// drain empties the upstream channel and returns what it held.
func (e *env) drain() []*http.Request {
	var out []*http.Request
	for {
		select {
		case r := <-e.upstream:
			out = append(out, r)
		default:
			return out
		}
	}
}

// TestHoldBindsEverythingForwarded: an approved write is bound to the request exactly as it
// is forwarded. Within the retry window, a request that differs from it in anything that is
// forwarded (a cookie, any header, a body byte, the query's order or values) is held for a
// new approval and does not use the grant; the identical request passes once, unprompted.
func TestHoldBindsEverythingForwarded(t *testing.T) {
	svc := approvals(t, approval.Config{})
	e := newEnv(t, withApprover(svc))
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			base := e.http.URL
			if scheme == "https" {
				base = e.https.URL
			}
			c := e.client(nil)
			mk := func(f func(r *http.Request, body *[]byte, u *string)) *http.Request {
				body := []byte(`{"title":"bound","n":1}`)
				u := base + "/write?a=1&b=2"
				r, _ := http.NewRequest("POST", u, nil)
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Cookie", "session=s1")
				r.Header["X-List"] = []string{"a", "b"}
				r.Header.Set("User-Agent", "agent/1.0")
				if f != nil {
					f(r, &body, &u)
				}
				r2, _ := http.NewRequest("POST", u, bytes.NewReader(body))
				r2.Header = r.Header
				return r2
			}
			e.drain()
			first := send(c, mk(nil))
			rec := waitPending(t, svc, 1)[0]
			if _, err := svc.Decide(context.Background(), rec.ID, approval.StateApproved, "oncall", ""); err != nil {
				t.Fatal(err)
			}
			if r := wait(t, first); r.status != 200 {
				t.Fatalf("approved request: got %d %s", r.status, r.body)
			}
			if got := e.drain(); len(got) != 1 {
				t.Fatalf("upstream received %d requests, want the approved one", len(got))
			}

			for _, v := range []struct {
				name string
				f    func(r *http.Request, body *[]byte, u *string)
			}{
				{"other Cookie value", func(r *http.Request, _ *[]byte, _ *string) { r.Header.Set("Cookie", "session=s2") }},
				{"second Cookie header", func(r *http.Request, _ *[]byte, _ *string) { r.Header.Add("Cookie", "admin=1") }},
				{"no Cookie", func(r *http.Request, _ *[]byte, _ *string) { r.Header.Del("Cookie") }},
				{"X-HTTP-Method-Override added", func(r *http.Request, _ *[]byte, _ *string) { r.Header.Set("X-HTTP-Method-Override", "DELETE") }},
				{"Authorization added", func(r *http.Request, _ *[]byte, _ *string) { r.Header.Set("Authorization", "Bearer x") }},
				{"other User-Agent", func(r *http.Request, _ *[]byte, _ *string) { r.Header.Set("User-Agent", "agent/2.0") }},
				{"header values reordered", func(r *http.Request, _ *[]byte, _ *string) { r.Header["X-List"] = []string{"b", "a"} }},
				{"header value appended", func(r *http.Request, _ *[]byte, _ *string) { r.Header.Add("X-List", "c") }},
				{"empty header added", func(r *http.Request, _ *[]byte, _ *string) { r.Header["X-Empty"] = []string{""} }},
				{"Content-Type changed", func(r *http.Request, _ *[]byte, _ *string) { r.Header.Set("Content-Type", "text/plain") }},
				{"one body byte changed", func(_ *http.Request, b *[]byte, _ *string) { (*b)[len(*b)-2] = '2' }},
				{"body one byte longer", func(_ *http.Request, b *[]byte, _ *string) { *b = append(*b, '\n') }},
				{"body emptied", func(_ *http.Request, b *[]byte, _ *string) { *b = nil }},
				{"query order", func(_ *http.Request, _ *[]byte, u *string) { *u = strings.Replace(*u, "a=1&b=2", "b=2&a=1", 1) }},
				// The query is forwarded re-encoded from what the policy saw (a=%31 goes out as a=1, the
				// approved bytes), so only a change in what is decoded is a new request.
				{"query value changed", func(_ *http.Request, _ *[]byte, u *string) { *u = strings.Replace(*u, "a=1", "a=1+", 1) }},
				{"query parameter added", func(_ *http.Request, _ *[]byte, u *string) { *u += "&_method=DELETE" }},
			} {
				t.Run(v.name, func(t *testing.T) {
					ch := send(c, mk(v.f))
					held := waitPending(t, svc, 1)[0]
					if held.ID == rec.ID || held.RequestSHA256 == rec.RequestSHA256 {
						t.Errorf("variant bound to the approved request's hash")
					}
					if _, err := svc.Decide(context.Background(), held.ID, approval.StateDenied, "oncall", "variant"); err != nil {
						t.Fatal(err)
					}
					if r := wait(t, ch); r.status != http.StatusForbidden {
						t.Errorf("denied variant: got %d, want 403", r.status)
					}
					if got := e.drain(); len(got) != 0 {
						t.Errorf("upstream received %d requests for a denied variant", len(got))
					}
				})
			}

			// The identical retry uses the grant the variants could not.
			r := wait(t, send(c, mk(nil)))
			if r.status != 200 {
				t.Fatalf("identical retry within the window: got %d %s, want 200 without a prompt", r.status, r.body)
			}
			if got := e.drain(); len(got) != 1 {
				t.Errorf("upstream received %d requests for the identical retry, want 1", len(got))
			}
			waitPending(t, svc, 0)
		})
	}
}

// TestHoldRecordIsWhatIsForwarded: the approver sees every header the upstream receives
// (except what airlock's transport adds) with the same values, the URL the upstream
// receives, and never the sandbox's proxy credential.
func TestHoldRecordIsWhatIsForwarded(t *testing.T) {
	svc := approvals(t, approval.Config{})
	e := newEnv(t, withApprover(svc))
	tok := mustIssue(t, e.proxy, identity.Identity{ID: "sbx-rec"})
	for _, base := range []string{e.http.URL, e.https.URL} {
		c := e.client(url.UserPassword("sbx-rec", tok))
		req, _ := http.NewRequest("POST", base+"/write?q=%2Fx&_method=PUT", strings.NewReader("a=1&_method=DELETE"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Cookie", "sid=abc")
		req.Header.Set("X-HTTP-Method-Override", "PATCH")
		req.Header.Set("Connection", "X-Hop")
		req.Header.Set("X-Hop", "dropped as hop-by-hop")
		req.Header.Set("Expect", "100-continue")
		e.drain()
		ch := send(c, req)
		rec := waitPending(t, svc, 1)[0]
		if _, ok := rec.Headers["Proxy-Authorization"]; ok || strings.Contains(fmt.Sprint(rec), tok) {
			t.Errorf("record carries the sandbox's proxy credential: %v", rec.Headers)
		}
		for _, gone := range []string{"X-Hop", "Connection", "Expect", "Content-Length"} {
			if _, ok := rec.Headers[gone]; ok {
				t.Errorf("record shows %s, which is not forwarded as such", gone)
			}
		}
		if len(rec.Warnings) < 3 {
			t.Errorf("warnings: got %q, want the header, query and form overrides", rec.Warnings)
		}
		if _, err := svc.Decide(context.Background(), rec.ID, approval.StateApproved, "oncall", ""); err != nil {
			t.Fatal(err)
		}
		if r := wait(t, ch); r.status != 200 {
			t.Fatalf("approved: got %d %s", r.status, r.body)
		}
		got := e.drain()
		if len(got) != 1 {
			t.Fatalf("upstream received %d requests, want 1", len(got))
		}
		up := got[0]
		if want := strings.TrimPrefix(strings.TrimPrefix(rec.URL, "http://"), "https://"); up.Host+up.RequestURI != want {
			t.Errorf("upstream target %s%s, record URL %s", up.Host, up.RequestURI, rec.URL)
		}
		for k, vs := range rec.Headers {
			if fmt.Sprint(up.Header[k]) != fmt.Sprint(vs) {
				t.Errorf("header %s: record %q, upstream received %q", k, vs, up.Header[k])
			}
		}
		for k := range up.Header {
			if _, ok := rec.Headers[k]; !ok && k != "Accept-Encoding" && k != "Content-Length" {
				t.Errorf("upstream received header %s that the approver did not see", k)
			}
		}
	}
}

// TestHoldOutcomes: the agent's answer and the audit event say who ended a held request:
// an approver's denial, an approver's cancel, the timeout, or the agent going away.
func TestHoldOutcomes(t *testing.T) {
	svc := approvals(t, approval.Config{Timeout: approval.Duration(3 * time.Second)})
	e := newEnv(t, withApprover(svc))
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		end    func(id string, cancel context.CancelFunc)
		status int
		class  string
		reason string
		by     string
	}{
		{"denied", func(id string, _ context.CancelFunc) {
			svc.Decide(ctx, id, approval.StateDenied, "oncall", "wrong repo")
		}, 403, "approval_denied", "denied by approver oncall: wrong repo", "oncall"},
		{"cancelled", func(id string, _ context.CancelFunc) {
			svc.Decide(ctx, id, approval.StateCancelled, "oncall", "asked twice")
		}, 403, "approval_cancelled", "cancelled by approver oncall", "oncall"},
		{"expired", func(string, context.CancelFunc) {}, 403, "approval_expired", "no approver decided in time", ""},
		{"disconnected", func(_ string, cancel context.CancelFunc) { cancel() }, statusClientClosed, "approval_disconnected", "the agent disconnected", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := e.audit.Len()
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			req, _ := http.NewRequestWithContext(rctx, "POST", e.https.URL+"/write", strings.NewReader(tc.name))
			ch := send(e.client(nil), req)
			rec := waitPending(t, svc, 1)[0]
			tc.end(rec.ID, cancel)
			r := <-ch
			if tc.name != "disconnected" && (r.status != tc.status || !strings.Contains(r.header.Get("X-Airlock-Reason"), tc.reason) ||
				r.header.Get("X-Airlock-Approval-State") != strings.TrimPrefix(tc.class, "approval_")) {
				t.Errorf("answer: got %d %q state %q, want %d %q", r.status, r.header.Get("X-Airlock-Reason"), r.header.Get("X-Airlock-Approval-State"), tc.status, tc.reason)
			}
			var ev *struct{}
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				for _, got := range e.audit.Since(n) {
					if got.ApprovalID != rec.ID {
						continue
					}
					ev = &struct{}{}
					if got.Status != tc.status || got.ErrorClass != tc.class || !strings.Contains(got.Reason, tc.reason) || got.Approver != tc.by {
						t.Errorf("audit: got status %d class %q reason %q approver %q; want %d %q %q %q", got.Status, got.ErrorClass, got.Reason, got.Approver, tc.status, tc.class, tc.reason, tc.by)
					}
				}
				if ev != nil {
					break
				}
			}
			if ev == nil {
				t.Fatalf("no audit event for %s", rec.ID)
			}
			if got, _ := svc.Get(ctx, rec.ID); string(got.State) != strings.TrimPrefix(tc.class, "approval_") {
				t.Errorf("record state: got %q", got.State)
			}
		})
	}
	if got := e.drain(); len(got) != 0 {
		t.Errorf("upstream received %d requests; want none", len(got))
	}
}

// TestApprovedBindingCheckedAtSend: the round trip recomputes the binding; a request changed
// after its approval (a header, the URL, the method) is refused, not sent.
func TestApprovedBindingCheckedAtSend(t *testing.T) {
	mk := func() *http.Request {
		r := httptest.NewRequest("POST", "https://h.example/write?a=1", nil)
		r.Header = http.Header{"Cookie": {"s=1"}, "Content-Type": {"application/json"}}
		return r
	}
	body := []byte(`{"a":1}`)
	r := mk()
	a := &approvedRequest{id: "apr-1", hash: approval.RequestHash(r.Method, forwardedURL(r.URL), forwardedHeaders(r.Header), body), body: body}
	if f := a.verify(mk()); f != nil {
		t.Fatalf("unchanged request refused: %v", f.reason)
	}
	same := mk()
	same.Header.Set("Content-Length", "7") // derived from the body, not bound on its own
	if f := a.verify(same); f != nil {
		t.Errorf("request with a Content-Length header refused: %v", f.reason)
	}
	for name, change := range map[string]func(*http.Request){
		"cookie":   func(r *http.Request) { r.Header.Set("Cookie", "s=2") },
		"override": func(r *http.Request) { r.Header.Set("X-Http-Method-Override", "DELETE") },
		"query":    func(r *http.Request) { r.URL.RawQuery = "a=2" },
		"method":   func(r *http.Request) { r.Method = "PUT" },
		"host":     func(r *http.Request) { r.URL.Host = "other.example" },
	} {
		r := mk()
		change(r)
		if f := a.verify(r); f == nil || f.rule != "approval.binding" {
			t.Errorf("%s changed after approval: got %v, want refused (approval.binding)", name, f)
		}
	}
}

const canaryHoldPolicy = `package airlock

default decision := {"action": "deny", "rule": "canary.deny", "reason": "not allowed"}

decision := {"action": "allow", "rule": "canary.connect"} if input.phase == "connect"

decision := {"action": "approve", "rule": "canary.write", "reason": "writes need a human", "credentials": ["canary"]} if {
	input.phase == "request"
	input.request.method == "POST"
}
`

// TestHeldCanaryNeverInApprovalRecords: a held write whose approval attaches a credential
// (a canary): the upstream receives it, and neither the approval record, its stored body,
// the event stream nor the webhook ever carries it, nor the sandbox's proxy credential.
func TestHeldCanaryNeverInApprovalRecords(t *testing.T) {
	var b [12]byte
	rand.Read(b[:])
	canary := "sk-canary-" + hex.EncodeToString(b[:])
	t.Setenv("AIRLOCK_TEST_CANARY_HOLD", canary)
	var mu sync.Mutex
	var hooks bytes.Buffer
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		hooks.Write(body)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	svc := approvals(t, approval.Config{Webhook: hook.URL})
	events, stop := svc.Subscribe()
	defer stop()
	broker, err := secrets.New(context.Background(), secrets.Options{Credentials: map[string]secrets.CredentialConfig{
		"canary": {Env: "AIRLOCK_TEST_CANARY_HOLD", Inject: secrets.Inject{Header: "Authorization", Value: "Bearer {{ .value }}"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Close(context.Background()) })
	eng := e2etest.Engine(t, canaryHoldPolicy)
	e := newEnv(t, withApprover(svc), func(o *Options) { o.Decider = eng; o.Credentials = broker })
	tok := mustIssue(t, e.proxy, identity.Identity{ID: "sbx-canary"})
	c := e.client(url.UserPassword("sbx-canary", tok))

	req, _ := http.NewRequest("POST", e.https.URL+"/write?x=1", strings.NewReader(`{"n":1}`))
	req.Header.Set("Authorization", "Bearer sandbox-own") // replaced by the credential
	ch := send(c, req)
	rec := waitPending(t, svc, 1)[0]
	svc.Decide(context.Background(), rec.ID, approval.StateApproved, "oncall", "")
	if r := wait(t, ch); r.status != 200 {
		t.Fatalf("approved: got %d %s", r.status, r.body)
	}
	up := e.drain()
	if len(up) != 1 || up[0].Header.Get("Authorization") != "Bearer "+canary {
		t.Fatal("the upstream did not receive the canary credential: the test would prove nothing")
	}
	var seen bytes.Buffer
	recs, _ := svc.List(context.Background(), approval.ListFilter{})
	json.NewEncoder(&seen).Encode(recs)
	body, _ := svc.Store().Body(context.Background(), rec.ID)
	seen.Write(body)
	for len(events) > 0 {
		json.NewEncoder(&seen).Encode(<-events)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := hooks.Len()
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	seen.Write(hooks.Bytes())
	mu.Unlock()
	if !strings.Contains(seen.String(), rec.ID) || !strings.Contains(seen.String(), "approval.pending") {
		t.Fatal("records or webhook missing: the check would prove nothing")
	}
	for name, s := range map[string]string{"the canary": canary, "the proxy credential": tok} {
		if strings.Contains(seen.String(), s) {
			t.Errorf("%s reached an approval record, event or webhook", name)
		}
	}
}
