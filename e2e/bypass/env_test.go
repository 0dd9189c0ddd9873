//go:build e2e

package bypass_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// policy is what the attacks run against. Endpoints: any host on an allowed port
// (data.bypass.ports), except the blocked hosts; "pinned.test" is tunnelled. Requests: GET or
// HEAD of /public/... and /ws/allowed on any host, POST /write held for approval. The dial
// guard, not the policy, keeps loopback and metadata addresses out: the policy is
// deliberately permissive about hosts, as a real one may be by mistake.
const policy = `package airlock

default decision := {"action": "deny", "rule": "bypass.default", "reason": "not on the bypass allowlist"}

blocked if input.request.host in data.bypass.blocked_hosts

port_ok if input.request.port in data.bypass.ports

decision := {"action": "deny", "rule": "bypass.blocked", "reason": "this host is blocked"} if blocked

decision := {"action": "allow", "rule": "bypass.tunnel", "tunnel": true} if {
	input.phase == "connect"
	input.request.host == "pinned.test"
	port_ok
}

decision := {"action": "allow", "rule": "bypass.connect"} if {
	input.phase == "connect"
	not blocked
	input.request.host != "pinned.test"
	port_ok
}

decision := {"action": "allow", "rule": "bypass.read"} if {
	input.phase == "request"
	not blocked
	port_ok
	input.request.method in {"GET", "HEAD"}
	startswith(input.request.path, "/public/")
}

decision := {"action": "allow", "rule": "bypass.ws"} if {
	input.phase == "request"
	not blocked
	port_ok
	input.request.method == "GET"
	input.request.path == "/ws/allowed"
}

decision := {"action": "approve", "rule": "bypass.write", "reason": "writes need a human"} if {
	input.phase == "request"
	not blocked
	port_ok
	input.request.method == "POST"
	input.request.path == "/write"
}
`

// seen is one request as an upstream received it.
type seen struct {
	Server  string // "upstream" (127.0.0.2) or "internal" (127.0.0.1, must never be reached)
	Method  string
	URI     string // RequestURI as received
	Host    string
	SNI     string
	Header  http.Header
	Body    []byte
	Trailer http.Header
}

// resolver answers the test names; "rebind.test" alternates between the allowed upstream
// and loopback on every lookup, "multi.test" answers both at once.
type resolver struct {
	calls atomic.Int64
	names map[string][]netip.Addr
}

func (r *resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "rebind.test" {
		if r.calls.Add(1)%2 == 1 {
			return []netip.Addr{upstreamIP}, nil
		}
		return []netip.Addr{internalIP}, nil
	}
	if a, ok := r.names[host]; ok {
		return append([]netip.Addr(nil), a...), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

var (
	upstreamIP = netip.MustParseAddr("127.0.0.2") // allowed with AllowPrivate
	internalIP = netip.MustParseAddr("127.0.0.1") // a loopback service the sandbox must not reach
)

type env struct {
	proxy     *proxy.Proxy
	addr      string // shared listener
	ca        *ca.CA
	audit     *e2etest.Recorder
	approval  *approval.Service
	port      int    // plain HTTP port: upstream on 127.0.0.2 and internal on 127.0.0.1
	tlsPort   int    // HTTPS upstream on 127.0.0.2
	homograph string // punycode of the homograph host

	mu   sync.Mutex
	seen []seen
}

func (e *env) record(s seen) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen = append(e.seen, s)
}

func (e *env) seenSince(n int) []seen {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]seen(nil), e.seen[n:]...)
}

func (e *env) seenLen() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.seen)
}

func (e *env) handler(server string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/ws/", websocket.Handler(func(c *websocket.Conn) {
		e.record(seen{Server: server, Method: "WS", URI: c.Request().RequestURI, Host: c.Request().Host})
		_, _ = io.Copy(c, c)
	}))
	mux.Handle("/mcp", e.mcpUpstream(server))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s := seen{Server: server, Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: r.Header.Clone(), Body: body, Trailer: r.Trailer}
		if r.TLS != nil {
			s.SNI = r.TLS.ServerName
		}
		e.record(s)
		if strings.HasPrefix(r.URL.Path, "/public/rebind/") {
			time.Sleep(300 * time.Millisecond)
		}
		if r.URL.Path == "/public/big" {
			w.Header().Set("Content-Length", strconv.Itoa(bigSize))
			chunk := make([]byte, 64<<10)
			for n := 0; n < bigSize; n += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		fmt.Fprintf(w, "%s %s %s", server, r.Method, r.RequestURI)
	})
	return mux
}

const bigSize = 32 << 20

// listenPair opens the same port on 127.0.0.2 and 127.0.0.1, so that a destination trick
// that slipped past the dial guard would reach the internal service and show up.
func listenPair(t testing.TB) (up, internal net.Listener) {
	t.Helper()
	for i := 0; i < 50; i++ {
		a, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(a.Addr().String())
		b, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err == nil {
			return a, b
		}
		a.Close()
	}
	t.Fatal("no port free on both 127.0.0.1 and 127.0.0.2")
	return nil, nil
}

type envOpt func(*proxy.Options)

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	e := &env{audit: &e2etest.Recorder{}}

	upLn, inLn := listenPair(t)
	up := &httptest.Server{Listener: upLn, Config: &http.Server{Handler: e.handler("upstream")}}
	up.Start()
	t.Cleanup(up.Close)
	in := &httptest.Server{Listener: inLn, Config: &http.Server{Handler: e.handler("internal")}}
	in.Start()
	t.Cleanup(in.Close)
	e.port = upLn.Addr().(*net.TCPAddr).Port

	upCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	tlsLn, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsUp := &httptest.Server{Listener: tlsLn, Config: &http.Server{Handler: e.handler("upstream")}}
	tlsUp.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		name := h.ServerName
		if name == "" {
			name = "upstream.test"
		}
		return upCA.Leaf(name)
	}}
	tlsUp.StartTLS()
	t.Cleanup(tlsUp.Close)
	e.tlsPort = tlsLn.Addr().(*net.TCPAddr).Port

	e.homograph = "xn--pple-43d.test" // "аpple.test" with a Cyrillic а
	data := map[string]any{"bypass": map[string]any{
		"ports":         []int{e.port, e.tlsPort},
		"blocked_hosts": []string{"forbidden.test", e.homograph},
	}, "body_aware": bodyAware}
	pdir := filepath.Join(dir, "policy")
	if err := os.MkdirAll(pdir, 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(data)
	if err := os.WriteFile(filepath.Join(pdir, "data.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "policy.rego"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "body.rego"), []byte(bodyPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	eng, err := rego.New(ctx, rego.Options{Dir: pdir})
	if err != nil {
		t.Fatal(err)
	}

	e.approval = e2etest.Approvals(t, dir)

	e.ca, err = ca.New()
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Certificate())
	res := &resolver{names: map[string][]netip.Addr{
		"upstream.test":  {upstreamIP},
		"forbidden.test": {upstreamIP},
		"pinned.test":    {upstreamIP},
		"multi.test":     {upstreamIP, internalIP},
		e.homograph:      {upstreamIP},
	}}
	o := proxy.Options{
		Decider:      eng,
		CA:           e.ca,
		Auditor:      e.audit,
		Approver:     e.approval,
		AllowPrivate: []netip.Prefix{netip.PrefixFrom(upstreamIP, 32)},
		UpstreamCAs:  roots,
		Resolver:     res,
		Limits: proxy.Limits{
			MaxHeaderBytes:     16 << 10,
			MaxPolicyBodyBytes: maxPolicyBody,
			ReadHeaderTimeout:  time.Second,
			IdleTimeout:        2 * time.Second,
		},
	}
	for _, f := range opts {
		f(&o)
	}
	e.proxy, err = proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go e.proxy.Serve(ln)
	t.Cleanup(func() { e.proxy.Shutdown(context.Background()) })
	e.addr = ln.Addr().String()
	return e
}

// dial opens a raw connection to addr with a deadline that ends a stuck case.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// result is what a client got back.
type result struct {
	status int
	header http.Header
	body   string
}

func (r result) String() string {
	return fmt.Sprintf("%d %q", r.status, r.body)
}

// readResp reads one response from br (status 0 when the connection ended first).
func readResp(br *bufio.Reader, method string) result {
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return result{body: "no response: " + err.Error()}
	}
	if method == http.MethodConnect && resp.StatusCode/100 == 2 {
		// The tunnel follows; the response has no body to read.
		return result{status: resp.StatusCode, header: resp.Header}
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return result{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// raw sends bytes to the proxy and reads one response.
func (e *env) raw(t *testing.T, req string) result {
	t.Helper()
	c := dial(t, e.addr)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return readResp(newReader(c), methodOf(req))
}

func methodOf(req string) string {
	m, _, _ := strings.Cut(req, " ")
	return m
}

// tunnel opens an intercepted CONNECT to target and a TLS session with the given SNI. The
// client checks airlock's certificate for verifyName ("" skips the check, as an attacker
// controlling the client would).
func (e *env) tunnel(t *testing.T, target, sni, verifyName string) (*tls.Conn, result) {
	t.Helper()
	c := dial(t, e.addr)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := newReader(c)
	r := readResp(br, http.MethodConnect)
	if r.status != http.StatusOK {
		return nil, r
	}
	roots := x509.NewCertPool()
	roots.AddCert(e.ca.Certificate())
	cfg := &tls.Config{ServerName: sni, RootCAs: roots, NextProtos: []string{"http/1.1"}}
	if verifyName == "" {
		cfg.InsecureSkipVerify = true
	} else if verifyName != sni {
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: verifyName, Roots: roots})
			return err
		}
	}
	tc := tls.Client(bufConn{Conn: c, r: br}, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS in tunnel to %s (SNI %s): %v", target, sni, err)
	}
	return tc, r
}

// inTunnel sends req inside an intercepted tunnel and reads one response.
func (e *env) inTunnel(t *testing.T, target, sni, req string) result {
	t.Helper()
	tc, r := e.tunnel(t, target, sni, "")
	if tc == nil {
		return r
	}
	if _, err := io.WriteString(tc, req); err != nil {
		t.Fatal(err)
	}
	return readResp(newReader(tc), methodOf(req))
}

func (e *env) upstreamURL() string { return fmt.Sprintf("http://upstream.test:%d", e.port) }

func (e *env) tlsTarget(host string) string { return fmt.Sprintf("%s:%d", host, e.tlsPort) }

// pending waits for the one pending approval.
func (e *env) pending(t *testing.T) approval.Record { return e2etest.Pending(t, e.approval) }

func (e *env) approve(t *testing.T, id string) {
	t.Helper()
	if _, err := e.approval.Decide(context.Background(), id, approval.StateApproved, "tester", "ok"); err != nil {
		t.Fatal(err)
	}
}

func newReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }

// bufConn is a connection whose first bytes were already buffered by a reader.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }
