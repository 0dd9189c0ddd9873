//go:build e2e

package bypass_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// scrubAttackEnv: airlock with a credential ("canary") that e2etest.ReflectPolicy attaches,
// in front of upstreams that try to hand it back: a Reflector over HTTPS (HTTP/2 offered)
// and plain HTTP, an HTTP/2 server that sends it as GOAWAY debug data, and an HTTP/1 server
// that sends it in 1xx responses and trailers it never declared.
type scrubAttackEnv struct {
	addr   string
	ca     *ca.CA
	rf     *e2etest.Reflector
	audit  *e2etest.Recorder
	canary string
	logs   *syncBuffer
	https  string // host:port of the Reflector over TLS
	plain  string // host:port of the Reflector over plain HTTP
	goaway string // host:port of the GOAWAY server (TLS, h2 only)
	info   string // host:port of the 1xx server (plain HTTP/1.1)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

func newScrubAttackEnv(t *testing.T) *scrubAttackEnv {
	t.Helper()
	se := &scrubAttackEnv{rf: &e2etest.Reflector{}, audit: &e2etest.Recorder{}, logs: &syncBuffer{}}
	upCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.Leaf(h.ServerName) }
	up := httptest.NewUnstartedServer(se.rf)
	up.EnableHTTP2 = true
	up.TLS = &tls.Config{GetCertificate: leaf}
	up.StartTLS()
	t.Cleanup(up.Close)
	plain := httptest.NewServer(se.rf)
	t.Cleanup(plain.Close)
	hostport := func(s string) string { u, _ := url.Parse(s); return "echo.test:" + u.Port() }
	se.https, se.plain = hostport(up.URL), hostport(plain.URL)
	se.goaway = "echo.test:" + serveRaw(t, &tls.Config{GetCertificate: leaf, NextProtos: []string{"h2"}}, goawayWithToken)
	se.info = "echo.test:" + serveRaw(t, nil, informationalWithToken)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(e2etest.ReflectPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(se.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	eng, err := rego.New(context.Background(), rego.Options{Dir: dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	broker, canary := e2etest.CanaryBroker(t, log)
	se.canary = canary
	se.ca, _ = ca.New()
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Certificate())
	p, err := proxy.New(proxy.Options{Decider: eng, CA: se.ca, Credentials: broker, Auditor: se.audit, Logger: log,
		UpstreamCAs: roots, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver: e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")},
		Limits:   proxy.Limits{MaxRedactionsPerCredential: 1 << 30}}) // the upstream echoes on purpose
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	se.addr = ln.Addr().String()
	return se
}

// serveRaw serves each connection with h (over TLS when cfg is set) and returns the port.
func serveRaw(t *testing.T, cfg *tls.Config, h func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if cfg != nil {
				c = tls.Server(c, cfg)
			}
			go func() { defer c.Close(); _ = c.SetDeadline(time.Now().Add(10 * time.Second)); h(c) }()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// goawayWithToken speaks HTTP/2 until the request's headers arrive, then ends the
// connection with a GOAWAY whose debug data is the credential (which Go's transport quotes
// in its error).
func goawayWithToken(c net.Conn) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	_ = fr.WriteSettings()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		if mh, ok := f.(*http2.MetaHeadersFrame); ok {
			tok := ""
			for _, hf := range mh.RegularFields() {
				if hf.Name == "authorization" {
					tok = strings.TrimPrefix(hf.Value, "Bearer ")
				}
			}
			_ = fr.WriteGoAway(0, http2.ErrCodeProtocol, []byte("bye "+tok))
			return
		}
	}
}

// informationalWithToken answers one HTTP/1.1 request with 1xx responses carrying the
// credential, then a 200 whose chunked body ends with trailers it never declared.
func informationalWithToken(c net.Conn) {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	tok := strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
	fmt.Fprintf(c, "HTTP/1.1 100 Continue\r\nX-Echo: %s\r\n\r\n", tok)
	fmt.Fprintf(c, "HTTP/1.1 103 Early Hints\r\nLink: </%s>; rel=preload\r\n\r\n", tok)
	fmt.Fprintf(c, "HTTP/1.1 102 %s\r\n\r\n", tok)
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nok\n\r\n0\r\nX-Sneaky: %s\r\n\r\n", tok)
}

// do sends req through airlock as a sandbox would (absolute form, or origin form inside an
// intercepted CONNECT to target when tunnel is set) and returns every byte received.
func (se *scrubAttackEnv) do(t *testing.T, target string, tunnel bool, req string) []byte {
	t.Helper()
	c := dial(t, se.addr)
	var conn net.Conn = c
	if tunnel {
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := newReader(c)
		if r := readResp(br, "CONNECT"); r.status != 200 {
			t.Fatalf("CONNECT %s: %s", target, r)
		}
		roots := x509.NewCertPool()
		roots.AddCert(se.ca.Certificate())
		tc := tls.Client(bufConn{Conn: c, r: br}, &tls.Config{RootCAs: roots, ServerName: "echo.test"})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		conn = tc
	}
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	_, _ = io.Copy(&got, conn)
	return got.Bytes()
}

// get is a GET of path on target with extra header lines, closing the connection after.
func (se *scrubAttackEnv) get(t *testing.T, target, path string, tunnel bool, headers ...string) []byte {
	uri := "http://" + target + path
	if tunnel {
		uri = path
	}
	return se.do(t, target, tunnel, "GET "+uri+" HTTP/1.1\r\nHost: "+target+"\r\n"+strings.Join(headers, "")+"Connection: close\r\n\r\n")
}

// TestScrubBypass: attacks that try to have an upstream hand the injected credential back
// to the sandbox past the scrubber, each sent over raw TCP or TLS: reassembly from ranges,
// encodings stacked or unknown, compressed payloads, 1xx responses, undeclared trailers,
// HTTP/2 GOAWAY debug data, a status line the transport quotes, protocol upgrades. Every
// byte received is checked for every form of the credential, and so are the audit events
// and the debug log.
func TestScrubBypass(t *testing.T) {
	se := newScrubAttackEnv(t)
	type attack struct {
		name   string
		send   func(t *testing.T) []byte
		status int
		rule   string
		want   string // in what was received
	}
	// ranged asks for the pieces one by one, as an agent reassembling the value would, and
	// checks the reassembly; it returns the last answer.
	ranged := func(target string, tunnel bool, header string, ranges []string) func(t *testing.T) []byte {
		return func(t *testing.T) []byte {
			var whole, last []byte
			for _, r := range ranges {
				last = se.get(t, target, "/echo/range", tunnel, header+": "+r+"\r\n", "If-Range: Tue, 14 Nov 2023 22:13:20 GMT\r\n")
				resps, bodies := e2etest.ReadResponses(last, "GET")
				if len(resps) == 0 || resps[0].StatusCode != 200 {
					t.Errorf("Range %s: got %q, want a 200 with the whole scrubbed body", r, last)
					continue
				}
				whole = append(whole, bodies[0]...)
			}
			if l := e2etest.Leak(whole, se.canary); l != "" {
				t.Errorf("the pieces reassemble to the credential (%s): %q", l, whole)
			}
			return last
		}
	}
	pieces := []string{"bytes=9-16", "bytes=17-24", "bytes=25-32", "bytes=33-40", "bytes=41-48", "bytes=49-56"}
	stacked := func(enc string) func(t *testing.T) []byte {
		return func(t *testing.T) []byte { return se.get(t, se.https, "/echo/"+enc, true) }
	}
	attacks := []attack{
		{"reassemble the value from Range pieces", ranged(se.https, true, "Range", pieces), 200, "scrub.echo", "[airlock:redacted]"},
		{"Range pieces over plain HTTP", ranged(se.plain, false, "Range", pieces), 200, "scrub.echo", "[airlock:redacted]"},
		{"suffix and open ranges", ranged(se.https, true, "Range", []string{"bytes=-30", "bytes=20-", "bytes=0-0,-1"}), 200, "scrub.echo", "[airlock:redacted]"},
		{"Request-Range (legacy)", ranged(se.https, true, "Request-Range", pieces[:2]), 200, "scrub.echo", "[airlock:redacted]"},
		{"multipart byteranges sent unasked", func(t *testing.T) []byte { return se.get(t, se.https, "/echo/multirange", true) }, 502, "scrub.echo", "partial response"},
		{"206 sent unasked", func(t *testing.T) []byte { return se.get(t, se.plain, "/echo/partial", false) }, 502, "scrub.echo", "partial response"},
		{"gzip, gzip in one field", stacked("gzip-gzip"), 502, "scrub.echo", "stacked content codings"},
		{"gzip in two fields", stacked("gzip-two-headers"), 502, "scrub.echo", "stacked content codings"},
		{"brotli", stacked("br"), 502, "scrub.echo", `content-encoding "br"`},
		{"gzip file as application/gzip", stacked("gzip-file"), 502, "scrub.echo", "application/gzip"},
		{"gzip file as octet-stream", stacked("gzip-octet"), 502, "scrub.echo", "gzip data"},
		{"zip archive", stacked("zip"), 502, "scrub.echo", "zip data"},
		{"Accept-Encoding asked by the sandbox", func(t *testing.T) []byte {
			return se.get(t, se.https, "/echo/gzip", true, "Accept-Encoding: gzip, br, zstd\r\n")
		}, 200, "scrub.echo", "you sent [airlock:redacted]"},
		{"1xx responses and undeclared trailers", func(t *testing.T) []byte { return se.get(t, se.info, "/echo/x", false) }, 200, "scrub.echo", "ok"},
		{"HTTP/2 GOAWAY debug data", func(t *testing.T) []byte { return se.get(t, se.goaway, "/echo/x", true) }, 502, "upstream", "GOAWAY"},
		{"status line quoted in a transport error", func(t *testing.T) []byte { return se.get(t, se.plain, "/echo/malformed-h1", false) }, 502, "upstream", "malformed"},
		{"reason phrase", func(t *testing.T) []byte {
			return se.get(t, se.plain, "/echo/status-h1", false)
		}, 200, "scrub.echo", "ok"},
		{"WebSocket upgrade the rule does not allow", func(t *testing.T) []byte {
			return se.get(t, se.plain, "/echo/upgrade-h1", false, "Upgrade: websocket\r\nConnection: Upgrade\r\n")
		}, 403, "scrub.echo", `"upgrade": true`},
		{"h2c upgrade the rule does not allow", func(t *testing.T) []byte {
			return se.get(t, se.plain, "/echo/upgrade-h1", false, "Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n")
		}, 403, "scrub.echo", `"upgrade": true`},
		{"101 sent unasked", func(t *testing.T) []byte { return se.get(t, se.plain, "/wsquiet/upgrade-h1", false) }, 502, "scrub.wsquiet", "switched protocols"},
		{"upgrade on a rule that may reflect (malformed decision)", func(t *testing.T) []byte {
			return se.get(t, se.plain, "/ws/upgrade-h1", false, "Upgrade: websocket\r\nConnection: Upgrade\r\n")
		}, 403, "scrub.ws", `"reflects": false`},
		{"a trailing prefix of the value is not redacted (no oracle)", func(t *testing.T) []byte {
			return se.get(t, se.https, "/echo/prefix-at-end", true)
		}, 200, "scrub.echo", "ends with sk-canary-"},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			from := se.audit.Len()
			got := a.send(t)
			if l := e2etest.Leak(got, se.canary); l != "" {
				t.Fatalf("the sandbox received the credential (%s):\n%s", l, got)
			}
			resps, bodies := e2etest.ReadResponses(got, "GET")
			if len(resps) == 0 || resps[len(resps)-1].StatusCode != a.status {
				t.Errorf("got %q, want status %d", got, a.status)
			}
			if len(bodies) > 0 && !strings.Contains(string(got)+string(bodies[len(bodies)-1]), a.want) {
				t.Errorf("got %q, want %q in it", got, a.want)
			}
			if a.status >= 400 && len(resps) > 0 && resps[len(resps)-1].Header.Get("X-Airlock-Rule") != a.rule {
				t.Errorf("X-Airlock-Rule %q, want %q", resps[len(resps)-1].Header.Get("X-Airlock-Rule"), a.rule)
			}
			deadline := time.Now().Add(5 * time.Second)
			for !hasEvent(se.audit.Since(from), a.status, a.rule) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if !hasEvent(se.audit.Since(from), a.status, a.rule) {
				t.Errorf("no audit event with status %d rule %s", a.status, a.rule)
			}
		})
	}
	for _, r := range se.rf.Seen() {
		if r.Range != "" || r.IfRange != "" || r.Extensions != "" {
			t.Errorf("the upstream received Range %q If-Range %q extensions %q on a credentialed request", r.Range, r.IfRange, r.Extensions)
		}
	}
	if seen := se.rf.Seen(); len(seen) == 0 || seen[0].Token != se.canary {
		t.Fatal("the upstream never received the credential: the test would prove nothing")
	}
	evs, _ := json.Marshal(se.audit.Events())
	for name, b := range map[string][]byte{"audit events": evs, "debug log": se.logs.Bytes()} {
		if l := e2etest.Leak(b, se.canary); l != "" {
			t.Errorf("the %s hold the credential (%s)", name, l)
		}
	}
}

func hasEvent(evs []audit.Event, status int, rule string) bool {
	for _, ev := range evs {
		if ev.Status == status && ev.Rule == rule {
			return true
		}
	}
	return false
}
