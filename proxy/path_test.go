package proxy

import (
	"strings"
	"testing"
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
		{"/public/..;/admin", "/admin"},
		{"/public/..;x=1/admin", "/admin"},
		{"/%61dmin", "/admin"},
		{"/a%2fb", "/a%2Fb"},
		{"/a/b/..", "/a/"},
		{"/a/b/.", "/a/b/"},
		{"/a;v=1/b", "/a;v=1/b"},
	}
	for _, tt := range tests {
		got, err := NormalizePath(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("NormalizePath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"/..", "/a/../..", "/%zz", "/%4", "noslash"} {
		if got, err := NormalizePath(bad); err == nil {
			t.Errorf("NormalizePath(%q) = %q, want error", bad, got)
		}
	}
}

func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/a/%2e%2e/admin", "//x", "/a;b/..;/c", "/%2F", "/a/./b/../c"} {
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
	})
}
