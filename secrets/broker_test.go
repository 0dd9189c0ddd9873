package secrets

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestBroker(t *testing.T, creds map[string]CredentialConfig, clk *clock) *Broker {
	t.Helper()
	o := Options{Credentials: creds, SweepInterval: time.Hour}
	if clk != nil {
		o.Now = clk.Now
	}
	b, err := New(context.Background(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

func outbound(t *testing.T, rawURL string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAttachInjection(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_TOKEN", "tok-0123456789")
	b := newTestBroker(t, map[string]CredentialConfig{
		"hdr":   {Env: "AIRLOCK_TEST_TOKEN", Inject: Inject{Header: "authorization", Value: "Bearer {{ .value }}"}},
		"query": {Env: "AIRLOCK_TEST_TOKEN", Inject: Inject{Query: "api_key", Value: "{{ .value }}"}},
		"basic": {Env: "AIRLOCK_TEST_TOKEN", Inject: Inject{Basic: &BasicInject{Username: "x-access-token", Password: "{{ .value }}"}}},
	}, nil)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:tok-0123456789"))
	tests := []struct {
		name      string
		url       string
		header    http.Header
		wantURL   string
		wantAuth  string
		wantOther map[string]string
	}{
		{"header replaces client's", "https://api.example/x", http.Header{"Authorization": {"Bearer sandbox-guess"}, "Proxy-Authorization": {"Basic abc"}},
			"https://api.example/x", "Bearer tok-0123456789", nil},
		{"query replaces client's", "https://api.example/x?a=1&api_key=guess&b=2&api%5Fkey=g2", nil,
			"https://api.example/x?a=1&b=2&api_key=tok-0123456789", "", nil},
		{"basic", "https://git.example/repo", http.Header{"Authorization": {"Basic Zm9vOmJhcg=="}},
			"https://git.example/repo", basic, nil},
	}
	names := map[string]string{"header replaces client's": "hdr", "query replaces client's": "query", "basic": "basic"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := outbound(t, tt.url)
			for k, v := range tt.header {
				out.Header[k] = v
			}
			s, err := b.Attach(context.Background(), AttachRequest{SandboxID: "sbx-1", Names: []string{names[tt.name]}, Out: out})
			if err != nil {
				t.Fatalf("Attach: %v", err)
			}
			if s == nil {
				t.Fatal("scrubber: got nil, want one")
			}
			if got := out.URL.String(); got != tt.wantURL {
				t.Errorf("url: got %q, want %q", got, tt.wantURL)
			}
			if got := strings.Join(out.Header.Values("Authorization"), ","); got != tt.wantAuth {
				t.Errorf("authorization: got %q, want %q", got, tt.wantAuth)
			}
			if got := out.Header.Get("Proxy-Authorization"); got != "" {
				t.Errorf("proxy-authorization: got %q, want none", got)
			}
			if got := out.Header.Get("Accept-Encoding"); got != "identity" {
				t.Errorf("accept-encoding: got %q, want identity", got)
			}
		})
	}
}

func TestAttachNoNames(t *testing.T) {
	b := newTestBroker(t, nil, nil)
	s, err := b.Attach(context.Background(), AttachRequest{SandboxID: "s", Out: outbound(t, "http://x/")})
	if s != nil || err != nil {
		t.Fatalf("got %v, %v; want nil, nil", s, err)
	}
}

func TestAttachErrors(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_EMPTYISH", "   ")
	t.Setenv("AIRLOCK_TEST_SET", "value-1234")
	b := newTestBroker(t, map[string]CredentialConfig{
		"unset":   {Env: "AIRLOCK_TEST_NOT_SET_ANYWHERE", Inject: Inject{Header: "X-Key", Value: "{{ .value }}"}},
		"blank":   {Env: "AIRLOCK_TEST_EMPTYISH", Inject: Inject{Header: "X-Key", Value: "{{ .value }}"}},
		"nofile":  {File: filepath.Join(t.TempDir(), "missing"), Inject: Inject{Header: "X-Key", Value: "{{ .value }}"}},
		"empty":   {Env: "AIRLOCK_TEST_SET", Inject: Inject{Header: "X-Key", Value: "{{ if false }}{{ .value }}{{ end }}"}},
		"missing": {Env: "AIRLOCK_TEST_SET", Inject: Inject{Header: "X-Key", Value: "{{ .data.token }}"}},
	}, nil)
	tests := []struct {
		name       string
		wantStatus int
		wantText   string
	}{
		{"unset", 503, "AIRLOCK_TEST_NOT_SET_ANYWHERE"},
		{"blank", 503, "not set"},
		{"nofile", 503, "cannot be read"},
		{"empty", 502, "empty value"},
		{"missing", 502, "template"},
		{"undefined", 500, "not configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := outbound(t, "http://x/")
			s, err := b.Attach(context.Background(), AttachRequest{SandboxID: "s", Names: []string{tt.name}, Out: out})
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want *Error", err, err)
			}
			if s != nil {
				t.Errorf("scrubber: got %v, want nil", s)
			}
			if e.HTTPStatus() != tt.wantStatus || !strings.Contains(err.Error(), tt.wantText) || !strings.Contains(err.Error(), `"`+tt.name+`"`) {
				t.Errorf("got %d %q, want %d containing %q and the name", e.HTTPStatus(), err, tt.wantStatus, tt.wantText)
			}
			if out.Header.Get("X-Key") != "" {
				t.Errorf("header set despite error")
			}
		})
	}
}

func TestCacheExpiryAndRevoke(t *testing.T) {
	file := filepath.Join(t.TempDir(), "key")
	write := func(v string) {
		if err := os.WriteFile(file, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first-value")
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	b := newTestBroker(t, map[string]CredentialConfig{
		"k": {File: file, Inject: Inject{Header: "X-Key", Value: "{{ .value }}"}, MaxTTL: Duration(time.Minute)},
	}, clk)
	get := func(sandbox string) string {
		t.Helper()
		out := outbound(t, "http://x/")
		if _, err := b.Attach(context.Background(), AttachRequest{SandboxID: sandbox, Names: []string{"k"}, Out: out}); err != nil {
			t.Fatalf("Attach: %v", err)
		}
		return out.Header.Get("X-Key")
	}
	steps := []struct {
		do      func()
		sandbox string
		want    string
	}{
		{nil, "a", "first-value"},
		{func() { write("second-value") }, "a", "first-value"}, // cached
		{nil, "b", "second-value"},                             // per sandbox
		{func() { clk.Add(61 * time.Second) }, "a", "second-value"},
		{func() { write("third-value"); _ = b.RevokeSandbox(context.Background(), "b") }, "b", "third-value"},
		{nil, "a", "second-value"},
	}
	for i, s := range steps {
		if s.do != nil {
			s.do()
		}
		if got := get(s.sandbox); got != s.want {
			t.Fatalf("step %d (%s): got %q, want %q", i, s.sandbox, got, s.want)
		}
	}
}

func TestClosedBrokerRefuses(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_SET", "value-1234")
	b := newTestBroker(t, map[string]CredentialConfig{"k": {Env: "AIRLOCK_TEST_SET", Inject: Inject{Header: "X-Key", Value: "{{ .value }}"}}}, nil)
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err := b.Attach(context.Background(), AttachRequest{SandboxID: "s", Names: []string{"k"}, Out: outbound(t, "http://x/")})
	var e *Error
	if !errors.As(err, &e) || e.HTTPStatus() != 503 {
		t.Fatalf("got %v, want a 503 *Error", err)
	}
}
