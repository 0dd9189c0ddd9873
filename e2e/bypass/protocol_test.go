//go:build e2e

package bypass_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/websocket"

	"github.com/airlock-proxy/airlock/internal/identity"
)

func wsUpgrade(target, host string) string {
	return "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: http://" + host + "\r\n\r\n"
}

// normalClient checks that an ordinary request is served while an attack holds connections.
func normalClient(t *testing.T, e *env) {
	t.Helper()
	r := e.raw(t, fmt.Sprintf("GET %s/public/normal HTTP/1.1\r\nHost: upstream.test:%d\r\n\r\n", e.upstreamURL(), e.port))
	if r.status != 200 {
		t.Errorf("a normal client during the attack: got %s, want 200", r)
	}
}

func protocolCases(e *env) []attack {
	host := fmt.Sprintf("upstream.test:%d", e.port)
	return []attack{
		{
			name:   "WebSocket upgrade to a denied path",
			send:   func(t *testing.T, e *env) result { return e.raw(t, wsUpgrade(e.upstreamURL()+"/ws/denied", host)) },
			status: 403, rule: "bypass.default", path: "/ws/denied",
		},
		{
			name: "WebSocket upgrade to a denied path inside a tunnel",
			send: func(t *testing.T, e *env) result {
				return e.inTunnel(t, e.tlsTarget("upstream.test"), "upstream.test", wsUpgrade("/ws/denied", e.tlsTarget("upstream.test")))
			},
			status: 403, rule: "bypass.default", path: "/ws/denied",
		},
		{
			name: "WebSocket to an allowed path works through an intercepted tunnel",
			send: func(t *testing.T, e *env) result {
				tc, r := e.tunnel(t, e.tlsTarget("upstream.test"), "upstream.test", "upstream.test")
				if tc == nil {
					return r
				}
				cfg, err := websocket.NewConfig("wss://"+e.tlsTarget("upstream.test")+"/ws/allowed", "https://upstream.test")
				if err != nil {
					t.Fatal(err)
				}
				ws, err := websocket.NewClient(cfg, tc)
				if err != nil {
					return result{body: "websocket handshake: " + err.Error()}
				}
				defer ws.Close()
				if err := websocket.Message.Send(ws, "ping through airlock"); err != nil {
					t.Fatal(err)
				}
				var echo string
				if err := websocket.Message.Receive(ws, &echo); err != nil || echo != "ping through airlock" {
					t.Errorf("echo: got %q %v, want the message back", echo, err)
				}
				return result{status: 101}
			},
			status: 101, rule: "bypass.ws", path: "/ws/allowed",
			upstream: func(t *testing.T, e *env, got []seen) {
				if len(got) != 1 || got[0].Method != "WS" {
					t.Errorf("upstream: got %v, want one WebSocket session", uris(got))
				}
			},
		},
		{
			name: "HTTP/2 prior knowledge to the proxy",
			send: func(t *testing.T, e *env) result {
				return e.raw(t, http2.ClientPreface)
			},
			status: 400, rule: "protocol",
		},
		{
			name: "HTTP/2 by ALPN inside a tunnel falls back to HTTP/1.1",
			send: func(t *testing.T, e *env) result {
				c := dial(t, e.addr)
				target := e.tlsTarget("upstream.test")
				fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
				br := newReader(c)
				if r := readResp(br, "CONNECT"); r.status != 200 {
					return r
				}
				tc := tls.Client(bufConn{Conn: c, r: br}, &tls.Config{InsecureSkipVerify: true, ServerName: "upstream.test", NextProtos: []string{"h2", "http/1.1"}})
				if err := tc.Handshake(); err != nil {
					t.Fatal(err)
				}
				if p := tc.ConnectionState().NegotiatedProtocol; p == "h2" {
					t.Errorf("ALPN negotiated %q inside the tunnel, want http/1.1", p)
				}
				fmt.Fprintf(tc, "GET /denied-h1 HTTP/1.1\r\nHost: %s\r\n\r\n", target)
				return readResp(newReader(tc), "GET")
			},
			status: 403, rule: "bypass.default", path: "/denied-h1",
		},
		{
			name: "HTTP/2 prior knowledge inside a tunnel",
			send: func(t *testing.T, e *env) result {
				return e.inTunnel(t, e.tlsTarget("upstream.test"), "upstream.test", http2.ClientPreface)
			},
			status:  0,
			noAudit: "goproxy reads requests inside a tunnel and closes the tunnel on one it cannot turn into a URL, before any airlock handler runs; the tunnel's CONNECT event is the record",
		},
		{
			name: "Expect: 100-continue on a held write sends the approved bytes once",
			send: func(t *testing.T, e *env) result {
				body := `{"expect":"continue"}`
				c := dial(t, e.addr)
				fmt.Fprintf(c, "POST %s/write HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n",
					e.upstreamURL(), host, len(body))
				br := newReader(c)
				if r := readResp(br, "POST"); r.status != 100 {
					return r
				}
				io.WriteString(c, body)
				rec := e.pending(t)
				e.approve(t, rec.ID)
				return readResp(br, "POST")
			},
			status: 200, rule: "bypass.write", path: "/write",
			upstream: func(t *testing.T, e *env, got []seen) {
				one("/write")(t, e, got)
				if len(got) == 1 && (string(got[0].Body) != `{"expect":"continue"}` || got[0].Header.Get("Expect") != "") {
					t.Errorf("upstream got body %q Expect %q, want the exact body and no Expect", got[0].Body, got[0].Header.Get("Expect"))
				}
			},
		},
		{
			name: "chunked body on a held write: the upstream gets exactly the approved bytes",
			send: func(t *testing.T, e *env) result {
				c := dial(t, e.addr)
				fmt.Fprintf(c, "POST %s/write HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sig\r\n\r\n"+
					"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Sig: late\r\n\r\n", e.upstreamURL(), host)
				rec := e.pending(t)
				sum := sha256.Sum256([]byte("hello world"))
				if rec.BodySHA256 != hex.EncodeToString(sum[:]) {
					t.Errorf("held body sha256: got %s, want %x", rec.BodySHA256, sum)
				}
				e.approve(t, rec.ID)
				return readResp(newReader(c), "POST")
			},
			status: 200, rule: "bypass.write", path: "/write",
			upstream: func(t *testing.T, e *env, got []seen) {
				one("/write")(t, e, got)
				if len(got) == 1 && (string(got[0].Body) != "hello world" || got[0].Trailer.Get("X-Sig") != "") {
					t.Errorf("upstream got body %q trailer %v, want exactly \"hello world\" and no trailer", got[0].Body, got[0].Trailer)
				}
			},
		},
		{
			name: "slowloris: headers trickled past the read-header timeout",
			send: func(t *testing.T, e *env) result {
				c := dial(t, e.addr)
				fmt.Fprintf(c, "GET %s/public/slow HTTP/1.1\r\nHost: %s\r\n", e.upstreamURL(), host)
				closed := make(chan struct{})
				go func() {
					defer close(closed)
					for i := 0; ; i++ {
						if _, err := fmt.Fprintf(c, "X-Slow-%d: 1\r\n", i); err != nil {
							return
						}
						time.Sleep(100 * time.Millisecond)
					}
				}()
				normalClient(t, e)
				select {
				case <-closed:
				case <-time.After(20 * time.Second):
					t.Error("the slowloris connection is still open after 20s")
				}
				return readResp(newReader(c), "GET")
			},
			status: 0, rule: "limits.timeout",
			upstream: one("/public/normal"),
		},
		{
			name: "slow reader of a large response",
			send: func(t *testing.T, e *env) result {
				c := dial(t, e.addr)
				fmt.Fprintf(c, "GET %s/public/big HTTP/1.1\r\nHost: %s\r\n\r\n", e.upstreamURL(), host)
				normalClient(t, e)
				// Read nothing until the proxy's idle timeout has cut the stalled write.
				time.Sleep(4 * time.Second)
				n, _ := io.Copy(io.Discard, c)
				if n >= bigSize {
					t.Errorf("the slow reader got all %d bytes, want the connection cut", n)
				}
				return result{status: 200}
			},
			status: 200, rule: "bypass.read", path: "/public/big",
			upstream: func(t *testing.T, e *env, got []seen) {
				if len(got) != 2 {
					t.Errorf("upstream: got %v, want /public/big and /public/normal", uris(got))
				}
			},
		},
		{
			name: "thousands of idle connections",
			send: func(t *testing.T, e *env) result {
				var conns []net.Conn
				defer func() {
					for _, c := range conns {
						c.Close()
					}
				}()
				for i := 0; i < 3000; i++ {
					c, err := net.Dial("tcp", e.addr)
					if err != nil {
						t.Fatalf("idle connection %d: %v", i, err)
					}
					conns = append(conns, c)
				}
				normalClient(t, e)
				return result{status: 200}
			},
			status: 200, rule: "bypass.read", path: "/public/normal",
			upstream: one("/public/normal"),
		},
		{
			name: "Proxy-Authorization of another sandbox on a bound listener",
			send: func(t *testing.T, e *env) result {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				detach := e.proxy.Attach(ln, identity.Identity{ID: "sbx-victim-owner"})
				defer detach()
				tok, err := e.proxy.IssueToken(context.Background(), identity.Identity{ID: "sbx-other"})
				if err != nil {
					t.Fatal(err)
				}
				defer e.proxy.RevokeToken(context.Background(), "sbx-other")
				cred := base64.StdEncoding.EncodeToString([]byte("sbx-other:" + tok))
				c := dial(t, ln.Addr().String())
				fmt.Fprintf(c, "GET %s/public/a HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", e.upstreamURL(), host, cred)
				return readResp(newReader(c), "GET")
			},
			status: 407, rule: "identity",
		},
		{
			name: "forged Proxy-Authorization on the shared listener",
			send: func(t *testing.T, e *env) result {
				cred := base64.StdEncoding.EncodeToString([]byte("default:guess"))
				return e.raw(t, fmt.Sprintf("GET %s/public/a HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", e.upstreamURL(), host, cred))
			},
			status: 407, rule: "identity",
		},
	}
}

var (
	_ = bytes.Equal
	_ = strings.Contains
	_ = http.StatusOK
)
