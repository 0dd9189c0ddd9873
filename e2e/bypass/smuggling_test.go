//go:build e2e

package bypass_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

// smugglingCases: request smuggling, header injection, host confusion, userinfo, paths,
// header limits.
func smugglingCases(e *env) []attack {
	u := e.upstreamURL()
	host := fmt.Sprintf("upstream.test:%d", e.port)
	get := func(target string, headers ...string) func(t *testing.T, e *env) result {
		return func(t *testing.T, e *env) result {
			return e.raw(t, "GET "+target+" HTTP/1.1\r\n"+strings.Join(headers, "")+"\r\n")
		}
	}
	tunnelGet := func(path string, headers ...string) func(t *testing.T, e *env) result {
		return func(t *testing.T, e *env) result {
			h := strings.Join(headers, "")
			if !strings.Contains(h, "Host:") {
				h = "Host: " + e.tlsTarget("upstream.test") + "\r\n" + h
			}
			return e.inTunnel(t, e.tlsTarget("upstream.test"), "upstream.test", "GET "+path+" HTTP/1.1\r\n"+h+"\r\n")
		}
	}
	many := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "X-H%d: v\r\n", i)
		}
		return b.String()
	}
	return []attack{
		{
			// The body is framed by Transfer-Encoding (RFC 9112 §6.3): the "smuggled"
			// request after the empty chunk is a request of its own, and is evaluated.
			name: "CL and TE conflict: the smuggled request is evaluated on its own",
			send: func(t *testing.T, e *env) result {
				smuggled := "GET " + u + "/admin HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
				c := dial(t, e.addr)
				fmt.Fprintf(c, "GET %s/public/a HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s",
					u, host, 5+len(smuggled), smuggled)
				br := newReader(c)
				first := readResp(br, "GET")
				if first.status != 200 {
					t.Errorf("the framed request: got %s, want 200", first)
				}
				return readResp(br, "GET")
			},
			status: 403, rule: "bypass.default", path: "/admin",
			upstream: one("/public/a"),
		},
		{
			name:   "two Content-Length values",
			send:   get(u+"/public/a", "Host: "+host+"\r\n", "Content-Length: 0\r\n", "Content-Length: 7\r\n"),
			status: 400, rule: "protocol",
		},
		{
			name:   "Transfer-Encoding other than chunked",
			send:   get(u+"/public/a", "Host: "+host+"\r\n", "Transfer-Encoding: xchunked\r\n"),
			status: 501, rule: "protocol",
		},
		{
			// RFC 9112 §5.2: a proxy replaces obs-fold with a space; the folded line stays
			// part of X-Folded and never becomes a Transfer-Encoding upstream.
			name:   "obs-fold hiding a Transfer-Encoding line",
			send:   get(u+"/public/a", "Host: "+host+"\r\n", "X-Folded: a\r\n", " Transfer-Encoding: chunked\r\n"),
			status: 200, rule: "bypass.read", path: "/public/a",
			upstream: func(t *testing.T, e *env, got []seen) {
				one("/public/a")(t, e, got)
				if len(got) == 1 && (got[0].Header.Get("Transfer-Encoding") != "" || !strings.Contains(got[0].Header.Get("X-Folded"), "Transfer-Encoding")) {
					t.Errorf("upstream headers %v: want the fold kept inside X-Folded", got[0].Header)
				}
			},
		},
		{
			name:   "bare CR in a header value",
			send:   get(u+"/public/a", "Host: "+host+"\r\n", "X-Inject: a\rX-Other: b\r\n"),
			status: 400, rule: "protocol",
		},
		{
			name:   "encoded CR LF in the path stays encoded",
			send:   get(u+"/public/a%0d%0aX-Injected:%201", "Host: "+host+"\r\n"),
			status: 200, rule: "bypass.read", path: "/public/a%0D%0AX-Injected:%201",
			upstream: func(t *testing.T, e *env, got []seen) {
				one("/public/a%0D%0AX-Injected:%201")(t, e, got)
				if len(got) == 1 && got[0].Header.Get("X-Injected") != "" {
					t.Error("a header was injected through the path")
				}
			},
		},
		{
			name:   "absolute-form URL names a blocked host, Host header an allowed one",
			send:   get(fmt.Sprintf("http://forbidden.test:%d/public/a", e.port), "Host: "+host+"\r\n"),
			status: 403, rule: "bypass.blocked", host: "forbidden.test",
		},
		{
			name:   "absolute-form URL names an allowed host, Host header a blocked one",
			send:   get(u+"/public/a", fmt.Sprintf("Host: forbidden.test:%d\r\n", e.port)),
			status: 200, rule: "bypass.read", host: "upstream.test",
			upstream: func(t *testing.T, e *env, got []seen) {
				one("/public/a")(t, e, got)
				if len(got) == 1 && got[0].Host != host {
					t.Errorf("upstream Host: got %q, want %q (the URL's host)", got[0].Host, host)
				}
			},
		},
		{
			name: "CONNECT to a blocked host",
			send: func(t *testing.T, e *env) result {
				_, r := e.tunnel(t, e.tlsTarget("forbidden.test"), "forbidden.test", "")
				return r
			},
			status: 403, rule: "bypass.blocked", host: "forbidden.test",
		},
		{
			// The policy decided on the CONNECT target, which is what is dialled; the SNI
			// the client sends changes nothing (airlock's leaf names the CONNECT host).
			name: "TLS SNI names a blocked host inside an allowed CONNECT",
			send: func(t *testing.T, e *env) result {
				return e.inTunnel(t, e.tlsTarget("upstream.test"), "forbidden.test",
					"GET /public/sni HTTP/1.1\r\nHost: "+e.tlsTarget("upstream.test")+"\r\n\r\n")
			},
			status: 200, rule: "bypass.read", host: "upstream.test",
			upstream: func(t *testing.T, e *env, got []seen) {
				one("/public/sni")(t, e, got)
				if len(got) == 1 && got[0].SNI != "upstream.test" {
					t.Errorf("upstream saw SNI %q, want upstream.test (the CONNECT target)", got[0].SNI)
				}
			},
		},
		{
			name:   "inner Host header names a blocked host inside an allowed CONNECT",
			send:   tunnelGet("/public/a", "Host: "+fmt.Sprintf("forbidden.test:%d", e.tlsPort)+"\r\n"),
			status: 421, rule: "protocol.host_mismatch",
		},
		{
			name:   "inner absolute-form URL names a blocked host inside an allowed CONNECT",
			send:   tunnelGet(fmt.Sprintf("https://forbidden.test:%d/public/a", e.tlsPort), "Host: "+e.tlsTarget("upstream.test")+"\r\n"),
			status: 421, rule: "protocol.host_mismatch",
		},
		{
			name: "second CONNECT relayed inside an allowed tunnel",
			send: func(t *testing.T, e *env) result {
				target := fmt.Sprintf("forbidden.test:%d", e.tlsPort)
				return e.inTunnel(t, e.tlsTarget("upstream.test"), "upstream.test",
					"CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
			},
			status: 421, rule: "protocol.host_mismatch",
		},
		{
			name: "second CONNECT inside a tunnel, Host naming the tunnel's host",
			send: func(t *testing.T, e *env) result {
				return e.inTunnel(t, e.tlsTarget("upstream.test"), "upstream.test",
					fmt.Sprintf("CONNECT forbidden.test:%d HTTP/1.1\r\nHost: %s\r\n\r\n", e.tlsPort, e.tlsTarget("upstream.test")))
			},
			status: 421, rule: "protocol.host_mismatch", host: "forbidden.test",
		},
		{
			name: "HTTP/1.0 origin-form without Host",
			send: func(t *testing.T, e *env) result {
				return e.raw(t, "GET /public/a HTTP/1.0\r\n\r\n")
			},
			status: 400, rule: "protocol",
		},
		{
			name:   "HTTP/1.1 without Host",
			send:   get(u + "/public/a"),
			status: 400, rule: "protocol",
		},
		{
			name:   "userinfo in the URL",
			send:   get(fmt.Sprintf("http://user:pass@upstream.test:%d/public/a", e.port), "Host: "+host+"\r\n"),
			status: 400, rule: "protocol",
		},
		{
			name: "userinfo in the CONNECT target",
			send: func(t *testing.T, e *env) result {
				_, r := e.tunnel(t, "user:pass@"+e.tlsTarget("upstream.test"), "upstream.test", "")
				return r
			},
			status: 400, rule: "protocol",
		},
		{
			name:   "userinfo in an absolute URL inside a tunnel",
			send:   tunnelGet("https://user:pass@" + e.tlsTarget("upstream.test") + "/public/a"),
			status: 400, rule: "protocol",
		},
		{
			name:   "percent-encoded dot segments climb out of the allowed prefix",
			send:   get(u+"/public/%2e%2e/admin", "Host: "+host+"\r\n"),
			status: 403, rule: "bypass.default", path: "/admin",
		},
		{
			// ';' in a path is refused: servers disagree on whether ";params" belong to the
			// segment (target_test.go has the other forms).
			name:   "dot-dot with ;params climbs out of the allowed prefix",
			send:   get(u+"/public/..;/admin", "Host: "+host+"\r\n"),
			status: 400, rule: "protocol",
		},
		{
			name:   "double slash before a denied path",
			send:   get(u+"//admin//public/", "Host: "+host+"\r\n"),
			status: 403, rule: "bypass.default", path: "/admin/public/",
		},
		{
			name:   "encoded dot segments inside a tunnel",
			send:   tunnelGet("/public/%2E%2e/admin"),
			status: 403, rule: "bypass.default", path: "/admin",
		},
		{
			name:   "the upstream receives the normalised path",
			send:   get(u+"/public//a/./b/%2e%2E/c/%61%7e", "Host: "+host+"\r\n"),
			status: 200, rule: "bypass.read", path: "/public/a/c/a~",
			upstream: one("/public/a/c/a~"),
		},
		{
			name:   "the upstream receives the normalised path inside a tunnel",
			send:   tunnelGet("/public//x/../y/./z"),
			status: 200, rule: "bypass.read", path: "/public/y/z",
			upstream: one("/public/y/z"),
		},
		{
			name:   "a path climbing above the root",
			send:   get(u+"/public/../../admin", "Host: "+host+"\r\n"),
			status: 400, rule: "protocol",
		},
		{
			name:   "oversized header",
			send:   get(u+"/public/a", "Host: "+host+"\r\n", "X-Big: "+strings.Repeat("a", 40<<10)+"\r\n"),
			status: 431, rule: "limits.header",
		},
		{
			name:   "too many headers",
			send:   get(u+"/public/a", "Host: "+host+"\r\n", many(4000)),
			status: 431, rule: "limits.header",
		},
		{
			name:   "oversized header inside a tunnel",
			send:   tunnelGet("/public/a", "X-Big: "+strings.Repeat("a", 40<<10)+"\r\n"),
			status: 431, rule: "limits.header",
		},
		{
			name:   "too many headers inside a tunnel",
			send:   tunnelGet("/public/a", many(4000)),
			status: 431, rule: "limits.header",
		},
	}
}

var _ = io.EOF
