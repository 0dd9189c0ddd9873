package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/internal/identity"
)

// rawUpstream is a TCP server whose connections serve (given each connection's index, 0
// first); it counts the connections.
type rawUpstream struct {
	ln    net.Listener
	conns atomic.Int32
}

func newRawUpstream(t *testing.T, serve func(i int, c net.Conn, br *bufio.Reader)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			i := int(u.conns.Add(1)) - 1
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(i, c, bufio.NewReader(c))
			}()
		}
	}()
	return u
}

func (u *rawUpstream) url(path string) string { return "http://" + u.ln.Addr().String() + path }

// readRequest reads one request head (the requests here have no body).
func readRequest(br *bufio.Reader) (*http.Request, error) { return http.ReadRequest(br) }

func newH1(timeout time.Duration) *h1Transport {
	return &h1Transport{dial: (&net.Dialer{}).DialContext, headerTimeout: timeout}
}

// h1Get sends a GET through t and returns the response and its whole body.
func h1Get(t *testing.T, tr *h1Transport, ctx context.Context, u string, hdr ...string) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if !h1Direct(req) {
		t.Fatalf("h1Direct(GET %s) = false", u)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

func TestH1DirectTakesOnlyBodilessReads(t *testing.T) {
	mk := func(method, u string, body io.Reader, f func(*http.Request)) *http.Request {
		r, err := http.NewRequest(method, u, body)
		if err != nil {
			t.Fatal(err)
		}
		if f != nil {
			f(r)
		}
		return r
	}
	for _, c := range []struct {
		name string
		req  *http.Request
		want bool
	}{
		{"GET", mk("GET", "http://example.com/x", nil, nil), true},
		{"HEAD", mk("HEAD", "http://example.com/x", nil, nil), true},
		{"GET with NoBody", mk("GET", "http://example.com/x", http.NoBody, nil), true},
		{"POST", mk("POST", "http://example.com/x", nil, nil), false},
		{"DELETE", mk("DELETE", "http://example.com/x", nil, nil), false},
		{"GET with a body", mk("GET", "http://example.com/x", strings.NewReader("b"), nil), false},
		{"GET with a length and no body", mk("GET", "http://example.com/x", nil, func(r *http.Request) { r.ContentLength = 3 }), false},
		{"chunked GET", mk("GET", "http://example.com/x", nil, func(r *http.Request) { r.TransferEncoding = []string{"chunked"} }), false},
		{"GET with trailers", mk("GET", "http://example.com/x", nil, func(r *http.Request) { r.Trailer = http.Header{"X": nil} }), false},
		{"HTTPS", mk("GET", "https://example.com/x", nil, nil), true},
		{"FTP", mk("GET", "ftp://example.com/x", nil, nil), false},
		{"upgrade", mk("GET", "http://example.com/ws", nil, func(r *http.Request) { r.Header.Set("Upgrade", "websocket") }), false},
	} {
		if got := h1Direct(c.req); got != c.want {
			t.Errorf("%s: h1Direct = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestH1ReusesOneConnectionForSequentialRequests(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "answer %s", r.URL.Path)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := newH1(time.Second)
	defer tr.CloseIdleConnections()
	for i := range 20 {
		_, body, err := h1Get(t, tr, context.Background(), fmt.Sprintf("%s/%d", srv.URL, i))
		if err != nil || body != fmt.Sprintf("answer /%d", i) {
			t.Fatalf("request %d: %q, %v", i, body, err)
		}
	}
	// A HEAD and a 204 have no body: their connection goes back at once.
	req, _ := http.NewRequest(http.MethodHead, srv.URL+"/h", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := conns.Load(); n != 1 {
		t.Fatalf("21 requests one after another took %d connections, want 1", n)
	}
}

// An upstream that writes bytes nobody asked for on an idle connection (a second,
// forged answer) must not have them taken for the answer to the next request, which may
// be another sandbox's.
func TestH1NeverTakesUnaskedBytesForAnAnswer(t *testing.T) {
	sent := make(chan struct{})
	u := newRawUpstream(t, func(i int, c net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			body := fmt.Sprintf("real %d %s", i, req.URL.Path)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			if i == 0 {
				// Then, unasked, a second answer.
				time.Sleep(20 * time.Millisecond)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged")
				close(sent)
			}
		}
	})
	tr := newH1(time.Second)
	defer tr.CloseIdleConnections()
	if _, body, err := h1Get(t, tr, context.Background(), u.url("/a")); err != nil || body != "real 0 /a" {
		t.Fatalf("first request: %q, %v", body, err)
	}
	<-sent
	time.Sleep(20 * time.Millisecond) // the forged bytes are in the socket
	_, body, err := h1Get(t, tr, context.Background(), u.url("/b"))
	if err != nil || body != "real 1 /b" {
		t.Fatalf("second request: got %q, %v; want the answer of a new connection, \"real 1 /b\"", body, err)
	}
}

func TestH1RetriesAConnectionClosedWhileIdleOnce(t *testing.T) {
	// Connection 0 answers one request and closes as the next arrives; connection 1
	// answers.
	u := newRawUpstream(t, func(i int, c net.Conn, br *bufio.Reader) {
		for n := 0; ; n++ {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			if i == 0 && n == 1 {
				return // closed without an answer
			}
			body := fmt.Sprintf("conn %d %s", i, req.URL.Path)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	})
	tr := newH1(time.Second)
	defer tr.CloseIdleConnections()
	for i, want := range []string{"conn 0 /a", "conn 1 /b"} {
		_, body, err := h1Get(t, tr, context.Background(), u.url("/"+string(rune('a'+i))))
		if err != nil || body != want {
			t.Fatalf("request %d: %q, %v; want %q", i, body, err, want)
		}
	}

	// A new connection closed without an answer is the answer: an error, and no retry.
	v := newRawUpstream(t, func(i int, c net.Conn, br *bufio.Reader) { _, _ = readRequest(br) })
	if _, _, err := h1Get(t, tr, context.Background(), v.url("/")); err == nil {
		t.Fatal("an upstream that closed without answering gave no error")
	}
	if n := v.conns.Load(); n != 1 {
		t.Fatalf("a request on a new connection was sent %d times, want once", n)
	}
}

func TestH1DoesNotReuseWhatMustNotBeReused(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer string
		read   bool // the client reads the body to its end
	}{
		{"Connection: close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", true},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", true},
		{"body to the close", "HTTP/1.1 200 OK\r\n\r\nok", true},
		{"body left unread", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newRawUpstream(t, func(i int, conn net.Conn, br *bufio.Reader) {
				for {
					if _, err := readRequest(br); err != nil {
						return
					}
					io.WriteString(conn, c.answer)
					if !strings.Contains(c.answer, "Length") {
						return // a body that ends with the connection
					}
				}
			})
			tr := newH1(time.Second)
			defer tr.CloseIdleConnections()
			for range 3 {
				req, _ := http.NewRequest(http.MethodGet, u.url("/"), nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				if c.read {
					if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "ok" {
						t.Fatalf("body %q, %v", b, err)
					}
				}
				resp.Body.Close()
			}
			if n := u.conns.Load(); n != 3 {
				t.Fatalf("3 requests took %d connections, want 3 (none reused)", n)
			}
		})
	}
}

func TestH1BoundsAndTimesTheResponseHead(t *testing.T) {
	huge := newRawUpstream(t, func(i int, c net.Conn, br *bufio.Reader) {
		if _, err := readRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Filler: " + strings.Repeat("a", 1<<16) + "\r\n"
		for range (h1MaxHeaderBytes / len(line)) + 2 {
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
	})
	tr := newH1(10 * time.Second)
	if _, _, err := h1Get(t, tr, context.Background(), huge.url("/")); !errors.Is(err, errH1HeadersTooLarge) {
		t.Fatalf("headers over 10 MiB: err = %v, want %v", err, errH1HeadersTooLarge)
	}

	silent := newRawUpstream(t, func(i int, c net.Conn, br *bufio.Reader) {
		_, _ = readRequest(br)
		_, _ = br.ReadByte() // until the client gives up
	})
	tr = newH1(100 * time.Millisecond)
	_, _, err := h1Get(t, tr, context.Background(), silent.url("/"))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("an upstream that never answers: err = %v, want a timeout", err)
	}
	if f := upstreamError(err); f.class != "upstream_timeout" {
		t.Fatalf("the timeout is told as %q, want upstream_timeout", f.class)
	}
}

func TestH1CancelEndsTheExchange(t *testing.T) {
	u := newRawUpstream(t, func(i int, c net.Conn, br *bufio.Reader) {
		if _, err := readRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nfirst")
		_, _ = br.ReadByte() // the rest never comes
	})
	tr := newH1(time.Second)
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.url("/"), nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = resp.Body.Read(buf)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a read cancelled mid-body: err = %v, want context.Canceled", err)
	}
	resp.Body.Close()
	tr.mu.Lock()
	n := tr.n
	tr.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d connections idle after a cancelled exchange, want 0", n)
	}

	// Cancelled before the head: the context's error.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, _, err := h1Get(t, tr, ctx, u.url("/")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while waiting for the head: err = %v, want context.Canceled", err)
	}
}

func TestH1SkipsInformationalAnswers(t *testing.T) {
	u := newRawUpstream(t, func(i int, c net.Conn, br *bufio.Reader) {
		req, err := readRequest(br)
		if err != nil {
			return
		}
		switch req.URL.Path {
		case "/hints":
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody")
		case "/switch":
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\nraw bytes")
		case "/many":
			for range 10 {
				io.WriteString(c, "HTTP/1.1 103 Early Hints\r\n\r\n")
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody")
		}
	})
	tr := newH1(time.Second)
	defer tr.CloseIdleConnections()
	resp, body, err := h1Get(t, tr, context.Background(), u.url("/hints"))
	if err != nil || resp.StatusCode != 200 || body != "body" || resp.Header.Get("Link") != "" {
		t.Fatalf("after 103 and 100: %v %q %v (Link %q)", resp, body, err, resp.Header.Get("Link"))
	}
	// A 101 is handed up as the Transport does (the proxy refuses it), without the bytes
	// after it and without keeping its connection.
	resp, body, err = h1Get(t, tr, context.Background(), u.url("/switch"))
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || body != "" {
		t.Fatalf("a 101: %v %q %v, want the 101 with no body", resp, body, err)
	}
	tr.mu.Lock()
	idle := tr.n
	tr.mu.Unlock()
	if idle != 0 { // the /hints one was closed by its upstream, the switched one by us
		t.Fatalf("%d connections idle after a 101, want 0", idle)
	}
	if _, _, err := h1Get(t, tr, context.Background(), u.url("/many")); err == nil {
		t.Fatal("ten informational answers in a row were taken")
	}
}

// Accept-Encoding is offered and undone as net/http's Transport does, and the request's
// own headers are left as they were.
func TestH1OffersAndUndoesGzipAsTheTransport(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		if r.Header.Get("Accept-Encoding") == "" || r.Method == http.MethodHead {
			io.WriteString(w, "plain")
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, "unzipped")
		zw.Close()
	}))
	defer srv.Close()
	tr := newH1(time.Second)
	defer tr.CloseIdleConnections()

	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "unzipped" || resp.Header.Get("Content-Encoding") != "" || !resp.Uncompressed || resp.ContentLength != -1 {
		t.Fatalf("gzip offered by the transport: body %q, Content-Encoding %q, Uncompressed %v, length %d",
			b, resp.Header.Get("Content-Encoding"), resp.Uncompressed, resp.ContentLength)
	}
	if _, ok := req.Header["Accept-Encoding"]; ok {
		t.Fatal("the request's headers keep the Accept-Encoding the transport added")
	}

	// The client's own Accept-Encoding: its bytes, untouched.
	_, body, err := h1Get(t, tr, context.Background(), srv.URL, "Accept-Encoding", "gzip")
	if err != nil || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Fatalf("the client's own gzip was undone: %q, %v", body, err)
	}
	// Range and HEAD: nothing offered.
	h1Get(t, tr, context.Background(), srv.URL, "Range", "bytes=0-1")
	hreq, _ := http.NewRequest(http.MethodHead, srv.URL, nil)
	if resp, err := tr.RoundTrip(hreq); err == nil {
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"gzip", "gzip", "", ""}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("Accept-Encoding seen upstream %q, want %q", seen, want)
	}
}

func TestH1ChecksHeadersAsTheTransport(t *testing.T) {
	u := newRawUpstream(t, func(i int, c net.Conn, br *bufio.Reader) {})
	tr := newH1(time.Second)
	for _, h := range []http.Header{
		{"X-Split": {"a\r\nX-Injected: 1"}},
		{"X-Nul": {"a\x00b"}},
		{"Bad Name": {"v"}},
	} {
		req, _ := http.NewRequest(http.MethodGet, u.url("/"), nil)
		req.Header = h
		if _, err := tr.RoundTrip(req); err == nil {
			t.Errorf("header %q was sent", h)
		}
	}
	if n := u.conns.Load(); n != 0 {
		t.Fatalf("invalid headers opened %d connections, want none", n)
	}
}

func TestH1ClosesIdleConnections(t *testing.T) {
	closed := make(chan struct{}, 1)
	u := newRawUpstream(t, func(i int, c net.Conn, br *bufio.Reader) {
		for {
			if _, err := readRequest(br); err != nil {
				closed <- struct{}{}
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := newH1(time.Second)
	if _, _, err := h1Get(t, tr, context.Background(), u.url("/")); err != nil {
		t.Fatal(err)
	}
	tr.CloseIdleConnections()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the idle connection stayed open after CloseIdleConnections")
	}
}

// Through the proxy: plain-HTTP reads of two sandboxes share upstream connections, and an
// upstream's unasked bytes after one sandbox's answer never reach the other.
func TestSandboxesNeverGetAnUpstreamsUnaskedBytes(t *testing.T) {
	sent := make(chan struct{})
	u := newRawUpstream(t, func(i int, c net.Conn, br *bufio.Reader) {
		for n := 0; ; n++ {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			body := fmt.Sprintf("conn %d answer %d to %s", i, n, req.URL.Path)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			if i == 0 && n == 0 {
				time.Sleep(20 * time.Millisecond)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged")
				close(sent)
			}
		}
	})
	e := newEnv(t)
	var buf bytes.Buffer
	for i, id := range []string{"sbx-a", "sbx-b"} {
		c := e.client(url.UserPassword(id, mustIssue(t, e.proxy, identity.Identity{ID: id})))
		resp, body := get(t, c, http.MethodGet, u.url(fmt.Sprintf("/allowed/%d", i)), "")
		fmt.Fprintf(&buf, "%d %s\n", resp.StatusCode, body)
		if i == 0 {
			<-sent
			time.Sleep(20 * time.Millisecond)
		}
	}
	if strings.Contains(buf.String(), "forged") || !strings.Contains(buf.String(), "200 conn 1 answer 0 to /allowed/1") {
		t.Fatalf("answers:\n%s\nwant the second from a new connection, never the unasked bytes", buf.String())
	}
}

// newTLSRawUpstream is newRawUpstream over TLS, with a certificate for 127.0.0.1 from a
// new CA, and the transport's TLS configuration trusting it as airlock's does.
func newTLSRawUpstream(t *testing.T, serve func(i int, c net.Conn, br *bufio.Reader)) (*rawUpstream, *upstreamTLS) {
	t.Helper()
	c, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := c.Leaf("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	u := newRawUpstream(t, func(i int, raw net.Conn, _ *bufio.Reader) {
		tc := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}})
		if tc.Handshake() != nil {
			return
		}
		serve(i, tc, bufio.NewReader(tc))
	})
	pool := x509.NewCertPool()
	pool.AddCert(c.Certificate())
	return u, &upstreamTLS{extra: pool}
}

func TestH1OverTLSVerifiesReusesAndDropsUnaskedBytes(t *testing.T) {
	sent := make(chan struct{})
	u, cfg := newTLSRawUpstream(t, func(i int, c net.Conn, br *bufio.Reader) {
		for n := 0; ; n++ {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			body := fmt.Sprintf("conn %d answer %d to %s", i, n, req.URL.Path)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			if i == 0 && n == 1 {
				// With the answer, in the same write: a forged second one.
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged")
				close(sent)
			}
		}
	})
	tr := &h1Transport{dial: (&net.Dialer{}).DialContext, tls: cfg, headerTimeout: time.Second}
	defer tr.CloseIdleConnections()
	base := "https://" + u.ln.Addr().String()
	for i, want := range []string{"conn 0 answer 0 to /a", "conn 0 answer 1 to /b", "conn 1 answer 0 to /c"} {
		if i == 2 {
			<-sent
			time.Sleep(20 * time.Millisecond)
		}
		_, body, err := h1Get(t, tr, context.Background(), base+"/"+string(rune('a'+i)))
		if err != nil || body != want {
			t.Fatalf("request %d: %q, %v; want %q", i, body, err, want)
		}
	}

	// The name is verified: the certificate is for 127.0.0.1, not localhost.
	_, port, _ := net.SplitHostPort(u.ln.Addr().String())
	if _, _, err := h1Get(t, tr, context.Background(), "https://localhost:"+port+"/"); err == nil {
		t.Fatal("a certificate for 127.0.0.1 was taken for localhost")
	}
	// And the chain: a transport that does not trust the CA refuses the upstream.
	other, _ := newTLSRawUpstream(t, func(int, net.Conn, *bufio.Reader) {})
	if _, _, err := h1Get(t, tr, context.Background(), "https://"+other.ln.Addr().String()+"/"); err == nil {
		t.Fatal("an upstream whose certificate comes from an untrusted CA was taken")
	}
}

// Through the proxy: an HTTPS upstream that offers h2 keeps being spoken to in h2; one
// that answers in HTTP/1.1 is reached over reused HTTP/1.1 connections after its first
// answer.
func TestInterceptedReadsKeepTheUpstreamsProtocol(t *testing.T) {
	e := newEnv(t)
	h2 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "proto=%s", r.Proto)
	}))
	h2.EnableHTTP2 = true
	h2.StartTLS()
	defer h2.Close()
	var conns atomic.Int32
	h1 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "proto=%s", r.Proto)
	}))
	h1.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	h1.StartTLS()
	defer h1.Close()
	pool := x509.NewCertPool()
	pool.AddCert(h2.Certificate())
	pool.AddCert(h1.Certificate())
	e.proxy.opts.UpstreamCAs = pool
	ut := &upstreamTLS{extra: pool}
	tr := newTransport(e.proxy.guard, ut, e.proxy.opts)
	e.proxy.tr, e.proxy.gp.Tr, e.proxy.h1.tls = tr, tr, ut
	c := e.client(nil)
	for i := range 5 {
		if resp, body := get(t, c, "GET", h2.URL+"/allowed", ""); resp.StatusCode != 200 || body != "proto=HTTP/2.0" {
			t.Fatalf("h2 upstream, request %d: %d %q, want proto=HTTP/2.0", i, resp.StatusCode, body)
		}
		if resp, body := get(t, c, "GET", h1.URL+"/allowed", ""); resp.StatusCode != 200 || body != "proto=HTTP/1.1" {
			t.Fatalf("HTTP/1.1 upstream, request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if !e.proxy.h1.speaksH1(httptest.NewRequest("GET", h1.URL+"/", nil)) || e.proxy.h1.speaksH1(httptest.NewRequest("GET", h2.URL+"/", nil)) {
		t.Fatal("the HTTP/1.1 upstream is not remembered as such, or the h2 one is")
	}
	// The Transport's connection for the first answer, then one of h1Transport's for the
	// other four.
	if n := conns.Load(); n != 2 {
		t.Fatalf("5 reads of the HTTP/1.1 upstream took %d connections, want 2", n)
	}
}

// Red team (h1 path, 2026-12-07): the retry took the next pooled connection, and the next:
// an upstream that closed each idle connection as a request arrived on it got one GET once
// per pooled connection plus one (9 times with 8 pooled). It is retried once, on a new
// connection.
func TestH1SendsARequestTwiceAtMost(t *testing.T) {
	const pooled = 8
	var victim atomic.Int32
	var closing atomic.Bool
	release := make(chan struct{})
	u := newRawUpstream(t, func(i int, c net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/victim" {
				victim.Add(1)
			}
			if closing.Load() {
				return // read it, answer nothing, close
			}
			<-release // the warm-up requests are in flight together: one connection each
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := newH1(2 * time.Second)
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	for range pooled {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h1Get(t, tr, context.Background(), u.url("/warm"))
		}()
	}
	for u.conns.Load() < pooled {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	tr.mu.Lock()
	n := tr.n
	tr.mu.Unlock()
	if n != pooled {
		t.Fatalf("%d connections pooled, want %d", n, pooled)
	}
	closing.Store(true)
	if _, _, err := h1Get(t, tr, context.Background(), u.url("/victim")); err == nil {
		t.Fatal("an upstream that answers nothing gave an answer")
	}
	if v := victim.Load(); v != 2 {
		t.Fatalf("one GET reached the upstream %d times, want 2 (the request and one retry)", v)
	}
}

// Red team (h1 path, 2026-12-07): the memory of HTTP/1.1-only upstreams checked its cap
// before storing, so hosts learnt at once went past it.
func TestH1RemembersNoMoreUpstreamsThanItsCapUnderRaces(t *testing.T) {
	for range 300 { // the race is narrow: many rounds
		tr := &h1Transport{}
		tr.nh1Only.Store(h1MaxH1Only - 1)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tr.learnH1(httptest.NewRequest("GET", fmt.Sprintf("https://h%d.example/", i), nil))
				tr.learnH1(httptest.NewRequest("GET", fmt.Sprintf("https://h%d.example/", i), nil))
			}()
		}
		close(start)
		wg.Wait()
		n := 0
		tr.h1Only.Range(func(any, any) bool { n++; return true })
		if n != 1 || tr.nh1Only.Load() != h1MaxH1Only {
			t.Fatalf("%d upstreams learnt past %d (counter %d), want 1 and the counter at the cap %d", n, h1MaxH1Only-1, tr.nh1Only.Load(), h1MaxH1Only)
		}
	}
}
