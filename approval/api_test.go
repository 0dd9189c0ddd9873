package approval

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	oncallToken = "oncall-token-0123456789abcdef"
	secondToken = "second-token-fedcba9876543210"
)

// apiFixture is a Service with two approvers behind a real HTTP server.
type apiFixture struct {
	s   *Service
	srv *httptest.Server
	ev  <-chan Event
}

func newAPIFixture(t *testing.T) *apiFixture {
	t.Helper()
	dir := t.TempDir()
	var approvers []ApproverConfig
	for name, tok := range map[string]string{"oncall": oncallToken, "second": secondToken} {
		p := filepath.Join(dir, name+".token")
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		approvers = append(approvers, ApproverConfig{Name: name, TokenFile: p})
	}
	s := newTestService(t, storeKinds()[0].dsn(t), Config{Approvers: approvers})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	ev, cancel := s.Subscribe()
	t.Cleanup(cancel)
	return &apiFixture{s: s, srv: srv, ev: ev}
}

// hold starts a held request and returns its record and outcome channel.
func (f *apiFixture) hold(t *testing.T, body string) (Record, <-chan holdResult) {
	t.Helper()
	ch := holdAsync(context.Background(), f.s, sampleRequest(body))
	return nextCreated(t, f.ev), ch
}

// signIn logs in through the form and returns the session cookie's value.
func (f *apiFixture) signIn(t *testing.T, name, tok string) string {
	t.Helper()
	return signInAt(t, f.srv.URL, name, tok)
}

func signInAt(t *testing.T, base, name, tok string) string {
	t.Helper()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.PostForm(base+"/approvals/login", url.Values{"name": {name}, "token": {tok}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == cookieName && c.Value != "" {
			return c.Value
		}
	}
	t.Fatalf("sign in as %s: got %d and no session cookie", name, resp.StatusCode)
	return ""
}

func do(t *testing.T, method, u string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestAPIAuth: only an approver's token opens the API; a sandbox's credential never does.
func TestAPIAuth(t *testing.T) {
	f := newAPIFixture(t)
	rec, held := f.hold(t, `{"x":1}`)
	bearer := "Bearer " + oncallToken
	for _, tc := range []struct {
		name   string
		method string
		path   string
		hdr    map[string]string
		want   int
	}{
		{"list without token", "GET", "/v1/approvals", nil, 401},
		{"get without token", "GET", "/v1/approvals/" + rec.ID, nil, 401},
		{"approve without token", "POST", "/v1/approvals/" + rec.ID + "/approve", nil, 401},
		{"stream without token", "GET", "/v1/approvals/stream", nil, 401},
		{"page without token", "GET", "/approvals", nil, 401},
		{"wrong token", "GET", "/v1/approvals", map[string]string{"Authorization": "Bearer not-an-approver-token"}, 403},
		{"approve with wrong token", "POST", "/v1/approvals/" + rec.ID + "/approve", map[string]string{"Authorization": "Bearer " + oncallToken + "x"}, 403},
		{"basic scheme", "GET", "/v1/approvals", map[string]string{"Authorization": "Basic b25jYWxsOng="}, 401},
		{"sandbox credential alone", "GET", "/v1/approvals", map[string]string{"Proxy-Authorization": "Basic c2J4OnNlY3JldA=="}, 403},
		{"approver token plus sandbox credential", "POST", "/v1/approvals/" + rec.ID + "/approve",
			map[string]string{"Authorization": bearer, "Proxy-Authorization": "Basic c2J4OnNlY3JldA=="}, 403},
		{"sandbox credential on login", "POST", "/approvals/login",
			map[string]string{"Proxy-Authorization": "Basic c2J4OnNlY3JldA==", "Content-Type": "application/x-www-form-urlencoded"}, 403},
		{"cookie post without CSRF", "POST", "/v1/approvals/" + rec.ID + "/approve",
			map[string]string{"Cookie": cookieName + "=" + f.signIn(t, "oncall", oncallToken), "Content-Type": "application/x-www-form-urlencoded"}, 403},
		{"raw token as the cookie", "GET", "/v1/approvals", map[string]string{"Cookie": cookieName + "=" + oncallToken}, 401},
		{"raw token as the page cookie", "GET", "/approvals", map[string]string{"Cookie": cookieName + "=" + oncallToken}, 401},
		{"valid token", "GET", "/v1/approvals/" + rec.ID, map[string]string{"Authorization": bearer}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, tc.method, f.srv.URL+tc.path, tc.hdr, "")
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s: got %d, want %d (%s)", tc.method, tc.path, resp.StatusCode, tc.want, body)
			}
			if strings.Contains(body, oncallToken) || strings.Contains(body, secondToken) {
				t.Errorf("response echoes a token: %s", body)
			}
		})
	}
	if r, _ := f.s.Get(context.Background(), rec.ID); r.State != StatePending {
		t.Fatalf("after refused requests: record is %q, want still pending", r.State)
	}
	f.s.Decide(context.Background(), rec.ID, StateDenied, "oncall", "")
	waitHold(t, held)
}

// TestAPIDecide: approve through the API as one approver; `by` cannot name someone else;
// deciding again is 409; an unknown id is 404.
func TestAPIDecide(t *testing.T) {
	f := newAPIFixture(t)
	rec, held := f.hold(t, `{"x":2}`)
	c := &Client{BaseURL: f.srv.URL, Token: secondToken}
	ctx := context.Background()

	pending, err := c.List(ctx, StatePending)
	if err != nil || len(pending) != 1 || pending[0].ID != rec.ID {
		t.Fatalf("List(pending): got %v, %v; want [%s]", ids(pending), err, rec.ID)
	}
	resp, body := do(t, "POST", f.srv.URL+"/v1/approvals/"+rec.ID+"/approve",
		map[string]string{"Authorization": "Bearer " + secondToken, "Content-Type": "application/json"},
		`{"by":"the-ceo","comment":"ship it"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("approve: got %d %s", resp.StatusCode, body)
	}
	var got Record
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.State != StateApproved || got.DecidedBy != "second" || got.Comment != "ship it" {
		t.Errorf("approve answer: got state %q by %q comment %q; want approved by second (the token's owner)", got.State, got.DecidedBy, got.Comment)
	}
	for _, k := range []string{`"id"`, `"state"`, `"sandbox"`, `"method"`, `"url"`, `"body_sha256"`, `"rule"`, `"reason"`, `"created"`, `"expires"`, `"decided_by"`} {
		if !strings.Contains(body, k) {
			t.Errorf("record JSON lacks %s: %s", k, body)
		}
	}
	if h := waitHold(t, held); !h.res.Approved() || h.res.DecidedBy != "second" {
		t.Errorf("Hold: got %+v, want approved by second", h.res)
	}

	_, err = c.Deny(ctx, rec.ID, "too late")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || !errors.Is(err, ErrDecided) {
		t.Errorf("deny after approve: got %v, want 409 ErrDecided", err)
	}
	if _, err := c.Get(ctx, "apr-nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(unknown): got %v, want ErrNotFound", err)
	}
	if _, err := c.List(ctx, "bogus"); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("List(bogus state): got %v, want a 400", err)
	}
	if s := c.String(); strings.Contains(s, secondToken) {
		t.Errorf("Client.String leaks the token: %s", s)
	}
}

// TestAPIPageForms: log in with the form, see the pending request, deny it with the form.
func TestAPIPageForms(t *testing.T) {
	f := newAPIFixture(t)
	rec, held := f.hold(t, `{"title":"<script>alert(1)</script>"}`)
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}

	for _, form := range []url.Values{
		{"name": {"oncall"}, "token": {"wrong-token-wrong-token"}},
		{"name": {"second"}, "token": {oncallToken}}, // someone else's name
		{"token": {"wrong-token-wrong-token"}},       // no name, wrong token
	} {
		resp, err := hc.PostForm(f.srv.URL+"/approvals/login", form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("login with %v: got %d, want 403", form["name"], resp.StatusCode)
		}
	}
	resp, err := hc.PostForm(f.srv.URL+"/approvals/login", url.Values{"token": {oncallToken}}) // the name is optional
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), rec.ID) {
		t.Fatalf("page after login: got %d, want 200 listing %s", resp.StatusCode, rec.ID)
	}
	if strings.Contains(string(page), "<script>alert(1)</script>") {
		t.Error("page shows the body preview unescaped")
	}
	sid := ""
	for _, c := range resp.Request.Response.Cookies() {
		if c.Name == cookieName {
			sid = c.Value
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				t.Errorf("cookie: HttpOnly=%v SameSite=%v, want HttpOnly and Strict", c.HttpOnly, c.SameSite)
			}
		}
	}
	if sid == "" {
		t.Fatalf("login set no %s cookie", cookieName)
	}

	form := url.Values{"comment": {"wrong repo"}, "csrf": {csrfToken(sid)}}
	resp, err = hc.PostForm(f.srv.URL+"/v1/approvals/"+rec.ID+"/deny", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/approvals" {
		t.Errorf("form deny: got %d at %s, want 200 back on /approvals", resp.StatusCode, resp.Request.URL.Path)
	}
	if h := waitHold(t, held); h.res.State != StateDenied || h.res.Comment != "wrong repo" || h.res.DecidedBy != "oncall" {
		t.Errorf("Hold: got %+v, want denied by oncall with the comment", h.res)
	}
	resp, err = hc.PostForm(f.srv.URL+"/v1/approvals/"+rec.ID+"/approve", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !strings.Contains(resp.Request.URL.RawQuery, "conflict=") {
		t.Errorf("form approve of a decided record: landed on %s, want the page with a conflict notice", resp.Request.URL)
	}
}

// TestAPIStream: the event stream announces new approvals and decisions.
func TestAPIStream(t *testing.T) {
	f := newAPIFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/v1/approvals/stream", nil)
	req.Header.Set("Authorization", "Bearer "+oncallToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("stream content type: got %q", ct)
	}
	lines := bufio.NewScanner(resp.Body)
	next := func() (string, Record) {
		var typ string
		for lines.Scan() {
			l := lines.Text()
			if v, ok := strings.CutPrefix(l, "event: "); ok {
				typ = v
			}
			if v, ok := strings.CutPrefix(l, "data: "); ok {
				var r Record
				if err := json.Unmarshal([]byte(v), &r); err != nil {
					t.Fatalf("event data: %v", err)
				}
				return typ, r
			}
		}
		t.Fatalf("stream ended: %v", lines.Err())
		return "", Record{}
	}
	rec, held := f.hold(t, `{"s":1}`)
	if typ, r := next(); typ != EventCreated || r.ID != rec.ID {
		t.Errorf("first event: got %s %s, want created %s", typ, r.ID, rec.ID)
	}
	f.s.Decide(context.Background(), rec.ID, StateApproved, "oncall", "")
	if typ, r := next(); typ != EventDecided || r.ID != rec.ID || r.State != StateApproved {
		t.Errorf("second event: got %s %s %s, want decided %s approved", typ, r.ID, r.State, rec.ID)
	}
	waitHold(t, held)
}
