package approval

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// TestRequestHash: any difference in what is forwarded is a different hash; nothing is left
// out (Cookie, Authorization, every header, every byte of URL and body).
func TestRequestHash(t *testing.T) {
	h := func() http.Header {
		return http.Header{"Content-Type": {"a"}, "X-B": {"1", "2"}, "Cookie": {"s=1"}, "Authorization": {"Bearer sandbox"}}
	}
	with := func(f func(http.Header)) http.Header { x := h(); f(x); return x }
	base := RequestHash("POST", "https://h/x?a=1&b=2", h(), []byte("body"))
	for _, tc := range []struct {
		name string
		got  string
		same bool
	}{
		{"same request", RequestHash("POST", "https://h/x?a=1&b=2", h(), []byte("body")), true},
		{"same headers, map built in another order", RequestHash("POST", "https://h/x?a=1&b=2",
			http.Header{"Authorization": {"Bearer sandbox"}, "Cookie": {"s=1"}, "X-B": {"1", "2"}, "Content-Type": {"a"}}, []byte("body")), true},
		{"other Cookie", RequestHash("POST", "https://h/x?a=1&b=2", with(func(x http.Header) { x.Set("Cookie", "s=2") }), []byte("body")), false},
		{"second Cookie", RequestHash("POST", "https://h/x?a=1&b=2", with(func(x http.Header) { x.Add("Cookie", "t=1") }), []byte("body")), false},
		{"no Cookie", RequestHash("POST", "https://h/x?a=1&b=2", with(func(x http.Header) { x.Del("Cookie") }), []byte("body")), false},
		{"other Authorization", RequestHash("POST", "https://h/x?a=1&b=2", with(func(x http.Header) { x.Set("Authorization", "Bearer other") }), []byte("body")), false},
		{"method override added", RequestHash("POST", "https://h/x?a=1&b=2", with(func(x http.Header) { x.Set("X-Http-Method-Override", "DELETE") }), []byte("body")), false},
		{"empty header added", RequestHash("POST", "https://h/x?a=1&b=2", with(func(x http.Header) { x["X-C"] = []string{""} }), []byte("body")), false},
		{"header with no values added", RequestHash("POST", "https://h/x?a=1&b=2", with(func(x http.Header) { x["X-C"] = nil }), []byte("body")), false},
		{"header name case (sent as is)", RequestHash("POST", "https://h/x?a=1&b=2", with(func(x http.Header) { x["content-type"] = x["Content-Type"]; delete(x, "Content-Type") }), []byte("body")), false},
		{"header value order", RequestHash("POST", "https://h/x?a=1&b=2", with(func(x http.Header) { x["X-B"] = []string{"2", "1"} }), []byte("body")), false},
		{"values split differently", RequestHash("POST", "https://h/x?a=1&b=2", with(func(x http.Header) { x["X-B"] = []string{"1, 2"} }), []byte("body")), false},
		{"value moved into the name", RequestHash("POST", "https://h/x?a=1&b=2", with(func(x http.Header) { delete(x, "X-B"); x["X-B1"] = []string{"2"} }), []byte("body")), false},
		{"tampered body", RequestHash("POST", "https://h/x?a=1&b=2", h(), []byte("bodY")), false},
		{"body one byte longer", RequestHash("POST", "https://h/x?a=1&b=2", h(), []byte("body\x00")), false},
		{"other method", RequestHash("PUT", "https://h/x?a=1&b=2", h(), []byte("body")), false},
		{"method case", RequestHash("post", "https://h/x?a=1&b=2", h(), []byte("body")), false},
		{"other path", RequestHash("POST", "https://h/y?a=1&b=2", h(), []byte("body")), false},
		{"query order", RequestHash("POST", "https://h/x?b=2&a=1", h(), []byte("body")), false},
		{"query encoding", RequestHash("POST", "https://h/x?a=%31&b=2", h(), []byte("body")), false},
		{"other port", RequestHash("POST", "https://h:444/x?a=1&b=2", h(), []byte("body")), false},
		{"other scheme", RequestHash("POST", "http://h/x?a=1&b=2", h(), []byte("body")), false},
		{"bytes moved from URL to body", RequestHash("POST", "https://h/x?a=1&b=", h(), []byte("2body")), false},
	} {
		if (tc.got == base) != tc.same {
			t.Errorf("%s: hash equal = %v, want %v", tc.name, tc.got == base, tc.same)
		}
	}
}

// FuzzRequestHash: two requests that differ in any part never share a hash (the encoding
// is injective: length-prefixed, counted).
func FuzzRequestHash(f *testing.F) {
	f.Add("POST", "https://h/x", "X-A", "1", "b", "POST", "https://h/x", "X-A", "1", "b")
	f.Add("POST", "https://h/x", "X-A", "1", "b", "POST", "https://h/x", "X-A1", "", "b")
	f.Fuzz(func(t *testing.T, m1, u1, k1, v1, b1, m2, u2, k2, v2, b2 string) {
		h1, h2 := http.Header{k1: {v1}}, http.Header{k2: {v2}}
		same := m1 == m2 && u1 == u2 && k1 == k2 && v1 == v2 && b1 == b2
		if got := RequestHash(m1, u1, h1, []byte(b1)) == RequestHash(m2, u2, h2, []byte(b2)); got != same {
			t.Errorf("hash equal = %v for requests equal = %v", got, same)
		}
	})
}

func TestPreview(t *testing.T) {
	for _, tc := range []struct {
		body string
		max  int
		want string
		cut  bool
	}{
		{"hello", 10, "hello", false},
		{"hello", 5, "hello", false},
		{"hello", 3, "hel", true},
		{"héllo", 2, "h", true}, // é is two bytes: never split it
		{"héllo", 3, "hé", true},
		{"a😀b", 4, "a", true}, // 4-byte rune cut in the middle
		{"a\xffb", 10, "a\uFFFDb", false},
		{"", 0, "", false},
	} {
		got, cut := Preview([]byte(tc.body), tc.max)
		if got != tc.want || cut != tc.cut || !utf8.ValidString(got) {
			t.Errorf("Preview(%q, %d): got %q, %v; want %q, %v", tc.body, tc.max, got, cut, tc.want, tc.cut)
		}
	}
}

func FuzzPreview(f *testing.F) {
	f.Add([]byte("héllo 😀"), 5)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		max %= 64
		got, _ := Preview(b, max)
		if !utf8.ValidString(got) {
			t.Errorf("Preview gave invalid UTF-8 %q", got)
		}
		if max >= 0 && len(b) > max && len(got) > max*3 {
			t.Errorf("Preview(%d) is %d bytes long", max, len(got))
		}
	})
}

func TestParseByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ByteSize
		ok   bool
	}{
		{"1024", 1024, true}, {"1MiB", 1 << 20, true}, {"2KiB", 2048, true}, {"1M", 1 << 20, true},
		{"2k", 2048, true}, {"1 GiB", 1 << 30, true}, {"10kb", 10240, true},
		{"", 0, false}, {"MiB", 0, false}, {"1TiB", 0, false}, {"-1", 0, false}, {"1.5M", 0, false},
	} {
		got, err := ParseByteSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseByteSize(%q): got %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestConfigYAML(t *testing.T) {
	var c struct {
		Approvals Config `yaml:"approvals"`
	}
	src := `approvals:
  timeout: 10m
  store: "sqlite:/var/lib/airlock/approvals.db"
  webhook: https://hooks.example.com/x
  webhook_format: slack
  approvers: [{name: oncall, token_file: /etc/airlock/oncall.token}]
  retry_window: 30s
  max_body: 2MiB
  body_preview: 4KiB
`
	if err := yaml.Unmarshal([]byte(src), &c); err != nil {
		t.Fatal(err)
	}
	a := c.Approvals
	if a.Timeout.D().String() != "10m0s" || a.RetryWindow.D().String() != "30s" || a.MaxBody != 2<<20 || a.BodyPreview != 4<<10 ||
		len(a.Approvers) != 1 || a.Approvers[0].Name != "oncall" {
		t.Errorf("decoded: got %+v", a)
	}
	if err := a.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	err := yaml.Unmarshal([]byte("approvals:\n  timeout: 300\n"), &c)
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bare number timeout: got %v, want an error naming line 2", err)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := ApproverConfig{Name: "oncall", TokenFile: "/t"}
	for _, tc := range []struct {
		name string
		c    Config
		key  string // "" means valid
	}{
		{"zero value", Config{}, ""},
		{"postgres", Config{Store: "postgres://u@db/airlock"}, ""},
		{"negative timeout", Config{Timeout: -1}, "approvals.timeout"},
		{"bad store", Config{Store: "mysql://x"}, "approvals.store"},
		{"sqlite without path", Config{Store: "sqlite:"}, "approvals.store"},
		{"webhook not http", Config{Webhook: "ftp://x"}, "approvals.webhook"},
		{"service without host", Config{Service: "http://"}, "approvals.service"},
		{"bad format", Config{WebhookFormat: "xml"}, "approvals.webhook_format"},
		{"approver without name", Config{Approvers: []ApproverConfig{{TokenFile: "/t"}}}, "approvals.approvers[0].name"},
		{"approver without token", Config{Approvers: []ApproverConfig{ok, {Name: "b"}}}, "approvals.approvers[1].token_file"},
		{"approver twice", Config{Approvers: []ApproverConfig{ok, ok}}, "approvals.approvers[1].name"},
		{"negative max_body", Config{MaxBody: -1}, "approvals.max_body"},
	} {
		err := tc.c.Validate()
		switch {
		case tc.key == "" && err != nil:
			t.Errorf("%s: got %v, want valid", tc.name, err)
		case tc.key != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.key+":")):
			t.Errorf("%s: got %v, want an error naming %s", tc.name, err, tc.key)
		}
	}
	if err := (Config{Store: "postgres://u:hunter2@db/x?sslmode=bogus"}).Validate(); err != nil && strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error leaks the password: %v", err)
	}
}
