package audit

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestRedactQuery(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"a=1", "a=[redacted]"},
		{"state=open&token=ghp_secret", "state=[redacted]&token=[redacted]"},
		{"sk-live-123", "[redacted]"},
		{"a=&b", "a=[redacted]&[redacted]"},
		{"a%20b=1&&c=2", "a+b=[redacted]&c=[redacted]"},
		{"k=v=w", "k=[redacted]"},
		{"%zz=1", "%25zz=[redacted]"},
		{"a=[redacted]", "a=[redacted]"},
	}
	for _, tt := range tests {
		if got := RedactQuery(tt.in); got != tt.want {
			t.Errorf("RedactQuery(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzRedactQuery(f *testing.F) {
	for _, s := range []string{"a=1", "a=1&b=2", "x", "%zz=%zz", "a=b=c&&", "k=\x00v"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		got := RedactQuery(q)
		if again := RedactQuery(got); again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q", q, got, again)
		}
		if got == "" {
			return
		}
		// Every value is gone: each item of the output is "key=[redacted]" or "[redacted]".
		for item := range strings.SplitSeq(got, "&") {
			if item != Redacted && !strings.HasSuffix(item, "="+Redacted) {
				t.Fatalf("item %q of %q keeps a value (input %q)", item, got, q)
			}
		}
		// No value of the input survives, unless a key (raw, unescaped or escaped) holds it too.
		var keys strings.Builder
		for part := range strings.SplitSeq(q, "&") {
			k, _, _ := strings.Cut(part, "=")
			u, _ := url.QueryUnescape(k)
			keys.WriteString(k + "\n" + u + "\n" + url.QueryEscape(u) + "\n" + url.QueryEscape(k) + "\n")
		}
		// What is left of the output once the redacted values are cut off: the keys alone, one
		// per line (a key cannot hold "=", so a value spanning "key=" is not a leak).
		var restB strings.Builder
		for item := range strings.SplitSeq(got, "&") {
			restB.WriteString(strings.TrimSuffix(strings.TrimSuffix(item, Redacted), "=") + "\n")
		}
		rest := restB.String()
		for part := range strings.SplitSeq(q, "&") {
			_, v, ok := strings.Cut(part, "=")
			if ok && len(v) >= 6 && strings.Contains(rest, v) && !strings.Contains(keys.String(), v) {
				t.Fatalf("value %q survives in %q", v, got)
			}
		}
		if strings.ContainsAny(got, "\n\r\x00") {
			t.Fatalf("control character in %q", got)
		}
	})
}

func TestSanitized(t *testing.T) {
	ev := Event{Query: "key=sekrit", ErrorClass: "dial tcp 10.0.0.1: token=abc", Labels: map[string]string{"a": "b"}}
	got := ev.Sanitized()
	if got.Query != "key=[redacted]" || got.ErrorClass != "invalid" {
		t.Errorf("got query %q class %q, want key=[redacted] and invalid", got.Query, got.ErrorClass)
	}
	got.Labels["a"] = "changed"
	if ev.Labels["a"] != "b" {
		t.Error("Sanitized shares the labels map with its input")
	}
	if c := (Event{ErrorClass: "vault_unreachable"}).Sanitized().ErrorClass; c != "vault_unreachable" {
		t.Errorf("got class %q, want vault_unreachable kept", c)
	}
}

func TestNewRequestEvent(t *testing.T) {
	tests := []struct {
		method, target string
		want           Event
	}{
		{"GET", "http://API.Example.com./v1/x?token=abc", Event{Kind: "request", Method: "GET", Scheme: "http", Host: "api.example.com", Port: 80, Path: "/v1/x", Query: "token=[redacted]"}},
		{"POST", "https://user:pw@h.test:8443/a%2Fb", Event{Kind: "request", Method: "POST", Scheme: "https", Host: "h.test", Port: 8443, Path: "/a%2Fb"}},
		{"GET", "http://[::1]:9000/", Event{Kind: "request", Method: "GET", Scheme: "http", Host: "::1", Port: 9000, Path: "/"}},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.target, nil)
		got := NewRequestEvent(r)
		got.Time = tt.want.Time
		if got.Kind != tt.want.Kind || got.Method != tt.want.Method || got.Scheme != tt.want.Scheme ||
			got.Host != tt.want.Host || got.Port != tt.want.Port || got.Path != tt.want.Path || got.Query != tt.want.Query {
			t.Errorf("NewRequestEvent(%s %s) = %+v, want %+v", tt.method, tt.target, got, tt.want)
		}
	}
	r := httptest.NewRequest("CONNECT", "http://x/", nil)
	r.URL.Host, r.Host, r.URL.Path = "", "Git.Example:443", ""
	if got := NewRequestEvent(r); got.Kind != "connect" || got.Host != "git.example" || got.Port != 443 {
		t.Errorf("CONNECT: got %+v", got)
	}
}
