package approval

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testClock is a settable clock for a Service.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// approverFiles writes token files for name → token and returns the config entries.
func approverFiles(t *testing.T, tokens map[string]string) []ApproverConfig {
	t.Helper()
	dir := t.TempDir()
	var out []ApproverConfig
	for name, tok := range tokens {
		p := filepath.Join(dir, name+".token")
		if err := os.WriteFile(p, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		out = append(out, ApproverConfig{Name: name, TokenFile: p})
	}
	return out
}

// pageStatus GETs /approvals/… with a session cookie and returns the status.
func withCookie(t *testing.T, method, u, sid string, form url.Values) int {
	t.Helper()
	var body string
	if form != nil {
		body = form.Encode()
	}
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	req.AddCookie(&http.Cookie{Name: cookieName, Value: sid})
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSessions: a sign-in is an opaque session kept in the store: two replicas on one store
// (SQLite file, or one PostgreSQL) both accept it; signing out through one ends it on both,
// so a copied cookie dies with it; a session also ends at its expiry and when its approver
// is removed from the configuration.
func TestSessions(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			dsn := k.dsn(t)
			clock := &testClock{now: time.Now()}
			approvers := approverFiles(t, map[string]string{"oncall": oncallToken, "second": secondToken})
			cfg := Config{Approvers: approvers, SessionTTL: Duration(time.Hour)}
			withClock := func(o *Options) { o.Now = clock.Now }
			a := newTestService(t, dsn, cfg, withClock)
			b := newTestService(t, dsn, cfg, withClock)
			srvA, srvB := httptest.NewServer(a.Handler()), httptest.NewServer(b.Handler())
			t.Cleanup(srvA.Close)
			t.Cleanup(srvB.Close)

			sid := signInAt(t, srvA.URL, "oncall", oncallToken)
			if strings.Contains(sid, oncallToken) || len(sid) < 40 {
				t.Errorf("session cookie %q: want an opaque random id, not the token", sid)
			}
			for _, srv := range []string{srvA.URL, srvB.URL} {
				if got := withCookie(t, "GET", srv+"/v1/approvals", sid, nil); got != 200 {
					t.Errorf("session on %s: got %d, want 200 on both replicas", srv, got)
				}
			}
			// The CSRF token of one session does not sign out another.
			other := signInAt(t, srvB.URL, "second", secondToken)
			if got := withCookie(t, "POST", srvB.URL+"/approvals/logout", sid, url.Values{"csrf": {csrfToken(other)}}); got != http.StatusForbidden {
				t.Errorf("logout with another session's CSRF token: got %d, want 403", got)
			}
			if got := withCookie(t, "POST", srvB.URL+"/approvals/logout", sid, url.Values{"csrf": {csrfToken(sid)}}); got != http.StatusSeeOther {
				t.Fatalf("logout: got %d, want 303", got)
			}
			for _, srv := range []string{srvA.URL, srvB.URL} {
				if got := withCookie(t, "GET", srv+"/v1/approvals", sid, nil); got != http.StatusUnauthorized {
					t.Errorf("copied cookie after logout on %s: got %d, want 401", srv, got)
				}
			}
			if got := withCookie(t, "GET", srvA.URL+"/v1/approvals", other, nil); got != 200 {
				t.Errorf("the other approver's session after someone else's logout: got %d, want 200", got)
			}
			clock.Add(time.Hour)
			if got := withCookie(t, "GET", srvA.URL+"/v1/approvals", other, nil); got != http.StatusUnauthorized {
				t.Errorf("session after its TTL: got %d, want 401", got)
			}

			// An approver removed from the configuration loses its sessions.
			late := signInAt(t, srvA.URL, "second", secondToken)
			var onlyOncall []ApproverConfig
			for _, ap := range approvers {
				if ap.Name == "oncall" {
					onlyOncall = append(onlyOncall, ap)
				}
			}
			c := newTestService(t, dsn, Config{Approvers: onlyOncall}, withClock)
			srvC := httptest.NewServer(c.Handler())
			t.Cleanup(srvC.Close)
			if got := withCookie(t, "GET", srvC.URL+"/v1/approvals", late, nil); got != http.StatusUnauthorized {
				t.Errorf("session of an approver no longer configured: got %d, want 401", got)
			}
		})
	}
}

// TestSessionCookieSecure: Secure over TLS, and when page_url says https (TLS ends at a
// proxy in front of airlock).
func TestSessionCookieSecure(t *testing.T) {
	approvers := approverFiles(t, map[string]string{"oncall": oncallToken})
	for _, tc := range []struct {
		name   string
		page   string
		tls    bool
		secure bool
	}{
		{"plain HTTP", "", false, false},
		{"TLS", "", true, true},
		{"https page_url", "https://approvals.example", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestService(t, storeKinds()[0].dsn(t), Config{Approvers: approvers, PageURL: tc.page})
			srv := httptest.NewUnstartedServer(s.Handler())
			if tc.tls {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)
			hc := srv.Client()
			hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			resp, err := hc.PostForm(srv.URL+"/approvals/login", url.Values{"name": {"oncall"}, "token": {oncallToken}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			cs := resp.Cookies()
			if len(cs) != 1 || cs[0].Secure != tc.secure || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode || cs[0].MaxAge <= 0 {
				t.Errorf("cookie: got %+v, want HttpOnly, SameSite=Strict, a max age, Secure=%v", cs, tc.secure)
			}
		})
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// serve runs one request through h with a chosen client address.
func serve(h http.Handler, addr, method, target string, hdr map[string]string, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.RemoteAddr = addr + ":40000"
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func loginForm(name, tok string) string {
	return url.Values{"name": {name}, "token": {tok}}.Encode()
}

var formHeader = map[string]string{"Content-Type": "application/x-www-form-urlencoded"}

// TestLoginThrottle: only failures are counted, per client address; past the limit a
// failure is answered 429 with Retry-After until the window ends. A right token is accepted
// from any address at any time, the throttled one included, so nobody can lock an approver
// out by failing on purpose (with the approver's name, or from the approver's address).
// Wrong bearer tokens count too.
func TestLoginThrottle(t *testing.T) {
	clock := &testClock{now: time.Now()}
	var logs bytes.Buffer
	var logMu sync.Mutex
	s := newTestService(t, storeKinds()[0].dsn(t), Config{Approvers: approverFiles(t, map[string]string{"oncall": oncallToken, "second": secondToken})},
		func(o *Options) {
			o.Now = clock.Now
			o.Logger = slog.New(slog.NewJSONHandler(writerFunc(func(b []byte) (int, error) {
				logMu.Lock()
				defer logMu.Unlock()
				return logs.Write(b)
			}), nil))
		})
	h := s.Handler()
	login := func(addr, name, tok string) *httptest.ResponseRecorder {
		return serve(h, addr, "POST", "/approvals/login", formHeader, loginForm(name, tok))
	}
	api := func(addr, tok string) *httptest.ResponseRecorder {
		return serve(h, addr, "GET", "/v1/approvals", map[string]string{"Authorization": "Bearer " + tok}, "")
	}
	// A token typed into the name box is never logged.
	if w := login("203.0.113.200", oncallToken, "x"); w.Code != http.StatusForbidden {
		t.Errorf("token in the name box: got %d, want 403", w.Code)
	}
	logMu.Lock()
	if strings.Contains(logs.String(), oncallToken) || !strings.Contains(logs.String(), "sign-in failed") {
		t.Errorf("sign-in log: %s; want the failure logged without the token", logs.String())
	}
	logMu.Unlock()

	// One address fails the limit (unknown names, the approver's name, wrong bearer tokens).
	for i := range loginFailures {
		var w *httptest.ResponseRecorder
		switch i % 3 {
		case 0:
			w = login("192.0.2.1", "nobody"+strconv.Itoa(i), "wrong-token-0123456789")
		case 1:
			w = login("192.0.2.1", "oncall", "wrong-token-0123456789")
		default:
			w = api("192.0.2.1", "wrong-token-0123456789")
		}
		if w.Code != http.StatusForbidden {
			t.Fatalf("failure %d: got %d, want 403", i, w.Code)
		}
	}
	for name, w := range map[string]*httptest.ResponseRecorder{
		"sign-in": login("192.0.2.1", "oncall", "wrong-token-0123456789"),
		"bearer":  api("192.0.2.1", "wrong-token-0123456789"),
	} {
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Errorf("wrong %s past the limit: got %d Retry-After %q, want 429 with Retry-After", name, w.Code, w.Header().Get("Retry-After"))
		}
	}
	// The right token works from every address, the throttled one included, for the name
	// that was failed on and for others, at the page and at the API.
	for _, addr := range []string{"192.0.2.1", "192.0.2.2"} {
		if w := login(addr, "oncall", oncallToken); w.Code != http.StatusSeeOther {
			t.Errorf("right sign-in from %s during the window: got %d, want 303", addr, w.Code)
		}
		if w := login(addr, "", secondToken); w.Code != http.StatusSeeOther {
			t.Errorf("right sign-in (token only) from %s: got %d, want 303", addr, w.Code)
		}
		if w := api(addr, oncallToken); w.Code != http.StatusOK {
			t.Errorf("right bearer token from %s during the window: got %d, want 200", addr, w.Code)
		}
	}
	// A success resets the address's count; failing again starts over.
	if w := login("192.0.2.1", "oncall", "wrong-token-0123456789"); w.Code != http.StatusForbidden {
		t.Errorf("first failure after a success: got %d, want 403", w.Code)
	}

	// The approver's name failed from many addresses does not lock the name.
	for i := range 3 * loginFailures {
		login("198.51.100."+strconv.Itoa(i+1), "second", "wrong-token-0123456789")
	}
	if w := login("203.0.113.9", "second", secondToken); w.Code != http.StatusSeeOther {
		t.Errorf("right sign-in for a name failed from many addresses: got %d, want 303", w.Code)
	}

	// Past the window a throttled address's failures are 403 again.
	for range loginFailures + 1 {
		login("192.0.2.7", "x", "wrong-token-0123456789")
	}
	clock.Add(loginWindow)
	if w := login("192.0.2.7", "x", "wrong-token-0123456789"); w.Code != http.StatusForbidden {
		t.Errorf("failure after the window: got %d, want 403", w.Code)
	}
}

// TestCrossSitePostsRefused: any web page can make an approver's browser post to the admin
// listener. Such posts (marked by Sec-Fetch-Site or Origin) are refused with 403 before any
// credential is looked at: they do not sign in, decide, sign out, or count as failures that
// would throttle the approver's own address. Same-origin posts and non-browser clients pass.
func TestCrossSitePostsRefused(t *testing.T) {
	f := newAPIFixture(t)
	h := f.s.Handler()
	rec, held := f.hold(t, `{"x":1}`)
	const host = "127.0.0.1:8081"
	post := func(path string, hdr map[string]string, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", path, strings.NewReader(body))
		r.Host = host
		r.RemoteAddr = "127.0.0.1:40000"
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	with := func(base map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	crossSite := [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"}, // another port or subdomain of the same site
		{"Origin", "https://evil.example"},
		{"Origin", "http://127.0.0.1:9999"},
		{"Origin", "null"}, // sandboxed iframes, data: URLs
		{"Origin", "http://127.0.0.1:8081.evil.example"},
		{"Sec-Fetch-Site", "cross-site", "Origin", "http://" + host}, // Sec-Fetch-Site decides
	}
	bearer := map[string]string{"Authorization": "Bearer " + oncallToken, "Content-Type": "application/json"}
	for _, hv := range crossSite {
		name := strings.Join(hv, "=")
		// Far more than the limit: none of them counts.
		for range loginFailures + 2 {
			if w := post("/approvals/login", with(formHeader, hv...), loginForm("oncall", "wrong-token-0123456789")); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "cross-site") {
				t.Fatalf("%s: cross-site wrong sign-in: got %d %q, want 403 cross-site", name, w.Code, w.Body.String())
			}
		}
		if w := post("/approvals/login", with(formHeader, hv...), loginForm("oncall", oncallToken)); w.Code != http.StatusForbidden || len(w.Result().Cookies()) != 0 {
			t.Errorf("%s: cross-site right sign-in: got %d cookies %v, want 403 and no session", name, w.Code, w.Result().Cookies())
		}
		if w := post("/v1/approvals/"+rec.ID+"/approve", with(bearer, hv...), `{}`); w.Code != http.StatusForbidden {
			t.Errorf("%s: cross-site approve: got %d, want 403", name, w.Code)
		}
		if w := post("/approvals/logout", with(formHeader, hv...), ""); w.Code != http.StatusForbidden {
			t.Errorf("%s: cross-site logout: got %d, want 403", name, w.Code)
		}
	}
	if r, _ := f.s.Get(context.Background(), rec.ID); r.State != StatePending {
		t.Fatalf("after cross-site approvals: record is %q, want pending", r.State)
	}
	// The approver's address was not throttled by any of it: a wrong token is a plain 403.
	if w := post("/approvals/login", formHeader, loginForm("oncall", "wrong-token-0123456789")); w.Code != http.StatusForbidden || strings.Contains(w.Body.String(), "cross-site") {
		t.Errorf("wrong sign-in after the cross-site flood: got %d %q, want a plain 403", w.Code, w.Body.String())
	}
	for _, hv := range [][]string{
		{"Sec-Fetch-Site", "same-origin", "Origin", "http://" + host},
		{"Sec-Fetch-Site", "same-origin", "Origin", "null"}, // Chromium under Referrer-Policy: no-referrer
		{"Origin", "http://" + host},
		{"Sec-Fetch-Site", "none"},
		{}, // curl, the CLI
	} {
		if w := post("/approvals/login", with(formHeader, hv...), loginForm("oncall", oncallToken)); w.Code != http.StatusSeeOther {
			t.Errorf("%v: same-origin sign-in: got %d %q, want 303", hv, w.Code, w.Body.String())
		}
	}
	if w := post("/v1/approvals/"+rec.ID+"/approve", with(bearer, "Origin", "http://"+host), `{}`); w.Code != http.StatusOK {
		t.Errorf("same-origin approve: got %d %q, want 200", w.Code, w.Body.String())
	}
	waitHold(t, held)
}

// TestCrossSiteAllowsPageURLOrigin: behind a proxy the page's origin is page_url's, whatever
// Host airlock sees.
func TestCrossSiteAllowsPageURLOrigin(t *testing.T) {
	for _, tc := range []struct {
		origin, host string
		ok           bool
	}{
		{"https://approvals.example", "10.0.0.5:8081", true},
		{"HTTPS://Approvals.Example", "10.0.0.5:8081", true},
		{"https://approvals.example:8443", "10.0.0.5:8081", false},
		{"http://10.0.0.5:8081", "10.0.0.5:8081", true},
		{"https://other.example", "10.0.0.5:8081", false},
		{"https://approvals.example/path", "approvals.example", false},
	} {
		r := httptest.NewRequest("POST", "/approvals/login", nil)
		r.Host = tc.host
		r.Header.Set("Origin", tc.origin)
		if got := crossSite(r, "https://approvals.example") == ""; got != tc.ok {
			t.Errorf("Origin %q Host %q: same origin %v, want %v", tc.origin, tc.host, got, tc.ok)
		}
	}
}

// TestThrottleTableBounded: a flood of distinct addresses does not grow the table without
// bound, and fails closed (the overflow shares one window) rather than forgetting.
func TestThrottleTableBounded(t *testing.T) {
	th := newThrottle(2, time.Minute)
	now := time.Now()
	for i := range maxThrottleKeys + 50 {
		th.fail("addr:"+strconv.Itoa(i), now)
	}
	if n := len(th.keys); n > maxThrottleKeys+1 {
		t.Errorf("throttle table: got %d keys, want at most %d", n, maxThrottleKeys+1)
	}
	if th.fail("addr:new", now) == 0 {
		t.Error("an address past the full table was let through; want it to share the overflow window")
	}
	if th.fail("addr:new", now.Add(time.Minute)) != 0 {
		t.Error("after the window: still throttled")
	}
}

// TestRequestBodiesBounded: the sign-in form, the decision routes and logout read at most a
// few KiB: a large body is refused with 413 and decides nothing.
func TestRequestBodiesBounded(t *testing.T) {
	f := newAPIFixture(t)
	rec, held := f.hold(t, `{"x":1}`)
	big := strings.Repeat("a", 10<<20)
	for _, tc := range []struct {
		name, path string
		hdr        map[string]string
		body       string
	}{
		{"login form", "/approvals/login", formHeader, "name=oncall&token=" + big},
		{"login form, no length", "/approvals/login", formHeader, "name=oncall&token=" + big},
		{"logout", "/approvals/logout", formHeader, "csrf=" + big},
		{"approve JSON", "/v1/approvals/" + rec.ID + "/approve", map[string]string{"Authorization": "Bearer " + oncallToken, "Content-Type": "application/json"}, `{"comment":"` + big + `"}`},
		{"approve form", "/v1/approvals/" + rec.ID + "/approve", map[string]string{"Authorization": "Bearer " + oncallToken, "Content-Type": "application/x-www-form-urlencoded"}, "comment=" + big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", tc.path, strings.NewReader(tc.body))
			if strings.HasSuffix(tc.name, "no length") {
				r.ContentLength = -1 // as a chunked upload arrives
			}
			for k, v := range tc.hdr {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			f.s.Handler().ServeHTTP(w, r)
			if w.Code != http.StatusRequestEntityTooLarge {
				t.Errorf("POST %s with 10 MiB: got %d, want 413", tc.path, w.Code)
			}
		})
	}
	if r, _ := f.s.Get(context.Background(), rec.ID); r.State != StatePending {
		t.Errorf("after refused oversized decisions: record is %q, want still pending", r.State)
	}
	f.s.Decide(context.Background(), rec.ID, StateDenied, "oncall", "")
	waitHold(t, held)
}
