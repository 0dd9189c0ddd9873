package secrets

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
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

func scrubAll(t testing.TB, secrets []string, in []byte, sizes []int) string {
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

const R = Redaction

func first[A, B any](a A, _ B) A { return a }

func TestScrubBody(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{"none", []string{"sk-123456"}, "hello world", "hello world"},
		{"one", []string{"sk-123456"}, `{"echo":"Bearer sk-123456"}`, `{"echo":"Bearer ` + R + `"}`},
		{"twice", []string{"tok"}, "tok-tok", R + "-" + R},
		{"adjacent runs are one marker", []string{"ab"}, "abab", R},
		{"prefix at end, short", []string{"secret"}, "xx secre", "xx secre"},
		{"prefix at end, long", []string{"sk-live-0123456789"}, "xx sk-live-012345678", "xx sk-live-012345678"},
		{"overlapping values", []string{"abc", "abcdef"}, "abcdefabc", R},
		{"two secrets", []string{"one-secret", "two-secret"}, "one-secret two-secret", R + " " + R},
		{"empty body", []string{"x1"}, "", ""},
		{"any letter case", []string{"Sk-Live-Abc"}, "a SK-LIVE-ABC b sk-live-abc c sK-lIvE-aBc", "a " + R + " b " + R + " c " + R},
		{"percent-encoded", []string{"a/b+c d"}, "q=a%2Fb%2Bc+d&r=a%2fb%2bc%20d", "q=" + R + "&r=" + R},
		{"mixed escapes", []string{"tok/en-1"}, `x tok\/en\u002d1 tok%2fen&#45;1 y`, "x " + R + " " + R + " y"},
		{"self-overlapping value", []string{"aaaaaa"}, strings.Repeat("a", 40) + "b", R + "b"},
		{"value inside its own base64", []string{"sk-0123456789"}, "sk-0123456789c2stMDEyMzQ1Njc4OQ==", R},
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

// TestRedactorWindow: however the input arrives, the redactor holds back exactly the last
// window-1 bytes (the longest pattern less one), also on input that keeps many matches in
// progress.
func TestRedactorWindow(t *testing.T) {
	for _, tc := range []struct{ secret, in string }{
		{"sk-live-0123456789", strings.Repeat("lorem ipsum sk-live-0123 dolor ", 200)},
		{"aaaaaaaaaaaaaaaa", strings.Repeat("a", 5000)},
		{"abab-abab-abab", strings.Repeat("abab-", 2000)},
		{"%2F%2F%2F%2F", strings.Repeat("%252F", 2000)},
	} {
		m := compile([]string{tc.secret})
		r := newRedactor(m)
		var out []byte
		for i := 0; i < len(tc.in); i++ {
			out = r.feed([]byte{tc.in[i]}, out)
			if len(r.pending) != min(i+1, m.window-1) {
				t.Fatalf("%q: %d bytes held after %d, window %d", tc.secret, len(r.pending), i+1, m.window)
			}
		}
		out = r.finish(out)
		if got, want := string(out), first(m.replace(tc.in)); got != want {
			t.Errorf("%q: byte by byte %q..., at once %q...", tc.secret, got[:min(60, len(got))], want[:min(60, len(want))])
		}
	}
}

func TestScrubResponseHeadersStatusTrailers(t *testing.T) {
	const sec = "ghs_canary0123456789"
	s := newScrubber([]Secret{NewSecret(sec)})
	trailer := http.Header{"X-Declared": nil}
	resp := &http.Response{
		StatusCode:    200,
		Status:        "200 token " + sec,
		Header:        http.Header{"X-Echo": {"token " + sec}, "X-" + sec: {"v"}, "Content-Length": {"27"}},
		Trailer:       trailer,
		Body:          io.NopCloser(strings.NewReader("you sent " + sec + "!")),
		ContentLength: 27,
	}
	// As the transport does: the trailers' values (and undeclared ones) arrive with the end
	// of the body, into the same map.
	resp.Body = &fillAtEOF{ReadCloser: resp.Body, fill: func() {
		trailer["X-Declared"] = []string{sec}
		trailer["X-Undeclared"] = []string{"b64 " + base64.StdEncoding.EncodeToString([]byte(sec))}
		trailer["X-Name-"+strings.ToUpper(sec)] = []string{"v"}
	}}
	if err := s.ScrubResponse(resp); err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if got, want := string(body), "you sent "+R+"!"; got != want {
		t.Errorf("body: got %q, want %q", got, want)
	}
	var all bytes.Buffer
	resp.Header.Write(&all)
	resp.Trailer.Write(&all)
	all.WriteString(resp.Status)
	if strings.Contains(strings.ToLower(all.String()), strings.ToLower(sec)) || strings.Contains(all.String(), base64.RawStdEncoding.EncodeToString([]byte(sec))) {
		t.Errorf("status, headers or trailers hold the value: %q", all.String())
	}
	if got := resp.Trailer.Get("X-Declared"); got != R {
		t.Errorf("declared trailer: got %q, want %q", got, R)
	}
	if resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "" {
		t.Errorf("content-length: got %d %q, want -1 and none", resp.ContentLength, resp.Header.Get("Content-Length"))
	}
}

type fillAtEOF struct {
	io.ReadCloser
	fill func()
}

func (f *fillAtEOF) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if err == io.EOF {
		f.fill()
	}
	return n, err
}

func TestScrubHeadLeavesTheBody(t *testing.T) {
	const sec = "ghs_canary0123456789"
	s := newScrubber([]Secret{NewSecret(sec)})
	body := "PK\x03\x04 a zip that happens to hold " + sec
	trailer := http.Header{}
	resp := &http.Response{StatusCode: 206, Status: "206 " + sec, Header: http.Header{"X-Echo": {sec}, "Content-Length": {fmt.Sprint(len(body))}},
		Trailer: trailer, ContentLength: int64(len(body))}
	resp.Body = &fillAtEOF{ReadCloser: io.NopCloser(strings.NewReader(body)), fill: func() { trailer.Set("X-T", sec) }}
	s.ScrubHead(resp)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != body || resp.ContentLength != int64(len(body)) || resp.Header.Get("Content-Length") == "" {
		t.Errorf("body or length changed: %q %d", got, resp.ContentLength)
	}
	if resp.Header.Get("X-Echo") != R || resp.Trailer.Get("X-T") != R || strings.Contains(resp.Status, sec) {
		t.Errorf("head not scrubbed: %q %v %v", resp.Status, resp.Header, resp.Trailer)
	}
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

func TestScrubResponseContent(t *testing.T) {
	const sec = "sk-canary-abcdef"
	echo := []byte("echo " + sec + " end")
	var zl, raw bytes.Buffer
	zw := zlib.NewWriter(&zl)
	zw.Write(echo)
	zw.Close()
	fw, _ := flate.NewWriter(&raw, flate.BestSpeed)
	fw.Write(echo)
	fw.Close()
	bomb := gz(make([]byte, 8<<20))
	tests := []struct {
		name     string
		header   http.Header
		status   int
		body     []byte
		want     string // the scrubbed body; "" when refused
		refusals string // in the error when refused
	}{
		{"plain", nil, 200, echo, "echo " + R + " end", ""},
		{"gzip decoded and scrubbed", http.Header{"Content-Encoding": {"gzip"}}, 200, gz(echo), "echo " + R + " end", ""},
		{"x-gzip", http.Header{"Content-Encoding": {"X-Gzip"}}, 200, gz(echo), "echo " + R + " end", ""},
		{"deflate as zlib", http.Header{"Content-Encoding": {"deflate"}}, 200, zl.Bytes(), "echo " + R + " end", ""},
		{"deflate raw", http.Header{"Content-Encoding": {"deflate"}}, 200, raw.Bytes(), "echo " + R + " end", ""},
		{"identity listed", http.Header{"Content-Encoding": {"identity"}}, 200, echo, "echo " + R + " end", ""},
		{"gzip then identity", http.Header{"Content-Encoding": {"gzip, identity"}}, 200, gz(echo), "echo " + R + " end", ""},
		{"octet-stream binary is scrubbed", http.Header{"Content-Type": {"application/octet-stream"}}, 200, append([]byte{0, 1, 2, 0xff}, echo...), "\x00\x01\x02\xffecho " + R + " end", ""},
		{"short body", nil, 200, []byte("ok"), "ok", ""},
		{"empty body", nil, 200, nil, "", ""},
		{"stacked in one field", http.Header{"Content-Encoding": {"gzip, gzip"}}, 200, gz(gz(echo)), "", "stacked content codings"},
		{"stacked in two fields", http.Header{"Content-Encoding": {"gzip", "gzip"}}, 200, gz(gz(echo)), "", "stacked content codings"},
		{"deflate over gzip", http.Header{"Content-Encoding": {"gzip", "deflate"}}, 200, gz(echo), "", "stacked content codings"},
		{"brotli", http.Header{"Content-Encoding": {"br"}}, 200, []byte("opaque"), "", `content-encoding "br"`},
		{"zstd", http.Header{"Content-Encoding": {"zstd"}}, 200, []byte("opaque"), "", `content-encoding "zstd"`},
		{"compress", http.Header{"Content-Encoding": {"compress"}}, 200, []byte("opaque"), "", `content-encoding "compress"`},
		{"made-up coding", http.Header{"Content-Encoding": {"rot13"}}, 200, echo, "", `content-encoding "rot13"`},
		{"gzip file as application/gzip", http.Header{"Content-Type": {"application/gzip"}}, 200, gz(echo), "", "application/gzip"},
		{"gzip file with a charset", http.Header{"Content-Type": {"Application/X-Gzip; charset=binary"}}, 200, gz(echo), "", "application/x-gzip"},
		{"gzip file as octet-stream", http.Header{"Content-Type": {"application/octet-stream"}}, 200, gz(echo), "", "gzip data"},
		{"gzip file as text", http.Header{"Content-Type": {"text/plain"}}, 200, gz(echo), "", "gzip data"},
		{"gzip file inside gzip coding", http.Header{"Content-Encoding": {"gzip"}}, 200, gz(gz(echo)), "", "gzip data"},
		{"zlib stream as text", nil, 200, zl.Bytes(), "", "zlib data"},
		{"zip", nil, 200, []byte("PK\x03\x04\x14\x00rest"), "", "zip data"},
		{"bzip2", nil, 200, []byte("BZh91AY&SY"), "", "bzip2 data"},
		{"xz", nil, 200, []byte("\xfd7zXZ\x00\x00\x04"), "", "xz data"},
		{"zstd frame", nil, 200, []byte("\x28\xb5\x2f\xfd\x00\x00"), "", "zstd data"},
		{"7z", nil, 200, []byte("7z\xbc\xaf\x27\x1c\x00\x04"), "", "7z data"},
		{"zip by type", http.Header{"Content-Type": {"application/zip"}}, 200, echo, "", "application/zip"},
		{"epub+zip", http.Header{"Content-Type": {"application/epub+zip"}}, 200, echo, "", "application/epub+zip"},
		{"partial content", http.Header{"Content-Range": {"bytes 0-3/20"}}, 206, []byte("sk-c"), "", "partial response"},
		{"multipart byteranges", http.Header{"Content-Type": {"multipart/byteranges; boundary=x"}}, 200, []byte("--x\r\n\r\nsk-c\r\n--x--"), "", "partial response"},
		{"corrupt gzip", http.Header{"Content-Encoding": {"gzip"}}, 200, []byte("not gzip at all"), "", "could not be read or decoded"},
		{"gzip bomb", http.Header{"Content-Encoding": {"gzip"}}, 200, bomb, "bomb", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h[k] = v
			}
			closed := false
			resp := &http.Response{StatusCode: tt.status, Status: fmt.Sprintf("%d x", tt.status), Header: h,
				Body: &onClose{Reader: bytes.NewReader(tt.body), f: func() { closed = true }}}
			s := newScrubber([]Secret{NewSecret(sec)})
			s.decodeFree = 1 << 20 // the bomb below inflates 1000 times: cut off after 1 MiB
			err := s.ScrubResponse(resp)
			if tt.refusals != "" {
				var ue *UninspectableError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.refusals) {
					t.Fatalf("error %v, want an UninspectableError about %q", err, tt.refusals)
				}
				if !closed {
					t.Error("the refused body was not closed")
				}
				return
			}
			if err != nil {
				t.Fatalf("ScrubResponse: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			if tt.want == "bomb" {
				var ue *UninspectableError
				if !errors.As(err, &ue) || int64(len(body)) > int64(maxDecodeRatio*len(tt.body))+s.decodeFree+64<<10 {
					t.Fatalf("bomb: read %d bytes, error %v; want it cut off", len(body), err)
				}
				return
			}
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if string(body) != tt.want {
				t.Errorf("body: got %q, want %q", body, tt.want)
			}
			if len(contentCodings(resp.Header)) > 0 {
				t.Errorf("content-encoding: got %q, want none after decoding", resp.Header.Get("Content-Encoding"))
			}
		})
	}
}

type onClose struct {
	io.Reader
	f func()
}

func (o *onClose) Close() error { o.f(); return nil }

// TestScrubReaderErrors: the text of a read error is scrubbed (a transport error may quote
// the upstream), errors.Is still sees what it was, and the bytes held back when it came are
// dropped, not flushed.
func TestScrubReaderErrors(t *testing.T) {
	const sec = "sk-live-0123456789"
	s := newScrubber([]Secret{NewSecret(sec)})
	in := "ok " + strings.Repeat("x", 3*s.m.window) + sec[:10]
	src := io.MultiReader(strings.NewReader(in), iotest.ErrReader(fmt.Errorf("malformed %q: %w", sec, net.ErrClosed)))
	got, err := io.ReadAll(s.Reader(io.NopCloser(src)))
	if err == nil || strings.Contains(err.Error(), sec) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("error %v: want its text scrubbed and net.ErrClosed still seen", err)
	}
	if want := in[:len(in)-(s.m.window-1)]; string(got) != want {
		t.Errorf("read %d bytes before the error, want %d (the held-back bytes dropped)", len(got), len(want))
	}
	if got := s.ScrubString("x " + sec); got != "x "+R {
		t.Errorf("ScrubString: got %q", got)
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

// FuzzScrubResponse: whatever an upstream sends (codings, media type, body bytes, with the
// value inside them or not), ScrubResponse either refuses it or yields a body without the
// value, and never fails otherwise.
func FuzzScrubResponse(f *testing.F) {
	const sec = "sk-fuzz-0123456789"
	f.Add("gzip", "text/plain", []byte("a"), []byte("b"), uint8(1))
	f.Add("deflate", "application/json", []byte("{"), []byte("}"), uint8(2))
	f.Add("", "application/octet-stream", []byte{0x1f}, []byte{0}, uint8(0))
	f.Add("gzip, identity", "", []byte("PK"), []byte{}, uint8(3))
	f.Fuzz(func(t *testing.T, coding, ctype string, pre, post []byte, mode uint8) {
		plain := append(append(append([]byte(nil), pre...), sec...), post...)
		body := plain
		switch mode % 4 {
		case 1:
			body = gz(plain)
		case 2:
			var b bytes.Buffer
			w := zlib.NewWriter(&b)
			w.Write(plain)
			w.Close()
			body = b.Bytes()
		case 3:
			body = pre // arbitrary bytes under whatever coding is claimed
		}
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Encoding": {coding}, "Content-Type": {ctype}},
			Body: io.NopCloser(bytes.NewReader(body))}
		s := newScrubber([]Secret{NewSecret(sec)})
		s.decodeFree = 1 << 16
		if err := s.ScrubResponse(resp); err != nil {
			var ue *UninspectableError
			if !errors.As(err, &ue) {
				t.Fatalf("error %v, want an UninspectableError", err)
			}
			return
		}
		out, _ := io.ReadAll(resp.Body)
		if bytes.Contains(bytes.ToLower(out), []byte(sec)) {
			t.Fatalf("coding %q type %q: the value came through: %q", coding, ctype, out)
		}
	})
}

// A response that declares a small length (up to wholeBodyMax) is scrubbed whole before it
// goes on and gets the scrubbed length: an intercepted tunnel then sends it with a
// Content-Length, not chunked (each chunk's framing was a TLS record of its own). A larger
// or undeclared length streams as before; trailers keep it chunked; a compressed payload
// anywhere in a small body refuses the response instead of cutting it.
func TestScrubResponseWholeSmallBody(t *testing.T) {
	const sec = "sk-canary-abcdef"
	s := newScrubber([]Secret{NewSecret(sec)})
	echo := "echo " + sec + " end"
	big := strings.Repeat("x", wholeBodyMax) + echo
	for _, tc := range []struct {
		name     string
		body     string
		length   int64 // declared; -1 unknown
		trailer  http.Header
		want     string
		wantLen  int64  // the response's ContentLength after scrubbing
		refusals string // in the error when refused
	}{
		{"echoed value", echo, int64(len(echo)), nil, "echo " + R + " end", int64(len("echo " + R + " end")), ""},
		{"clean", "all clear", 9, nil, "all clear", 9, ""},
		{"empty", "", 0, nil, "", 0, ""},
		{"length undeclared streams", echo, -1, nil, "echo " + R + " end", -1, ""},
		{"above the bound streams", big, int64(len(big)), nil, strings.Repeat("x", wholeBodyMax) + "echo " + R + " end", -1, ""},
		{"trailers stay chunked", echo, int64(len(echo)), http.Header{"X-Sum": nil}, "echo " + R + " end", -1, ""},
		{"zstd frame inside is refused whole", "log: \x28\xb5\x2f\xfd and more", 21, nil, "", 0, "zstd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: tc.length,
				TransferEncoding: []string{"chunked"}, Trailer: tc.trailer,
				Body: io.NopCloser(&chunkReader{src: []byte(tc.body), sizes: []int{3}})}
			if tc.length >= 0 {
				resp.Header.Set("Content-Length", fmt.Sprint(tc.length))
				resp.TransferEncoding = nil
			}
			err := s.ScrubResponse(resp)
			if tc.refusals != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refusals) {
					t.Fatalf("ScrubResponse = %v, want a refusal naming %q", err, tc.refusals)
				}
				return
			}
			if err != nil {
				t.Fatalf("ScrubResponse: %v", err)
			}
			if resp.ContentLength != tc.wantLen {
				t.Errorf("ContentLength = %d, want %d", resp.ContentLength, tc.wantLen)
			}
			if h := resp.Header.Get("Content-Length"); tc.wantLen >= 0 && h != fmt.Sprint(tc.wantLen) || tc.wantLen < 0 && h != "" {
				t.Errorf("Content-Length header %q, want the length %d (none when -1)", h, tc.wantLen)
			}
			if tc.wantLen >= 0 && len(resp.TransferEncoding) != 0 {
				t.Errorf("TransferEncoding = %q, want none beside a Content-Length", resp.TransferEncoding)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || string(got) != tc.want {
				t.Errorf("body %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// Streamed bodies share pooled working buffers: bodies read at once, one after another,
// some abandoned halfway and some ending in an error or a held-back prefix, each get
// exactly their own scrubbed bytes, nothing of another's.
func TestScrubReadersShareBuffersWithoutMixingBodies(t *testing.T) {
	secret := "sk-pool-0123456789abcdef"
	s := newScrubber([]Secret{NewSecret(secret)})
	body := func(i int) (in, want string) {
		var b, w strings.Builder
		for j := 0; b.Len() < 80<<10+i*997; j++ {
			part := fmt.Sprintf("body %d line %d ", i, j)
			b.WriteString(part)
			w.WriteString(part)
			if j%(50+i) == 0 {
				b.WriteString(secret)
				w.WriteString(R)
			}
		}
		b.WriteString("tail sk-pool-01") // a prefix of the value at the end is passed on
		w.WriteString("tail sk-pool-01")
		return b.String(), w.String()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 8 {
				i := g*8 + k
				in, want := body(i)
				src := io.NopCloser(&chunkReader{src: []byte(in), sizes: []int{i*131 + 1, 32 << 10, 7}})
				r := s.Reader(src)
				switch i % 4 {
				case 1: // abandoned after a few reads
					buf := make([]byte, 5000)
					for range 3 {
						r.Read(buf)
					}
					r.Close()
					continue
				case 2: // ends in an error: what came before it, then the error
					r = s.Reader(io.NopCloser(io.MultiReader(strings.NewReader(in[:40<<10]), iotest.ErrReader(errors.New("upstream reset")))))
					got, err := io.ReadAll(r)
					if err == nil || !strings.HasPrefix(want, string(got)) {
						errs <- fmt.Errorf("body %d with an error: %d bytes, err %v; want a prefix of its own scrubbed bytes", i, len(got), err)
					}
					continue
				}
				got, err := io.ReadAll(r)
				if err != nil || string(got) != want {
					errs <- fmt.Errorf("body %d: %d bytes (err %v), want its own %d", i, len(got), err, len(want))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A pooled stream keeps its grown buffers only within a bound: a body of many short values
// grows its output several times over, and the pool would keep that for every later body.
func TestScrubReaderKeepsNoHugeBuffers(t *testing.T) {
	s := newScrubber([]Secret{NewSecret("ab")})
	in := strings.Repeat("ab-", 3*streamChunk) // a marker for every three bytes
	r := s.Reader(io.NopCloser(strings.NewReader(in))).(*scrubReader)
	var grew int
	buf := make([]byte, 512)
	for {
		if r.bufs != nil {
			grew = max(grew, cap(r.buf))
		}
		if _, err := r.Read(buf); err != nil {
			break
		}
	}
	if grew <= 4*streamChunk {
		t.Fatalf("the output grew to %d bytes only; the case needs more than %d", grew, 4*streamChunk)
	}
	if b := keepable(make([]byte, 10, grew)); b != nil {
		t.Fatalf("a %d-byte buffer is kept for the pool", grew)
	}
	if b := keepable(make([]byte, 10, streamChunk)); b == nil || len(b) != 0 || cap(b) != streamChunk {
		t.Fatalf("a chunk-sized buffer is not kept emptied: len %d cap %d", len(b), cap(b))
	}
}
