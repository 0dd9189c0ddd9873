package proxy

import (
	"bufio"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/internal/identity"
)

// targetCases: a request target as sent, and what the policy sees and the upstream receives
// (sent: the forwarded path?query), or the refusal's reason (err, a substring).
var targetCases = []struct {
	target string
	sent   string
	query  map[string][]string
	err    string
}{
	// Query separators and encodings.
	{target: "/p?x=1;admin=true", err: "';'"},
	{target: "/p?x=1%3Badmin=true", sent: "/p?x=1%3Badmin%3Dtrue", query: map[string][]string{"x": {"1;admin=true"}}},
	{target: "/p?a=1&&b=2&", sent: "/p?a=1&b=2", query: map[string][]string{"a": {"1"}, "b": {"2"}}},
	{target: "/p?", sent: "/p"},
	{target: "/p?&", sent: "/p"},
	{target: "/p?flag", sent: "/p?flag=", query: map[string][]string{"flag": {""}}},
	{target: "/p?=x", err: "empty name"},
	{target: "/p?a=1&=", err: "empty name"},
	{target: "/p?a=%zz", err: "malformed"},
	{target: "/p?a=%4", err: "malformed"},
	{target: "/p?a=%", err: "malformed"},
	{target: "/p?%zz=1", err: "malformed"},
	{target: "/p?a=b+c%20d%2B", sent: "/p?a=b%20c%20d%2B", query: map[string][]string{"a": {"b c d+"}}},
	{target: "/p?a+b=1", sent: "/p?a%20b=1", query: map[string][]string{"a b": {"1"}}},
	{target: "/p?a=1&a=2&b=3&a=4", sent: "/p?a=1&a=2&b=3&a=4", query: map[string][]string{"a": {"1", "2", "4"}, "b": {"3"}}},
	{target: "/p?a=%00", err: "%00"},
	{target: "/p?a%00=1", err: "control character"},
	{target: "/p?a%01b=1", err: "control character"},
	{target: "/p?a%7Fb=1", err: "control character"},
	{target: "/p?a=%01%0A", sent: "/p?a=%01%0A", query: map[string][]string{"a": {"\x01\n"}}},
	{target: "/p?a=%FF", err: "UTF-8"},
	{target: "/p?a=%C0%AE", err: "UTF-8"},
	{target: "/p?a=\xff", err: "UTF-8"},
	{target: "/p?a=1#frag", err: "'#'"},
	{target: "/p#frag", err: "'#'"},
	{target: "/p?a=b=c", sent: "/p?a=b%3Dc", query: map[string][]string{"a": {"b=c"}}},
	{target: "/p?\u00e9=\u00fc", sent: "/p?%C3%A9=%C3%BC", query: map[string][]string{"é": {"ü"}}},
	{target: "/p?a=1%03force%04true", sent: "/p?a=1%03force%04true", query: map[string][]string{"a": {"1\x03force\x04true"}}},
	{target: "/p?a=1?b=2", sent: "/p?a=1%3Fb%3D2", query: map[string][]string{"a": {"1?b=2"}}},
	{target: "/p?a=/x:y@z,w!*'()", sent: "/p?a=%2Fx%3Ay%40z%2Cw%21%2A%27%28%29", query: map[string][]string{"a": {"/x:y@z,w!*'()"}}},
	{target: "/p?A=1&a=2", sent: "/p?A=1&a=2", query: map[string][]string{"A": {"1"}, "a": {"2"}}},
	{target: "/p?a=%e2%82%ac", sent: "/p?a=%E2%82%AC", query: map[string][]string{"a": {"€"}}},
	{target: "/p?user[admin]=1", sent: "/p?user%5Badmin%5D=1", query: map[string][]string{"user[admin]": {"1"}}},

	// Paths.
	{target: "/a/b", sent: "/a/b"},
	{target: "/a/%2e%2e/b", sent: "/b"},
	{target: "/a/.%2E/b/./c", sent: "/b/c"},
	{target: "//admin//x/", sent: "/admin/x/"},
	{target: "/a;b/c", err: "';'"},
	{target: "/public/..;/admin", err: "';'"},
	{target: "/public/..;x=1/admin", err: "';'"},
	{target: "/a%3Bb/c", sent: "/a%3Bb/c"},
	{target: "/a\\b", err: "backslash"},
	{target: "/public/..\\admin", err: "backslash"},
	{target: "/a%5cb", sent: "/a%5Cb"},
	{target: "/public/..%2Fadmin", err: "dot segment"},
	{target: "/public/..%2fadmin", err: "dot segment"},
	{target: "/public/%2e%2e%5Cadmin", err: "dot segment"},
	{target: "/public%2F..%2Fadmin", err: "dot segment"},
	{target: "/public/x%2F.", err: "dot segment"},
	{target: "/api/v4/projects/group%2fproject", sent: "/api/v4/projects/group%2Fproject"},
	{target: "/@scope%2fname", sent: "/@scope%2Fname"},
	{target: "/a%00b", err: "%00"},
	{target: "/a%C0%AE%C0%AE/x", err: "UTF-8"},
	{target: "/a%FF", err: "UTF-8"},
	{target: "/\u00e9", sent: "/%C3%A9"},
	{target: "/a\"b<c>{d}|^`", sent: "/a%22b%3Cc%3E%7Bd%7D%7C%5E%60"},
	{target: "/a[b]", sent: "/a%5Bb%5D"},
	{target: "/a/%252e%252e/x", sent: "/a/%252e%252e/x"},
	{target: "/%61dmin/%7e", sent: "/admin/~"},
	{target: "/a:b@c!$&'()*+,=", sent: "/a:b@c!$&'()*+,="},
	{target: "/public/../../admin", err: "climbs above the root"},

	// Absolute form.
	{target: "http://upstream.test/p?q=1", sent: "/p?q=1", query: map[string][]string{"q": {"1"}}},
	{target: "http://upstream.test?x=1/y", sent: "/?x=1%2Fy", query: map[string][]string{"x": {"1/y"}}},
	{target: "http://upstream.test", sent: "/"},
	{target: "http://upstream.test/a;b", err: "';'"},
}

func TestParseTarget(t *testing.T) {
	for _, tt := range targetCases {
		rt, err := parseTarget(&http.Request{RequestURI: tt.target})
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: got %+v, %v; want an error with %q", tt.target, rt, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.target, err)
			continue
		}
		sent := rt.path
		if q := encodeQuery(rt.query); q != "" {
			sent += "?" + q
		}
		if sent != tt.sent {
			t.Errorf("%q: sends %q, want %q", tt.target, sent, tt.sent)
		}
		if got := queryMap(rt.query); !reflect.DeepEqual(got, tt.query) {
			t.Errorf("%q: policy query %q, want %q", tt.target, got, tt.query)
		}
	}
}

// TestResolveTargetForwardsWhatThePolicySaw reads each target as the proxy does, in plain
// HTTP and inside a tunnel: a refused target gets a 400 from rule protocol with the reason;
// an accepted one leaves r.URL sending exactly the path and query the policy input holds.
func TestResolveTargetForwardsWhatThePolicySaw(t *testing.T) {
	for _, tt := range targetCases {
		for _, inTunnel := range []bool{false, true} {
			target := tt.target
			if inTunnel && strings.HasPrefix(target, "http://") {
				target = "https://" + strings.TrimPrefix(target, "http://")
			}
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: upstream.test\r\n\r\n")))
			if err != nil {
				// net/http refuses it before the proxy sees it (a 400 from the server).
				if tt.err == "" {
					t.Errorf("%q: net/http refused it (%v), want it sent as %q", target, err, tt.sent)
				}
				continue
			}
			var tun *tunnel
			if inTunnel {
				tun = &tunnel{host: "upstream.test", port: 443}
				if !r.URL.IsAbs() {
					r.URL.Scheme, r.URL.Host = "https", r.Host
				}
			} else if !r.URL.IsAbs() {
				continue // origin form outside a tunnel goes to the proxy's own handler
			}
			tg, f := (&Proxy{}).resolveTarget(r, tun)
			if tt.err != "" {
				if f == nil || f.status != http.StatusBadRequest || f.rule != "protocol" || !strings.Contains(f.reason, tt.err) {
					t.Errorf("%q (tunnel %v): got %+v, %+v; want 400 protocol with %q", target, inTunnel, tg, f, tt.err)
				}
				continue
			}
			if f != nil {
				t.Errorf("%q (tunnel %v): refused: %+v", target, inTunnel, f)
				continue
			}
			if got := r.URL.RequestURI(); got != tt.sent {
				t.Errorf("%q (tunnel %v): forwards %q, want %q", target, inTunnel, got, tt.sent)
			}
			in := requestInput(identity.Identity{ID: "s"}, r, tg)
			if !reflect.DeepEqual(in.Request.Query, tt.query) {
				t.Errorf("%q (tunnel %v): policy query %q, want %q", target, inTunnel, in.Request.Query, tt.query)
			}
		}
	}
}

// TestRefusalReasonsNeverQuoteQueryValues: a value may be a secret; a refusal names the
// parameter, never its value.
func TestRefusalReasonsNeverQuoteQueryValues(t *testing.T) {
	const canary = "s3cr3tCANARY"
	for _, q := range []string{"token=" + canary + "%zz", "token=" + canary + "%00", "token=" + canary + "%FF", "=" + canary, "token=" + canary + ";x=1"} {
		_, err := parseQuery(q)
		if err == nil {
			t.Errorf("%q: accepted", q)
			continue
		}
		if strings.Contains(err.Error(), canary) {
			t.Errorf("%q: reason %q quotes the value", q, err)
		}
	}
}

// queryPolicy allows GET /allowed... on 127.0.0.1 unless the query has a parameter named
// admin or force (any value): a policy that reads the query and is cached.
const queryPolicy = `package airlock

default decision := {"action": "deny", "rule": "q.default", "reason": "not allowed"}

decision := {"action": "allow", "rule": "q.connect"} if input.phase == "connect"

decision := {"action": "allow", "rule": "q.read"} if {
	input.phase == "request"
	input.request.method == "GET"
	startswith(input.request.path, "/allowed")
	not privileged
}

privileged if {
	some name, _ in input.request.query
	name in {"admin", "force"}
}
`

// TestQueryThroughTheProxy sends the ambiguous queries through the real proxy (plain and
// intercepted) to a real upstream: each is refused, or the upstream receives exactly the
// pairs the policy decided on; the decision cache never answers for another query.
func TestQueryThroughTheProxy(t *testing.T) {
	e := newEnv(t, withPolicy(t, queryPolicy))
	c := e.client(nil)
	for _, base := range []string{e.http.URL, e.https.URL} {
		tests := []struct {
			query  string
			status int
			rule   string
			sent   string // RequestURI the upstream must receive
		}{
			{"x=1;admin=true", 400, "protocol", ""},
			{"x=1&admin=true", 403, "q.default", ""},
			{"a=1%03force%04true", 200, "q.read", "/allowed?a=1%03force%04true"},
			{"a=1&force=true", 403, "q.default", ""}, // after the request above was cached
			{"a=1%03force%04true", 200, "q.read", "/allowed?a=1%03force%04true"},
			{"a=1&force=", 403, "q.default", ""},
			{"force", 403, "q.default", ""},
			{"q=a+b&q=c%2Bd&&r", 200, "q.read", "/allowed?q=a%20b&q=c%2Bd&r="},
			{"q=%zz", 400, "protocol", ""},
			{"=admin", 400, "protocol", ""},
			{"adm%69n=1", 403, "q.default", ""},
			{"ADMIN=1", 200, "q.read", "/allowed?ADMIN=1"},
		}
		for _, tt := range tests {
			n := e.audit.Len()
			resp, body := get(t, c, "GET", base+"/allowed?"+tt.query, "")
			if resp.StatusCode != tt.status || resp.Header.Get("X-Airlock-Rule") != tt.rule && tt.status != 200 {
				t.Errorf("%s ?%s: %d %s (%q), want %d %s", base, tt.query, resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), body, tt.status, tt.rule)
			}
			var got *http.Request
			select {
			case got = <-e.upstream:
			default:
			}
			switch {
			case tt.sent == "" && got != nil:
				t.Errorf("%s ?%s: the upstream received %s", base, tt.query, got.RequestURI)
			case tt.sent != "" && got == nil:
				t.Errorf("%s ?%s: the upstream received nothing", base, tt.query)
			case tt.sent != "" && got.RequestURI != tt.sent:
				t.Errorf("%s ?%s: the upstream received %s, want %s", base, tt.query, got.RequestURI, tt.sent)
			}
			evs := e.audit.WaitSince(n, 5*time.Second, func(evs []audit.Event) bool {
				return len(evs) > 0 && evs[len(evs)-1].Rule == tt.rule
			})
			if len(evs) == 0 || evs[len(evs)-1].Rule != tt.rule {
				t.Errorf("%s ?%s: audit events %+v, want one with rule %s", base, tt.query, evs, tt.rule)
			}
		}
	}
}
