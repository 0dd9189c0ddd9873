package hostname

import "testing"

// Red team: Normalize strips a trailing dot and refuses empty or leading-dot labels before
// IDNA maps the name, and IDNA maps the ideographic and fullwidth full stops (U+3002,
// U+FF0E, U+FF61) to "." and drops ignorable code points (soft hyphen) or a bare "xn--"
// label. So the policy sees forms that no host key can have (the load check requires keys
// to be Normalize's fixed points) and that are not the one form of the host: "github.com。"
// is "github.com.", not "github.com"; "169.254.169.254。" is "169.254.169.254.", an IP
// literal that is neither canonical nor refused (a rule comparing the host or testing it
// with net.cidr_contains does not see the address); "xn--" and a soft hyphen are the empty
// host, and "．github.com" has a leading dot. Whatever comes in, the result must be
// refused or be a fixed point equal to the plain spelling's form.
func TestRT2NormalizeOneForm(t *testing.T) {
	for in, want := range map[string]string{
		"GitHub.com。":            "github.com",
		"api.github.com．":        "api.github.com",
		"api.github.com｡":        "api.github.com",
		"169.254.169.254。":       "169.254.169.254",
		"127.0.0.1｡":             "127.0.0.1",
		"xn--bcher-kva.example。": "xn--bcher-kva.example",
	} {
		got, err := Normalize(in)
		if err == nil && got != want {
			t.Errorf("Normalize(%q) = %q, want %q (or an error)", in, got, want)
		}
	}
	for _, in := range []string{"xn--", "\u00ad", "．github.com", "github.com。。", "。"} {
		if got, err := Normalize(in); err == nil {
			t.Errorf("Normalize(%q) = %q, want an error", in, got)
		}
	}
	for _, in := range []string{"Ⅻ0x．", "ﬀü0X008．", "9\u00adKⅫ。", "。µ1ü"} {
		got, err := Normalize(in)
		if err != nil {
			continue
		}
		if again, err := Normalize(got); err != nil || again != got {
			t.Errorf("Normalize(%q) = %q, which is not a fixed point: Normalize(%q) = %q, %v", in, got, got, again, err)
		}
	}
}
