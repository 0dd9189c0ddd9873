package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/ca"
)

// namedTLSUpstream serves HTTP/1.1 over TLS on 127.0.0.1 with a certificate for name (not
// necessarily the address it listens on) from a CA of its own, in the extra roots it
// returns; each answer says who answered and what Authorization it saw.
func namedTLSUpstream(t *testing.T, name string) (*rawUpstream, *x509.CertPool) {
	t.Helper()
	c, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := c.Leaf(name)
	if err != nil {
		t.Fatal(err)
	}
	u := newRawUpstream(t, func(_ int, raw net.Conn, _ *bufio.Reader) {
		tc := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}})
		if tc.Handshake() != nil {
			return
		}
		br := bufio.NewReader(tc)
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body := fmt.Sprintf("%s answered, auth=%q", name, r.Header.Get("Authorization"))
			fmt.Fprintf(tc, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	})
	pool := x509.NewCertPool()
	pool.AddCert(c.Certificate())
	return u, pool
}

// Red team (h1 path, 2026-12-07): with extra roots (--upstream-ca), verification read the
// name to check from the connection state, which crypto/tls leaves empty for an IP
// address (no SNI is sent for one), so no name was checked: a certificate for any name
// from a trusted CA was taken for an upstream reached by its IP, by the Transport and by
// the direct path alike.
func TestUpstreamTLSChecksTheNameOfAnIPUpstream(t *testing.T) {
	guard := &Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	for _, tc := range []struct {
		cert string
		ok   bool
	}{{"evil.example", false}, {"127.0.0.1", true}} {
		u, pool := namedTLSUpstream(t, tc.cert)
		ut := &upstreamTLS{extra: pool}
		url := "https://" + u.ln.Addr().String() + "/"

		h1 := &h1Transport{dial: guard.DialContext, tls: ut, headerTimeout: time.Second}
		_, body, err := h1Get(t, h1, context.Background(), url)
		if (err == nil) != tc.ok {
			t.Errorf("direct path, certificate for %s at %s: body %q, err %v; want accepted=%v", tc.cert, url, body, err, tc.ok)
		}
		h1.CloseIdleConnections()

		tr := newTransport(guard, ut, Options{})
		req, _ := http.NewRequest("GET", url, nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("Transport, certificate for %s at %s: err %v; want accepted=%v", tc.cert, url, err, tc.ok)
		}
		// The reason given is the name, not "unknown authority" from the system roots.
		var wrongName x509.HostnameError
		if !tc.ok && err != nil && !errors.As(err, &wrongName) {
			t.Errorf("Transport, certificate for %s: err %q, want it to say the certificate is not for 127.0.0.1", tc.cert, err)
		}
		tr.CloseIdleConnections()
	}
}

// The same through the proxy: an impostor at 127.0.0.1 with a trusted certificate for
// another name gets neither the request nor a chance to answer it, on the first read (the
// Transport) or later ones (which the direct path would take).
func TestInterceptedReadOfAnIPUpstreamRefusesAnotherNamesCertificate(t *testing.T) {
	u, pool := namedTLSUpstream(t, "evil.example")
	e := newEnv(t, func(o *Options) { o.UpstreamCAs = pool })
	c := e.client(nil)
	for i := range 3 {
		resp, body := get(t, c, "GET", "https://"+u.ln.Addr().String()+"/allowed/x", "")
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("read %d: %d %q, want 502 (the certificate is for evil.example, not 127.0.0.1)", i, resp.StatusCode, body)
		}
	}
}

// A WebSocket upgrade through intercepted HTTPS to an upstream that also speaks h2 is
// made over HTTP/1.1, as the Transport makes it with its own TLS: the upgrade exists only
// in HTTP/1.1, and a connection on which the upstream chose h2 cannot carry it.
func TestWebSocketUpgradeToAnH2UpstreamGoesOverHTTP1(t *testing.T) {
	e := newEnv(t)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			fmt.Fprintf(w, "proto=%s", r.Proto)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		line, _ := brw.ReadString('\n')
		io.WriteString(c, "echo "+line)
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	defer up.Close()
	pool := x509.NewCertPool()
	pool.AddCert(up.Certificate())
	ut := &upstreamTLS{extra: pool}
	tr := newTransport(e.proxy.guard, ut, e.proxy.opts)
	e.proxy.tr, e.proxy.gp.Tr, e.proxy.h1.tls = tr, tr, ut
	c := e.client(nil)
	// The upstream speaks h2 to a plain read, and keeps a connection for it.
	if resp, body := get(t, c, "GET", up.URL+"/allowed/x", ""); resp.StatusCode != 200 || body != "proto=HTTP/2.0" {
		t.Fatalf("a read: %d %q, want proto=HTTP/2.0", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", up.URL+"/allowed/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	req.Header.Set("Sec-WebSocket-Version", "13")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("the upgrade: %d %q, want 101", resp.StatusCode, b)
	}
	rw, ok := resp.Body.(io.ReadWriter)
	if !ok {
		t.Fatalf("the 101's body is a %T, not the upgraded stream", resp.Body)
	}
	io.WriteString(rw, "ping\n")
	line, err := bufio.NewReader(rw).ReadString('\n')
	if err != nil || line != "echo ping\n" {
		t.Fatalf("through the upgraded stream: %q, %v; want \"echo ping\\n\"", line, err)
	}
}
