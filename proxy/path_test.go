package proxy

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNormalizePath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"/repos/acme/app", "/repos/acme/app"},
		{"/a/%2e%2e/admin", "/admin"},
		{"/a/%2E%2E/admin", "/admin"},
		{"/a/../admin", "/admin"},
		{"/a/./b", "/a/b"},
		{"//admin", "/admin"},
		{"/a//b/", "/a/b/"},
		{"/%61dmin", "/admin"},
		{"/a%2fb", "/a%2Fb"},
		{"/a/b/..", "/a/"},
		{"/a/b/.", "/a/b/"},
		{"/a%3Bv=1/b", "/a%3Bv=1/b"},
		{"/a%5cb", "/a%5Cb"},
		{"/a\"b", "/a%22b"},
	}
	for _, tt := range tests {
		got, err := NormalizePath(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("NormalizePath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"/..", "/a/../..", "/%zz", "/%4", "noslash",
		"/public/..;/admin", "/public/..;x=1/admin", "/a;v=1/b", "/a\\b", "/a/..%2Fb", "/a/%2e%2e%5cb", "/a%00", "/a%FF", "/%C0%AE"} {
		if got, err := NormalizePath(bad); err == nil {
			t.Errorf("NormalizePath(%q) = %q, want error", bad, got)
		}
	}
}

func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/a/%2e%2e/admin", "//x", "/a;b/..;/c", "/%2F", "/a/./b/../c", "/a/..%2Fb", "/a\\b",
		"/\u00e9\"<>", "/a%c3%a9%ff", "/a%00", "/a%5C..%5Cb", "/a[b]%25"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := NormalizePath(in)
		if err != nil {
			return
		}
		again, err := NormalizePath(out)
		if err != nil || again != out {
			t.Fatalf("not idempotent: %q → %q → %q (%v)", in, out, again, err)
		}
		for _, seg := range strings.Split(out, "/") {
			name, _, _ := strings.Cut(seg, ";")
			if name == ".." || name == "." {
				t.Fatalf("NormalizePath(%q) = %q keeps a dot segment", in, out)
			}
		}
		if strings.Contains(out, "//") {
			t.Fatalf("NormalizePath(%q) = %q keeps an empty segment", in, out)
		}
		// Canonical: Go sends it byte for byte, only unreserved and sub-delims raw, no ';'
		// or backslash, escapes upper-case, decoding to UTF-8 without NUL.
		dec, err := url.PathUnescape(out)
		if err != nil || !utf8.ValidString(dec) || strings.IndexByte(dec, 0) >= 0 {
			t.Fatalf("NormalizePath(%q) = %q decodes to %q, %v", in, out, dec, err)
		}
		if u := (url.URL{Path: dec, RawPath: out}); u.EscapedPath() != out {
			t.Fatalf("NormalizePath(%q) = %q, but Go would send %q", in, out, u.EscapedPath())
		}
		for i := 0; i < len(out); i++ {
			c := out[i]
			switch {
			case c == '%':
				if strings.ToUpper(out[i+1:i+3]) != out[i+1:i+3] || isUnreserved(unhex(out[i+1])<<4|unhex(out[i+2])) {
					t.Fatalf("NormalizePath(%q) = %q: escape %s is not canonical", in, out, out[i:i+3])
				}
				i += 2
			case !isUnreserved(c) && !isPathRaw(c):
				t.Fatalf("NormalizePath(%q) = %q holds %q raw", in, out, c)
			}
		}
		for _, seg := range strings.Split(out, "/") {
			if hidesDotSegment(seg) {
				t.Fatalf("NormalizePath(%q) = %q hides a dot segment in %q", in, out, seg)
			}
		}
	})
}
