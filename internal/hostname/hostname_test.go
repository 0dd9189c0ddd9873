package hostname

import (
	"net/netip"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"Example.COM", "example.com"},
		{"example.com.", "example.com"},
		{"2130706433", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"169.254.169.254", "169.254.169.254"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"[::1]", "::1"},
		{"[::ffff:127.0.0.1]", "127.0.0.1"},
		{"[0:0:0:0:0:0:0:1]", "::1"},
		{"[2001:DB8::1]", "2001:db8::1"},
		{"bücher.example", "xn--bcher-kva.example"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"аррӏе.com", "xn--80ak6aa92e.com"}, // Cyrillic homograph: the policy sees punycode
		{"under_score.example", "under_score.example"},
	}
	for _, tt := range tests {
		got, err := Normalize(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestNormalizeRejects(t *testing.T) {
	for _, in := range []string{"", ".", "a..b", ".a", "a b", "a/b", "a@b", "[::1%eth0]", "[127.0.0.1]", "256.1.1.1", "1.2.3.4.5", "foo.123", "[::1", "a%2eb"} {
		if got, err := Normalize(in); err == nil {
			t.Errorf("Normalize(%q) = %q, want error", in, got)
		}
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"example.com", "2130706433", "0x7f.1", "[::ffff:7f00:1]", "bücher.de.", "a..b", "1.2.3.4.5", "[fe80::1%25lo]",
		// Other full stops and ignorable code points, which IDNA maps (red team).
		"github.com。", "．github.com", "169.254.169.254｡", "xn--", "\u00ad", "Ⅻ0x．", "9\u00adKⅫ。", "。µ1ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := Normalize(in)
		if err != nil {
			return
		}
		// Idempotent: the normal form normalises to itself.
		out2, err := Normalize(bracketIfV6(out))
		if err != nil || out2 != out {
			t.Fatalf("Normalize(%q) = %q, but that normalises to %q, %v", in, out, out2, err)
		}
		if out != strings.ToLower(out) || strings.HasSuffix(out, ".") {
			t.Fatalf("Normalize(%q) = %q: not lower case without trailing dot", in, out)
		}
		if a, err := netip.ParseAddr(out); err == nil && a.String() != out {
			t.Fatalf("Normalize(%q) = %q: IP not canonical (%s)", in, out, a)
		}
	})
}

func bracketIfV6(s string) string {
	if strings.Contains(s, ":") {
		return "[" + s + "]"
	}
	return s
}
