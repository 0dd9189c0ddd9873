package proxy

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/internal/hostname"
	"github.com/airlock-proxy/airlock/internal/identity"
)

// requestSeeds are raw requests from the bypass suite (e2e/bypass).
var requestSeeds = []string{
	"GET http://upstream.test:8080/public/a HTTP/1.1\r\nHost: upstream.test:8080\r\n\r\n",
	"GET http://forbidden.test/public/a HTTP/1.1\r\nHost: upstream.test\r\n\r\n",
	"GET http://user:pass@upstream.test/public/a HTTP/1.1\r\nHost: upstream.test\r\n\r\n",
	"GET http://upstream.test/public/%2e%2e/admin HTTP/1.1\r\nHost: upstream.test\r\n\r\n",
	"GET http://upstream.test/public/..;/admin HTTP/1.1\r\nHost: upstream.test\r\n\r\n",
	"GET http://UpStream.TEST.//admin//public/ HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET http://0x7f.1:80/public/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s\r\nCookie: c=1\r\nProxy-Authorization: Basic eDp5\r\n\r\n",
	"GET http://[::ffff:169.254.169.254]/latest HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET http://\u0430pple.test/public/a?x=1&y=%00 HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /public/a HTTP/1.1\r\nHost: upstream.test:443\r\n\r\n",
	"GET /public/a HTTP/1.1\r\nHost: forbidden.test\r\n\r\n",
	"CONNECT forbidden.test:443 HTTP/1.1\r\nHost: upstream.test:443\r\n\r\n",
	"POST http://upstream.test/write HTTP/1.1\r\nHost: upstream.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n",
	"GET http://upstream.test/public/a%0d%0aX-Injected:%201 HTTP/1.1\r\nHost: upstream.test\r\nX-Folded: a\r\n b\r\n\r\n",
	"GET http://upstream.test/public/a?x=1;admin=true HTTP/1.1\r\nHost: upstream.test\r\n\r\n",
	"GET http://upstream.test/public/a?a=1%03force%04true&b=+%2B&&c HTTP/1.1\r\nHost: upstream.test\r\n\r\n",
	"GET /public/..%2Fadmin?a=%zz#f HTTP/1.1\r\nHost: upstream.test\r\n\r\n",
}

// FuzzRequestInput: whatever request a client sends, what the policy sees is normalised
// (host and path are fixed points of their normalisers), holds no hidden header, and names
// exactly what will be dialled and sent; inside a tunnel, only the CONNECT host.
func FuzzRequestInput(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, raw string, inTunnel bool) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return
		}
		var tun *tunnel
		if inTunnel {
			tun = &tunnel{host: "upstream.test", port: 443}
			if !r.URL.IsAbs() {
				r.URL.Scheme = "https"
				r.URL.Host = r.Host
			}
		}
		tg, refused := (&Proxy{}).resolveTarget(r, tun)
		if refused != nil {
			if refused.status < 400 || refused.reason == "" {
				t.Fatalf("refusal without a status or reason: %+v", refused)
			}
			return
		}
		in := requestInput(identity.Identity{ID: "sbx"}, r, tg)
		if h, err := hostname.Normalize(in.Request.Host); err != nil || h != in.Request.Host {
			t.Fatalf("policy host %q is not normalised (%q, %v)", in.Request.Host, h, err)
		}
		if p, err := NormalizePath(in.Request.Path); err != nil || p != in.Request.Path {
			t.Fatalf("policy path %q is not normalised (%q, %v)", in.Request.Path, p, err)
		}
		if tun != nil && (in.Request.Host != tun.host || in.Request.Port != tun.port) {
			t.Fatalf("inside a tunnel to %s:%d the policy saw %s:%d", tun.host, tun.port, in.Request.Host, in.Request.Port)
		}
		for k := range in.Request.Headers {
			if k != strings.ToLower(k) {
				t.Fatalf("header key %q is not lower case", k)
			}
			if k == "authorization" || k == "cookie" || k == "proxy-authorization" {
				t.Fatalf("hidden header %q reached the policy input", k)
			}
		}
		defPort := 80
		if tg.scheme == "https" {
			defPort = 443
		}
		h, port, err := splitHostPort(r.URL.Host, defPort)
		if err != nil || h != tg.host || port != tg.port {
			t.Fatalf("dialled %q (%s:%d, %v), policy saw %s:%d", r.URL.Host, h, port, err, tg.host, tg.port)
		}
		if r.URL.EscapedPath() != tg.path && !(tg.path == "/" && r.URL.EscapedPath() == "") {
			t.Fatalf("sent path %q, policy saw %q", r.URL.EscapedPath(), tg.path)
		}
		if r.URL.RawQuery != encodeQuery(tg.query) || r.URL.ForceQuery || r.URL.Opaque != "" {
			t.Fatalf("sent query %q, policy saw %q", r.URL.RawQuery, in.Request.Query)
		}
		if q, err := url.ParseQuery(r.URL.RawQuery); err != nil || len(q)+len(in.Request.Query) > 0 && !reflect.DeepEqual(map[string][]string(q), in.Request.Query) {
			t.Fatalf("sent query %q reads as %q (%v), policy saw %q", r.URL.RawQuery, q, err, in.Request.Query)
		}
		if _, err := json.Marshal(in); err != nil {
			t.Fatalf("input does not marshal: %v", err)
		}
	})
}

// FuzzRemoveHopHeaders: after scrubbing, no hop-by-hop header and no header named in
// Connection is left, except an Upgrade that is re-announced by "Connection: Upgrade".
func FuzzRemoveHopHeaders(f *testing.F) {
	f.Add("Connection: keep-alive, X-Secret\r\nX-Secret: s\r\nProxy-Authorization: Basic eDp5\r\nTe: trailers\r\n")
	f.Add("Connection: Upgrade\r\nUpgrade: websocket\r\nKeep-Alive: 5\r\n")
	f.Add("Upgrade: h2c\r\nProxy-Connection: keep-alive\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sig\r\n")
	f.Add("Connection: close\r\nConnection: Authorization\r\nAuthorization: Bearer t\r\n")
	f.Add("proxy-authenticate: Basic\r\nKEEP-ALIVE: 5\r\nte: trailers\r\nupgrade: h2c\r\n")
	f.Fuzz(func(t *testing.T, block string) {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nHost: x\r\n" + block + "\r\n")))
		if err != nil {
			return
		}
		h := req.Header
		var named []string
		for _, v := range h.Values("Connection") {
			for _, n := range strings.Split(v, ",") {
				if n = strings.TrimSpace(n); n != "" && !strings.EqualFold(n, "Upgrade") {
					named = append(named, n)
				}
			}
		}
		removeHopHeaders(h)
		for _, k := range hopHeaders {
			if k == "Connection" {
				continue
			}
			if _, ok := h[http.CanonicalHeaderKey(k)]; ok {
				t.Fatalf("hop-by-hop header %s left in %v", k, h)
			}
		}
		for _, n := range named {
			if http.CanonicalHeaderKey(n) == "Connection" || http.CanonicalHeaderKey(n) == "Upgrade" {
				continue
			}
			if _, ok := h[http.CanonicalHeaderKey(n)]; ok {
				t.Fatalf("header %s named in Connection left in %v", n, h)
			}
		}
		if c := h.Values("Connection"); len(c) > 0 && (len(c) != 1 || c[0] != "Upgrade" || h.Get("Upgrade") == "") {
			t.Fatalf("Connection left as %q with Upgrade %q", c, h.Get("Upgrade"))
		}
	})
}
