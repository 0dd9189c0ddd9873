package secrets

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

// chunkReader returns src in reads of the given sizes (cycled), to exercise boundaries.
type chunkReader struct {
	src   []byte
	sizes []int
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.src) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = max(1, c.sizes[c.i%len(c.sizes)])
		c.i++
	}
	n = min(n, len(p), len(c.src))
	copy(p, c.src[:n])
	c.src = c.src[n:]
	return n, nil
}

func scrubAll(t *testing.T, secrets []string, in []byte, sizes []int) string {
	t.Helper()
	var vals []Secret
	for _, s := range secrets {
		vals = append(vals, NewSecret(s))
	}
	s := newScrubber(vals)
	if s == nil {
		return string(in)
	}
	out, err := io.ReadAll(s.Reader(io.NopCloser(&chunkReader{src: in, sizes: sizes})))
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(out)
}

func TestScrubBody(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{"none", []string{"sk-123456"}, "hello world", "hello world"},
		{"one", []string{"sk-123456"}, `{"echo":"Bearer sk-123456"}`, `{"echo":"Bearer [airlock:redacted]"}`},
		{"twice", []string{"tok"}, "tok-tok", "[airlock:redacted]-[airlock:redacted]"},
		{"adjacent", []string{"ab"}, "abab", "[airlock:redacted][airlock:redacted]"},
		{"prefix at end", []string{"secret"}, "xx secre", "xx secre"},
		{"longest wins", []string{"abc", "abcdef"}, "abcdefabc", "[airlock:redacted][airlock:redacted]"},
		{"two secrets", []string{"one-secret", "two-secret"}, "one-secret two-secret", "[airlock:redacted] [airlock:redacted]"},
		{"empty body", []string{"x1"}, "", ""},
	}
	for _, tt := range tests {
		for _, sizes := range [][]int{nil, {1}, {2, 3}, {7}, {1 << 20}} {
			t.Run(tt.name, func(t *testing.T) {
				if got := scrubAll(t, tt.secrets, []byte(tt.in), sizes); got != tt.want {
					t.Fatalf("chunks %v: got %q, want %q", sizes, got, tt.want)
				}
			})
		}
	}
}

func TestScrubResponse(t *testing.T) {
	const sec = "ghs_canary0123456789"
	s := newScrubber([]Secret{NewSecret(sec)})
	resp := &http.Response{
		StatusCode:    200,
		Header:        http.Header{"X-Echo": {"token " + sec}, "Content-Length": {"27"}},
		Body:          io.NopCloser(strings.NewReader("you sent " + sec + "!")),
		ContentLength: 27,
	}
	s.ScrubResponse(resp)
	body, _ := io.ReadAll(resp.Body)
	if got, want := string(body), "you sent [airlock:redacted]!"; got != want {
		t.Errorf("body: got %q, want %q", got, want)
	}
	if got, want := resp.Header.Get("X-Echo"), "token [airlock:redacted]"; got != want {
		t.Errorf("header: got %q, want %q", got, want)
	}
	if resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "" {
		t.Errorf("content-length: got %d %q, want -1 and none", resp.ContentLength, resp.Header.Get("Content-Length"))
	}
}

func TestScrubResponseEncodings(t *testing.T) {
	const sec = "sk-canary-abcdef"
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write([]byte("echo " + sec))
	_ = w.Close()
	tests := []struct {
		name       string
		enc        string
		body       []byte
		wantStatus int
		wantBody   string
	}{
		{"gzip decoded and scrubbed", "gzip", gz.Bytes(), 200, "echo [airlock:redacted]"},
		{"brotli refused", "br", []byte("opaque"), 502, "content-encoding \"br\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Encoding": {tt.enc}}, Body: io.NopCloser(bytes.NewReader(tt.body))}
			newScrubber([]Secret{NewSecret(sec)}).ScrubResponse(resp)
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if resp.StatusCode != tt.wantStatus || !strings.Contains(string(body), tt.wantBody) {
				t.Fatalf("got %d %q, want %d containing %q", resp.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
			if resp.Header.Get("Content-Encoding") != "" {
				t.Errorf("content-encoding: got %q, want none", resp.Header.Get("Content-Encoding"))
			}
		})
	}
}

func TestScrubReaderContract(t *testing.T) {
	s := newScrubber([]Secret{NewSecret("needle-123")})
	in := strings.Repeat("hay needle-123 hay ", 5000)
	want := strings.ReplaceAll(in, "needle-123", Redaction)
	if err := iotest.TestReader(s.Reader(io.NopCloser(strings.NewReader(in))), []byte(want)); err != nil {
		t.Fatal(err)
	}
}

// FuzzScrub: the output never contains a secret, and input without any secret passes through
// unchanged, however the input is split into reads.
func FuzzScrub(f *testing.F) {
	f.Add("secret", "cret", "a secret here", []byte{3})
	f.Add("ab", "abab", "aab abab b", []byte{1, 2})
	f.Add("xyzxyz", "zx", "xyzxyxyzxyzxyz", []byte{5})
	f.Fuzz(func(t *testing.T, secret, other, body string, sizes []byte) {
		for _, s := range []string{secret, other} {
			if s == "" || strings.ContainsAny(s, "[]") || strings.Contains(Redaction, s) {
				t.Skip("secret overlaps the redaction marker")
			}
		}
		var sz []int
		for _, b := range sizes {
			sz = append(sz, int(b))
		}
		both := scrubAll(t, []string{secret, other}, []byte(body), sz)
		for _, s := range []string{secret, other} {
			if strings.Contains(both, s) {
				t.Fatalf("output %q contains secret %q", both, s)
			}
		}
		if !strings.Contains(body, secret) && !strings.Contains(body, other) && both != body {
			t.Fatalf("body without secrets changed: got %q, want %q", both, body)
		}
		got := scrubAll(t, []string{secret}, []byte(body), sz)
		if strings.Contains(got, secret) {
			t.Fatalf("output %q contains secret %q", got, secret)
		}
		if !strings.Contains(body, secret) && got != body {
			t.Fatalf("body without secret changed: got %q, want %q", got, body)
		}
		if want := strings.ReplaceAll(body, secret, Redaction); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
}
