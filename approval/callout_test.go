package approval

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
)

// TestWarnings: method overrides in every place frameworks read them, routing headers,
// encoded bodies, upgrades and repeated single-valued headers are called out; a plain
// request has no warning.
func TestWarnings(t *testing.T) {
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	mw.WriteField("title", "x")
	mw.WriteField("_method", "delete")
	mw.Close()
	for _, tc := range []struct {
		name   string
		url    string
		h      http.Header
		body   string
		want   []string // substrings, each in some warning
		noWarn bool
	}{
		{"plain JSON POST", "https://h/x?state=open", http.Header{"Content-Type": {"application/json"}, "Cookie": {"a=1"}}, `{"title":"x"}`, nil, true},
		{"X-HTTP-Method-Override", "https://h/x", http.Header{"X-Http-Method-Override": {"DELETE"}}, "", []string{"method override", "X-Http-Method-Override", `"DELETE"`}, false},
		{"X-HTTP-Method", "https://h/x", http.Header{"X-Http-Method": {"PUT"}}, "", []string{"method override", `"PUT"`}, false},
		{"X-Method-Override", "https://h/x", http.Header{"X-Method-Override": {"patch"}}, "", []string{"method override", `"PATCH"`}, false},
		{"non-canonical override header", "https://h/x", http.Header{"x-http-method-override": {"DELETE"}}, "", []string{"method override", "not in canonical form"}, false},
		{"_method query", "https://h/x?a=1&_method=DELETE", nil, "", []string{"query parameter", `"_method"`, `"DELETE"`}, false},
		{"escaped _method query", "https://h/x?%5Fmethod=put", nil, "", []string{"query parameter", `"PUT"`}, false},
		{"override header name as query", "https://h/x?X-HTTP-Method-Override=DELETE", nil, "", []string{"query parameter"}, false},
		{"_method form field", "https://h/x", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, "title=x&_method=delete", []string{"body field", `"DELETE"`}, false},
		{"_method multipart field", "https://h/x", http.Header{"Content-Type": {mw.FormDataContentType()}}, mp.String(), []string{"body field", `"DELETE"`}, false},
		{"_method JSON field", "https://h/x", http.Header{"Content-Type": {"application/json; charset=utf-8"}}, `{"_method":"DELETE","a":1}`, []string{"body field", `"DELETE"`}, false},
		{"X-Forwarded-Host", "https://h/x", http.Header{"X-Forwarded-Host": {"admin.internal"}}, "", []string{"routing header", "admin.internal"}, false},
		{"X-Original-URL", "https://h/x", http.Header{"X-Original-Url": {"/admin/delete"}}, "", []string{"routing header", "/admin/delete"}, false},
		{"Forwarded", "https://h/x", http.Header{"Forwarded": {"for=1.2.3.4"}}, "", []string{"routing header"}, false},
		{"gzip body", "https://h/x", http.Header{"Content-Encoding": {"gzip"}}, "\x1f\x8b", []string{"encoded body"}, false},
		{"upgrade", "https://h/x", http.Header{"Upgrade": {"websocket"}}, "", []string{"protocol upgrade"}, false},
		{"two Content-Types", "https://h/x", http.Header{"Content-Type": {"text/plain", "application/json"}}, "", []string{"repeated header Content-Type"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Warnings("POST", tc.url, tc.h, []byte(tc.body))
			if tc.noWarn && len(got) != 0 {
				t.Errorf("got %q, want no warning", got)
			}
			all := strings.Join(got, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("warnings %q lack %q", got, w)
				}
			}
		})
	}
}

// TestWarningsBounded: a request made of thousands of override headers gives a bounded list
// of bounded lines.
func TestWarningsBounded(t *testing.T) {
	h := http.Header{}
	for i := range 5000 {
		h.Add("X-Http-Method-Override", strings.Repeat("D", i))
	}
	got := Warnings("POST", "https://h/?_method="+strings.Repeat("x", 1<<16), h, nil)
	if len(got) > maxWarnings {
		t.Errorf("warnings: got %d, want at most %d", len(got), maxWarnings)
	}
	for _, w := range got {
		if len(w) > 4*maxWarningValue {
			t.Errorf("warning of %d bytes, want it cut short", len(w))
		}
	}
}

// FuzzWarnings: untrusted URLs, headers and bodies never make Warnings fail or run away.
func FuzzWarnings(f *testing.F) {
	f.Add("https://h/x?_method=DELETE", "X-Http-Method-Override", "PUT", "multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--b--\r\n")
	f.Add("https://h/x", "Content-Type", "application/json", "application/json", `{"_method":["x"]}`)
	f.Fuzz(func(t *testing.T, u, k, v, ct, body string) {
		got := Warnings("POST", u, http.Header{k: {v}, "Content-Type": {ct}}, []byte(body))
		if len(got) > maxWarnings {
			t.Errorf("got %d warnings", len(got))
		}
	})
}
