//go:build browser

package approval

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// TestBrowserApprove drives the approval page in headless Chromium (Debian's chromium):
// sign in with the form, see the pending request with every header, the method-override
// callout, the full URL and a link to the whole body (the sandbox's markup shown as text),
// click Approve, and the held call is released as approved, bound to exactly the request
// that was held; sign out, and the session cookie copied from the browser is dead.
//
//	go test -tags browser -run TestBrowser ./approval/
//
// AIRLOCK_SCREENSHOT=docs/approval-page.png also saves the page as it looked.
func TestBrowserApprove(t *testing.T) {
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not installed: apt-get install -y chromium")
	}
	f := newAPIFixture(t)
	ctx := context.Background()

	// Something already decided, for the "recently decided" table.
	old := sampleRequest(`{"ref":"refs/heads/main","force":true}`)
	old.Method, old.URL, old.Rule, old.Reason = "PATCH", "https://api.github.com/repos/acme/app/git/refs/heads/main", "github.write", "writes to GitHub need a human"
	oldHeld := holdAsync(ctx, f.s, old)
	oldRec := nextCreated(t, f.ev)
	if _, err := f.s.Decide(ctx, oldRec.ID, StateDenied, "oncall", "no force-pushes to main"); err != nil {
		t.Fatal(err)
	}
	waitHold(t, oldHeld)

	body := "{\n  \"title\": \"Flaky test in release pipeline\",\n  \"body\": \"TestUpload fails about 1 in 20 runs on arm64; log attached.\",\n  \"labels\": [\"ci\", \"flaky\"]\n}"
	req := sampleRequest(body)
	req.Header = http.Header{
		"Content-Type":           {"application/json"},
		"Cookie":                 {"_gh_sess=4f2a9c; logged_in=yes"},
		"User-Agent":             {"python-requests/2.32"},
		"X-Http-Method-Override": {"DELETE"},
		"X-Note":                 {`<img src=x onerror="document.title='pwned'">`},
	}
	held := holdAsync(ctx, f.s, req)
	rec := nextCreated(t, f.ev)
	del := sampleRequest("")
	del.Method, del.URL, del.Header = "DELETE", "https://api.github.com/repos/acme/app/branches/old-release/protection", nil
	del.Rule, del.Reason, del.Creds = "github.admin", "branch protection changes need a human", []string{"github-admin"}
	del.SandboxID, del.Labels = "sbx-91c2", map[string]string{"task": "repo-cleanup", "tenant": "acme"}
	delHeld := holdAsync(ctx, f.s, del)
	delRec := nextCreated(t, f.ev)

	actx, cancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1100, 1000))...)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	bctx, cancel = context.WithTimeout(bctx, 90*time.Second)
	defer cancel()

	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	if err := chromedp.Do(bctx,
		chromedp.Navigate(f.srv.URL+"/approvals"),
		chromedp.WaitVisible(css("#token")),
		chromedp.SendKeys(css("#name"), "oncall"),
		chromedp.SendKeys(css("#token"), oncallToken),
		chromedp.Submit(css("#token")),
		chromedp.WaitVisible(css("#"+rec.ID)),
		chromedp.WaitVisible(css("#"+delRec.ID)),
	); err != nil {
		t.Fatalf("browser: sign in and list: %v", err)
	}
	preview, err := chromedp.Run(bctx, chromedp.TextContent(css("#"+rec.ID+" pre.body")))
	if err != nil {
		t.Fatalf("browser: read preview: %v", err)
	}
	if preview != body {
		t.Errorf("page body preview: got %q, want the held body %q", preview, body)
	}
	shown, err := chromedp.Run(bctx, chromedp.Text(css("#"+rec.ID+" .req")))
	if err != nil {
		t.Fatalf("browser: read URL: %v", err)
	}
	if !strings.Contains(shown, "POST") || !strings.Contains(shown, req.URL) {
		t.Errorf("page request line: got %q, want POST and the whole URL %s", shown, req.URL)
	}
	headers, err := chromedp.Run(bctx, chromedp.Text(css("#"+rec.ID+" table.headers")))
	if err != nil {
		t.Fatalf("browser: read headers: %v", err)
	}
	for _, want := range []string{"Cookie", "_gh_sess=4f2a9c; logged_in=yes", "User-Agent", "python-requests/2.32", "X-Http-Method-Override", "DELETE", `<img src=x onerror="document.title='pwned'">`} {
		if !strings.Contains(headers, want) {
			t.Errorf("page headers: %q lacks %q", headers, want)
		}
	}
	callout, err := chromedp.Run(bctx, chromedp.Text(css("#"+rec.ID+" .callout")))
	if err != nil {
		t.Fatalf("browser: read callout: %v", err)
	}
	if !strings.Contains(callout, "method override") || !strings.Contains(callout, "DELETE") {
		t.Errorf("page callout: got %q, want the method override called out", callout)
	}
	link, err := chromedp.Run(bctx, chromedp.AttributeValue(css("#"+rec.ID+" a.download"), "href"))
	if err != nil || link.Value != "/v1/approvals/"+rec.ID+"/body" {
		t.Errorf("body link: got %q, %v", link.Value, err)
	}
	title, err := chromedp.Run(bctx, chromedp.Title())
	if err != nil || strings.Contains(title, "pwned") {
		t.Errorf("page title %q: the sandbox's header value ran as markup", title)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("browser: screenshot: %v", err)
	}
	if p := os.Getenv("AIRLOCK_SCREENSHOT"); p != "" {
		if err := os.WriteFile(p, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if err := chromedp.Do(bctx,
		chromedp.SendKeys(css("#"+rec.ID+" input[name=comment]"), "ok, file it"),
		chromedp.Click(css("#"+rec.ID+" button.approve")),
		chromedp.WaitVisible(css("#flash")),
	); err != nil {
		t.Fatalf("click Approve: %v", err)
	}
	got := waitHold(t, held)
	if got.err != nil || !got.res.Approved() || got.res.ID != rec.ID || got.res.DecidedBy != "oncall" || got.res.Comment != "ok, file it" {
		t.Fatalf("Hold after clicking Approve: got %+v, %v; want approved by oncall", got.res, got.err)
	}
	stored, err := f.s.Get(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.BodySHA256 != sha256Hex([]byte(body)) || stored.RequestSHA256 != RequestHash(req.Method, req.URL, req.Header, req.Body) {
		t.Errorf("approved record is bound to other bytes: body_sha256 %s, want %s", stored.BodySHA256, sha256Hex([]byte(body)))
	}

	// The session cookie, as a thief would copy it out of the browser, works until sign-out.
	cookies, err := chromedp.Run(bctx, chromedp.Action[[]*network.Cookie](func(ctx context.Context, tg *chromedp.Target) ([]*network.Cookie, error) {
		res, err := cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{})
		return res.Cookies, err
	}))
	var sid string
	for _, c := range cookies {
		if c.Name == cookieName {
			sid = c.Value
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || strings.Contains(c.Value, oncallToken) {
				t.Errorf("session cookie: HttpOnly %v SameSite %s, value holds the token %v", c.HTTPOnly, c.SameSite, strings.Contains(c.Value, oncallToken))
			}
		}
	}
	if err != nil || sid == "" {
		t.Fatalf("browser: no session cookie (%v)", err)
	}
	copied := func() int {
		r, _ := http.NewRequest("GET", f.srv.URL+"/v1/approvals", nil)
		r.AddCookie(&http.Cookie{Name: cookieName, Value: sid})
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := copied(); got != 200 {
		t.Errorf("copied session cookie before sign-out: got %d, want 200", got)
	}
	if err := chromedp.Do(bctx,
		chromedp.Click(css("header form button")),
		chromedp.WaitVisible(css("#token")),
	); err != nil {
		t.Fatalf("click Sign out: %v", err)
	}
	if got := copied(); got != http.StatusUnauthorized {
		t.Errorf("copied session cookie after sign-out: got %d, want 401", got)
	}
	// The other request is untouched by that click.
	if r, _ := f.s.Get(ctx, delRec.ID); r.State != StatePending {
		t.Errorf("the other request: got %q, want still pending", r.State)
	}
	f.s.Decide(ctx, delRec.ID, StateDenied, "oncall", "")
	waitHold(t, delHeld)
}

// TestBrowserHiddenAndCrossSite: in headless Chromium, a pending request whose URL and
// headers hold a right-to-left override and zero-width characters is shown with each of
// them as a visible escape, never as itself; and a page on another origin that auto-posts
// wrong sign-ins to the approval page (as any web page an approver visits could) is refused
// as cross-site, so the approver signs in at once afterwards.
//
//	go test -tags browser -run TestBrowser ./approval/
func TestBrowserHiddenAndCrossSite(t *testing.T) {
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not installed: apt-get install -y chromium")
	}
	f := newAPIFixture(t)
	ctx := context.Background()
	req := sampleRequest("ok\u202E)txt.exe(\n")
	req.URL = "https://api.example.com/files/\u202Egpj.exe?x=\u200B1"
	req.Header = http.Header{"X-Tr\u200Bace": {"a\u2066b\u2069"}}
	held := holdAsync(ctx, f.s, req)
	rec := nextCreated(t, f.ev)

	// The approval page, counting the answers to sign-ins.
	var posts, crossSite int
	var mu sync.Mutex
	inner := f.s.Handler()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		inner.ServeHTTP(sw, r)
		if r.Method == http.MethodPost && r.URL.Path == "/approvals/login" {
			mu.Lock()
			posts++
			if sw.status == http.StatusForbidden && r.Header.Get("Origin") != "" {
				crossSite++
			}
			mu.Unlock()
		}
	}))
	defer site.Close()

	// Another origin: its page posts a wrong sign-in to the approval page, many times.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		n := r.URL.Query().Get("n")
		next := "/?n=" + n + "x"
		if len(n) > 12 {
			next = "about:blank"
		}
		_, _ = io.WriteString(w, `<!doctype html><form id=f method=post action="`+site.URL+`/approvals/login">
<input name=name value=oncall><input name=token value=wrong-token-0123456789></form>
<iframe name=sink style="display:none"></iframe>
<script>document.getElementById('f').target='sink';document.getElementById('f').submit();
setTimeout(function(){location='`+next+`'},150)</script>`)
	}))
	defer evil.Close()
	actx, cancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1100, 1000))...)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	bctx, cancel = context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(bctx, chromedp.Navigate(evil.URL+"/?n=x")); err != nil {
		t.Fatalf("browser: cross-site page: %v", err)
	}
	// Let the page post a dozen times (the limit is loginFailures).
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		n := posts
		mu.Unlock()
		if n > loginFailures || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	if posts <= loginFailures || crossSite != posts {
		t.Errorf("cross-site sign-ins: %d posted, %d refused with 403; want more than %d, all refused", posts, crossSite, loginFailures)
	}
	mu.Unlock()

	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	if err := chromedp.Do(bctx,
		chromedp.Navigate(site.URL+"/approvals"),
		chromedp.WaitVisible(css("#token")),
		chromedp.SendKeys(css("#name"), "oncall"),
		chromedp.SendKeys(css("#token"), oncallToken),
		chromedp.Submit(css("#token")),
		chromedp.WaitVisible(css("#"+rec.ID)),
	); err != nil {
		t.Fatalf("browser: sign in after the cross-site posts: %v", err)
	}
	for _, sel := range []string{".req", "table.headers", "pre.body"} {
		text, err := chromedp.Run(bctx, chromedp.Text(css("#"+rec.ID+" "+sel)))
		if err != nil {
			t.Fatalf("browser: read %s: %v", sel, err)
		}
		for _, r := range []rune{0x202E, 0x200B, 0x2066, 0x2069} {
			if strings.ContainsRune(text, r) {
				t.Errorf("%s shows U+%04X as itself: %q", sel, r, text)
			}
		}
		if !strings.Contains(text, `\u`) {
			t.Errorf("%s: %q shows no escape", sel, text)
		}
	}
	url, _ := chromedp.Run(bctx, chromedp.Text(css("#"+rec.ID+" .req")))
	if !strings.Contains(url, `files/\u202egpj.exe`) {
		t.Errorf("request line %q: want the override shown in place", url)
	}
	f.s.Decide(ctx, rec.ID, StateDenied, "oncall", "")
	waitHold(t, held)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
