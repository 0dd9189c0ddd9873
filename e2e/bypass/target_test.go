//go:build e2e

package bypass_test

import (
	"fmt"
	"testing"
)

// targetCases: request targets that servers read differently. Each is refused
// with 400 from rule protocol, or the upstream receives the one canonical form the policy
// decided on.
func targetCases(e *env) []attack {
	u := e.upstreamURL()
	host := fmt.Sprintf("upstream.test:%d", e.port)
	get := func(target string) func(t *testing.T, e *env) result {
		return func(t *testing.T, e *env) result {
			return e.raw(t, "GET "+target+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		}
	}
	tunnelGet := func(target string) func(t *testing.T, e *env) result {
		return func(t *testing.T, e *env) result {
			return e.inTunnel(t, e.tlsTarget("upstream.test"), "upstream.test",
				"GET "+target+" HTTP/1.1\r\nHost: "+e.tlsTarget("upstream.test")+"\r\n\r\n")
		}
	}
	refused := func(name string, send func(t *testing.T, e *env) result) attack {
		return attack{name: name, send: send, status: 400, rule: "protocol"}
	}
	sent := func(name string, send func(t *testing.T, e *env) result, path, uri string) attack {
		return attack{name: name, send: send, status: 200, rule: "bypass.read", path: path, upstream: one(uri)}
	}
	return []attack{
		refused("';' in the query (Go drops the pair, other servers split on it)", get(u+"/public/a?x=1;admin=true")),
		refused("';' in the query inside a tunnel", tunnelGet("/public/a?x=1;admin=true")),
		refused("'#' in the request target", get(u+"/public/a?x=1#admin=true")),
		refused("'#' in the path inside a tunnel", tunnelGet("/public/a#/../admin")),
		refused("malformed %-escape in the query", get(u+"/public/a?x=%zz")),
		refused("truncated %-escape at the end of the query", get(u+"/public/a?x=1%2")),
		refused("%00 in a query value", get(u+"/public/a?x=ok%00admin")),
		refused("control byte in a query name", get(u+"/public/a?admin%01=1")),
		refused("empty query name", get(u+"/public/a?=admin")),
		refused("query value that is not UTF-8", get(u+"/public/a?x=%FF")),
		refused("';' path parameter hiding a dot segment", get(u+"/public/..;/admin")),
		refused("';' path parameter", get(u+"/public/a;jsessionid=1")),
		refused("raw backslash dot segment", get(u+"/public/..\\admin")),
		refused("encoded slash next to a dot segment", get(u+"/public/..%2Fadmin")),
		refused("encoded backslash next to a dot segment inside a tunnel", tunnelGet("/public/%2e%2e%5cadmin")),
		refused("overlong UTF-8 dots", get(u+"/public/%C0%AE%C0%AE/admin")),
		refused("%00 in the path", get(u+"/public/a%00.txt")),
		sent("an encoded slash without a dot segment stays encoded", get(u+"/public/group%2fproject"),
			"/public/group%2Fproject", "/public/group%2Fproject"),
		sent("the upstream receives the canonical query", get(u+"/public/q?b=2&a=1+1&&a=%7e&c&d=x%2By"),
			"/public/q", "/public/q?b=2&a=1%201&a=~&c=&d=x%2By"),
		sent("the upstream receives the canonical query inside a tunnel", tunnelGet("/public/q?a=/x:y@z&%61=%3B"),
			"/public/q", "/public/q?a=%2Fx%3Ay%40z&a=%3B"),
		sent("a lone '?' is dropped", get(u+"/public/q?"), "/public/q", "/public/q"),
		sent("characters that may not stand raw in a path are escaped", get(u+"/public/\xc3\xa9\"<>"),
			"/public/%C3%A9%22%3C%3E", "/public/%C3%A9%22%3C%3E"),
		sent("a query separator sent as %3B is data", get(u+"/public/q?x=1%3Badmin=true"),
			"/public/q", "/public/q?x=1%3Badmin%3Dtrue"),
	}
}
