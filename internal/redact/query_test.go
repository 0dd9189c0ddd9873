package redact

import (
	"net/url"
	"strings"
	"testing"
)

func TestQuery(t *testing.T) {
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
		if got := Query(tt.in); got != tt.want {
			t.Errorf("Query(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzQuery(f *testing.F) {
	for _, s := range []string{"a=1", "a=1&b=2", "x", "%zz=%zz", "a=b=c&&", "k=\x00v"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		got := Query(q)
		if again := Query(got); again != got {
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
