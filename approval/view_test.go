package approval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// overrideRequest is a held POST whose headers, query and body all matter to the upstream.
func overrideRequest(body []byte) Request {
	r := sampleRequest("")
	r.URL = "https://api.example.com/items/7?token=sandbox-chosen&_method=PUT"
	r.Header = http.Header{
		"Content-Type":           {"application/json"},
		"Cookie":                 {"session=abc; theme=dark"},
		"X-Http-Method-Override": {"DELETE"},
		"X-Evil":                 {`"><script>alert(1)</script>`},
	}
	r.Body = body
	return r
}

// TestRecordShowsTheWholeRequest: the API record shows the URL unredacted, every forwarded
// header with its values (the sandbox's Cookie included), warnings for the method overrides,
// and the body's size; the whole body downloads, byte for byte, as an attachment.
func TestRecordShowsTheWholeRequest(t *testing.T) {
	f := newAPIFixture(t)
	body := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB, longer than the preview
	body = append(body, 0xff, 0x00)
	ch := holdAsync(context.Background(), f.s, overrideRequest(body))
	rec := nextCreated(t, f.ev)
	c := &Client{BaseURL: f.srv.URL, Token: oncallToken}
	ctx := context.Background()
	got, err := c.Get(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.URL != "https://api.example.com/items/7?token=sandbox-chosen&_method=PUT" {
		t.Errorf("url: got %q, want it whole", got.URL)
	}
	if v := got.Headers.Values("Cookie"); len(v) != 1 || v[0] != "session=abc; theme=dark" {
		t.Errorf("headers.Cookie: got %q, want the sandbox's cookie", v)
	}
	if v := got.Headers.Get("X-Http-Method-Override"); v != "DELETE" {
		t.Errorf("headers.X-Http-Method-Override: got %q", v)
	}
	warn := strings.Join(got.Warnings, "\n")
	for _, w := range []string{"X-Http-Method-Override", `"_method"="PUT"`} {
		if !strings.Contains(warn, w) {
			t.Errorf("warnings %q lack %s", got.Warnings, w)
		}
	}
	if got.BodySize != int64(len(body)) || !got.BodyTruncated || int64(len(got.BodyPreview)) > int64(DefaultBodyPreview) {
		t.Errorf("body: size %d truncated %v preview %d bytes; want %d, true, at most %d", got.BodySize, got.BodyTruncated, len(got.BodyPreview), len(body), DefaultBodyPreview)
	}

	whole, err := c.Body(ctx, rec.ID)
	if err != nil || !bytes.Equal(whole, body) {
		t.Errorf("Body: got %d bytes, %v; want the exact %d", len(whole), err, len(body))
	}
	resp, _ := do(t, "GET", f.srv.URL+"/v1/approvals/"+rec.ID+"/body", map[string]string{"Authorization": "Bearer " + oncallToken}, "")
	for k, want := range map[string]string{"Content-Type": "application/octet-stream", "X-Content-Type-Options": "nosniff",
		"Content-Disposition": `attachment; filename=` + rec.ID + `.body`, "X-Airlock-Body-Sha256": sha256Hex(body)} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("body download %s: got %q, want %q", k, got, want)
		}
	}
	if resp, _ := do(t, "GET", f.srv.URL+"/v1/approvals/"+rec.ID+"/body", nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("body download without a token: got %d, want 401", resp.StatusCode)
	}
	f.s.Decide(ctx, rec.ID, StateDenied, "oncall", "")
	waitHold(t, ch)
}

// TestPageShowsTheWholeRequest: the page lists every header with its value, calls out the
// method overrides, links the whole body and escapes whatever the sandbox chose.
func TestPageShowsTheWholeRequest(t *testing.T) {
	f := newAPIFixture(t)
	ch := holdAsync(context.Background(), f.s, overrideRequest([]byte(`{"title":"<img src=x onerror=alert(1)>"}`)))
	rec := nextCreated(t, f.ev)
	sid := f.signIn(t, "oncall", oncallToken)
	req, _ := http.NewRequest("GET", f.srv.URL+"/approvals", nil)
	req.AddCookie(&http.Cookie{Name: cookieName, Value: sid})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(b)
	for _, want := range []string{"session=abc; theme=dark", "X-Http-Method-Override", `class="callout"`,
		"/v1/approvals/" + rec.ID + "/body", "token=sandbox-chosen&amp;_method=PUT"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, bad := range []string{"<script>alert(1)</script>", "<img src=x"} {
		if strings.Contains(page, bad) {
			t.Errorf("page shows sandbox input unescaped: %q", bad)
		}
	}
	f.s.Decide(context.Background(), rec.ID, StateDenied, "oncall", "")
	waitHold(t, ch)
}

// TestOutcomesAreAttributed: an approver's deny, an approver's cancel, an expiry and an agent
// that goes away end in four different states, each saying who ended it, through the API.
func TestOutcomesAreAttributed(t *testing.T) {
	f := newAPIFixture(t)
	c := &Client{BaseURL: f.srv.URL, Token: secondToken}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		end   func(id string, cancel context.CancelFunc) error
		state State
		by    string
	}{
		{"deny", func(id string, _ context.CancelFunc) error { _, err := c.Deny(ctx, id, "no"); return err }, StateDenied, "second"},
		{"cancel", func(id string, _ context.CancelFunc) error { _, err := c.Cancel(ctx, id, "duplicate"); return err }, StateCancelled, "second"},
		{"agent gone", func(_ string, cancel context.CancelFunc) error { cancel(); return nil }, StateDisconnected, DecidedBySystem},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ch := holdAsync(hctx, f.s, sampleRequest(`{"case":"`+tc.name+`"}`))
			rec := nextCreated(t, f.ev)
			if err := tc.end(rec.ID, cancel); err != nil {
				t.Fatal(err)
			}
			res := waitHold(t, ch).res
			stored, err := c.Get(ctx, rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			if res.State != tc.state || stored.State != tc.state || stored.DecidedBy != tc.by || res.Approved() {
				t.Errorf("got result %s, record %s by %s; want %s by %s", res.State, stored.State, stored.DecidedBy, tc.state, tc.by)
			}
		})
	}
	if _, err := c.Cancel(ctx, "apr-none", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("cancel of an unknown id: got %v, want 404", err)
	}
	recs, err := c.List(ctx, StateDisconnected)
	if err != nil || len(recs) != 1 {
		t.Errorf("List(disconnected): got %d, %v; want 1", len(recs), err)
	}
	var e *APIError
	if _, err := c.List(ctx, "gone"); !errors.As(err, &e) || e.Status != http.StatusBadRequest {
		t.Errorf("List(unknown state): got %v, want 400", err)
	}
	// The record JSON names the state in words an operator reads.
	b, _ := json.Marshal(Record{State: StateDisconnected})
	if !strings.Contains(string(b), `"state":"disconnected"`) {
		t.Errorf("record JSON: %s", b)
	}
}

// hiddenChars are characters that change how text looks without showing themselves:
// bidirectional overrides, embeddings and isolates, zero-width characters, marks, controls.
var hiddenChars = []rune{0x202E, 0x202D, 0x202A, 0x202B, 0x202C, 0x2066, 0x2067, 0x2068, 0x2069,
	0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x061C, 0xFEFF, 0x00AD, 0x2028, 0x2029, 0x00A0,
	0x3164, 0x115F, 0xFE0F, 0xE0041, 0x1B, 0x07, 0x7F, 0x85, 0x9B, 0x0D, 0x0B}

// TestVisibleEscapesHiddenCharacters: every hidden character is written as a marked escape
// and nothing else of it reaches the page; visible text (non-ASCII too) and HTML are kept
// and escaped as usual; a body preview keeps its line breaks.
func TestVisibleEscapesHiddenCharacters(t *testing.T) {
	for _, r := range hiddenChars {
		s := "evil.example/" + string(r) + "gpj.exe"
		got := string(visible(s, false))
		if strings.ContainsRune(got, r) {
			t.Errorf("U+%04X: passed through: %q", r, got)
		}
		if !strings.Contains(got, `<span class="esc"`) || !strings.Contains(got, "evil.example/") || !strings.Contains(got, "gpj.exe") {
			t.Errorf("U+%04X: got %q, want a marked escape between the visible parts", r, got)
		}
	}
	if got := string(visible("café/日本/<b>&", false)); got != "café/日本/&lt;b&gt;&amp;" {
		t.Errorf("visible text: got %q", got)
	}
	if got := string(visible("a\xffb", false)); !strings.Contains(got, `\xff`) || strings.Contains(got, "\xff") {
		t.Errorf("invalid UTF-8: got %q", got)
	}
	if got := string(visible("line 1\r\nline\t2\nend\r", true)); got != "line 1\r\nline\t2\nend"+`<span class="esc" title="a character that does not show as itself">\r</span>` {
		t.Errorf("block: got %q", got)
	}
	if got := string(visible("a\nb", false)); !strings.Contains(got, `>\n</span>`) {
		t.Errorf("newline in a one-line field: got %q, want it escaped", got)
	}
}

// TestPageShowsHiddenCharacters: a held request whose URL, method, headers, warnings and body
// preview hold bidirectional overrides, isolates and zero-width characters is shown with
// each of them escaped: none reaches the page as itself.
func TestPageShowsHiddenCharacters(t *testing.T) {
	f := newAPIFixture(t)
	r := sampleRequest("")
	r.URL = "https://api.example.com/\u202Etxt.exe?x=\u2066a\u2069"
	r.Header = http.Header{
		"X-Tr\u200Bace":           {"v\u200Dalue"},
		"X-Http-Method-Override":  {"DEL\u202EETE"},
		"Content-Type":            {"text/plain\u2067"},
		"X-" + string(rune(0x1B)): {"\x1b[31mred"},
	}
	r.Body = []byte("harmless\u202E)rm -rf /(\n\u200Bhidden line\n")
	ch := holdAsync(context.Background(), f.s, r)
	rec := nextCreated(t, f.ev)
	sid := f.signIn(t, "oncall", oncallToken)
	req, _ := http.NewRequest("GET", f.srv.URL+"/approvals", nil)
	req.AddCookie(&http.Cookie{Name: cookieName, Value: sid})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(b)
	for _, c := range []rune{0x202E, 0x2066, 0x2067, 0x2069, 0x200B, 0x200D, 0x1B} {
		if strings.ContainsRune(page, c) {
			t.Errorf("page holds U+%04X as itself", c)
		}
	}
	for _, want := range []string{`/<span class="esc" title="a character that does not show as itself">\u202e</span>txt.exe`,
		`X-Tr<span class="esc"`, `\u200b`, `\u200d`, `\u2066`, `DEL<span class="esc"`, `\x1b`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	f.s.Decide(context.Background(), rec.ID, StateDenied, "oncall", "")
	waitHold(t, ch)
}
