package redact

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://bundles.example/b.tar.gz", "https://bundles.example/b.tar.gz"},
		{"https://user:CANARY@bundles.example/b.tar.gz", "https://[redacted]@bundles.example/b.tar.gz"},
		{"https://CANARY@github.com/org/repo.git", "https://[redacted]@github.com/org/repo.git"},
		{"https://bundles.example/b.tar.gz?access_token=CANARY&ref=main", "https://bundles.example/b.tar.gz?access_token=[redacted]&ref=[redacted]"},
		{"https://h.example/p?CANARY", "https://h.example/p?[redacted]"},
		{"https://h.example/p?a=1&&b", "https://h.example/p?a=[redacted]&[redacted]"}, // an empty parameter is dropped
		{"https://h.example/p#CANARY", "https://h.example/p#[redacted]"},
		{"postgres://airlock:CANARY@db.svc:5432/airlock?sslmode=verify-full", "postgres://[redacted]@db.svc:5432/airlock?sslmode=[redacted]"},
		{"http://[::1]:9090/x?sig=CANARY", "http://[::1]:9090/x?sig=[redacted]"},
		{"https://u:CANARY@h.example:port/", "https://[redacted]"},   // bad port: nothing after the scheme
		{"https://u:CAN ARY@h.example/", "https://[redacted]"},       // does not parse
		{"https://h.example/%zz?token=CANARY", "https://[redacted]"}, // bad escape
		{"/etc/airlock/policy", "/etc/airlock/policy"},               // a path stays
		{"policy.tar.gz", "policy.tar.gz"},                           // a file stays
		{"secret/data/github", "secret/data/github"},                 // a Vault path stays
		{"", ""},
	} {
		got := URL(tc.in)
		if got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if again := URL(got); again != got {
			t.Errorf("URL(URL(%q)) = %q, want it unchanged %q", tc.in, again, got)
		}
	}
}

func TestText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`Get "https://u:CANARY@h.example/b?access_token=CANARY2": dial tcp 127.0.0.1:1: connect: connection refused`,
			`Get "https://[redacted]@h.example/b?access_token=[redacted]": dial tcp 127.0.0.1:1: connect: connection refused`},
		{"fetch bundle https://h.example/b?token=CANARY.", "fetch bundle https://h.example/b?token=[redacted]."},
		{"(see https://x:CANARY@h.example/)", "(see https://[redacted]@h.example/)"},
		{"host=db user=airlock password=CANARY sslmode=disable", "host=db user=[redacted] password=[redacted] sslmode=disable"},
		{"failed to connect to `user=CANARY database=db`", "failed to connect to `user=[redacted] database=db`"},
		{"failed to connect to `user=CANARY`: refused", "failed to connect to `user=[redacted]`: refused"},
		{`dsn "password='CANARY' host=db"`, `dsn "password=[redacted] host=db"`},
		{"api_key=CANARY&x=1 client_secret=CANARY,", "api_key=[redacted]&x=1 client_secret=[redacted],"},
		{"Authorization: Bearer CANARY", "Authorization: Bearer [redacted]"},
		{"proxy-authorization: Basic CANARY", "proxy-authorization: Basic [redacted]"},
		{"policy reloaded", "policy reloaded"},
		{"proxy.issuers[0].token_file: required", "proxy.issuers[0].token_file: required"},
		{"listen 127.0.0.1:3128", "listen 127.0.0.1:3128"},
		{"sslmode=verify-full keyid=default", "sslmode=verify-full keyid=default"},
		{"weird+scheme.1://u:CANARY@h/", "weird+scheme.1://[redacted]@h/"},
	} {
		got := Text(tc.in)
		if got != tc.want {
			t.Errorf("Text(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
		if again := Text(got); again != got {
			t.Errorf("Text not idempotent on %q: %q", got, again)
		}
	}
}

func TestError(t *testing.T) {
	base := &url.Error{Op: "Get", URL: "https://u:CANARY@h.example/?token=CANARY2", Err: fs.ErrNotExist}
	err := Error(fmt.Errorf("fetch bundle: %w", base))
	if strings.Contains(err.Error(), "CANARY") {
		t.Errorf("Error text %q holds a canary", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is lost the chain of %v", err)
	}
	plain := errors.New("nothing secret")
	if Error(plain) != plain {
		t.Errorf("an error with nothing to redact was wrapped")
	}
	if Error(nil) != nil {
		t.Errorf("Error(nil) is not nil")
	}
}

type stringer struct{ s string }

func (s stringer) String() string { return s.s }

// TestAttr: a handler with ReplaceAttr: Attr writes no canary, whatever form it is logged in.
func TestAttr(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		o := &slog.HandlerOptions{ReplaceAttr: Attr}
		var h slog.Handler = slog.NewJSONHandler(&buf, o)
		if format == "text" {
			h = slog.NewTextHandler(&buf, o)
		}
		u, _ := url.Parse("https://u:CANARY1@h.example/b?access_token=CANARY2")
		log := slog.New(h).With("bundle", "https://u:CANARY3@h.example/")
		log.WithGroup("policy").Info("fetch https://h.example/?sig=CANARY4 failed",
			"err", &url.Error{Op: "Get", URL: "https://h.example/?token=CANARY5", Err: errors.New("refused")},
			"url", u,
			"stringer", stringer{"dsn password=CANARY6"},
			slog.Group("g", "source", "postgres://a:CANARY7@db/x"),
			"port", 3128, "ok", "plain value")
		out := buf.String()
		if strings.Contains(out, "CANARY") {
			t.Errorf("%s log holds a canary:\n%s", format, out)
		}
		for _, want := range []string{"plain value", "h.example", "3128", "[redacted]"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s log lacks %q:\n%s", format, want, out)
			}
		}
	}
}

// FuzzText: whatever the text, a secret placed in a URL's userinfo or query, or after
// password=, never survives, and redaction is idempotent.
func FuzzText(f *testing.F) {
	f.Add("fetch bundle ", "https", "h.example/b", " failed")
	f.Add(`Get "`, "postgres", "db:5432/x", `": refused`)
	f.Add("", "http", "[::1]:9090/", "")
	f.Fuzz(func(t *testing.T, before, scheme, hostPath, after string) {
		const canary = "Zq7CANARYx9"
		if strings.Contains(before+scheme+hostPath+after, canary[:4]) {
			return
		}
		for _, s := range []string{
			before + scheme + "://u:" + canary + "@" + hostPath + after,
			before + scheme + "://" + canary + "@" + hostPath + after,
			before + scheme + "://" + hostPath + "?access_token=" + canary + after,
			before + " password=" + canary + " " + after,
		} {
			got := Text(s)
			if strings.Contains(got, canary) && validScheme(scheme) && !strings.ContainsAny(hostPath, "\"'<> \t\n\r\v\f`") {
				t.Errorf("Text(%q) = %q keeps the secret", s, got)
			}
			if again := Text(got); again != got {
				t.Errorf("Text not idempotent: %q then %q", got, again)
			}
		}
	})
}

func validScheme(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '.' || r == '-'):
		default:
			return false
		}
	}
	return true
}
