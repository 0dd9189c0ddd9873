//go:build e2e

package bypass_test

import (
	"fmt"
	"testing"
)

// loopbackSpellings are ways to write 127.0.0.1 (or ::1) that resolvers and URL parsers
// accept; each must be normalised and refused by the dial guard.
var loopbackSpellings = []struct{ spelling, canonical string }{
	{"127.0.0.1", "127.0.0.1"},
	{"2130706433", "127.0.0.1"},
	{"0x7f000001", "127.0.0.1"},
	{"0X7F000001", "127.0.0.1"},
	{"017700000001", "127.0.0.1"},
	{"0177.0.0.1", "127.0.0.1"},
	{"0x7f.0.0.1", "127.0.0.1"},
	{"0x7f.0x0.0x0.0x1", "127.0.0.1"},
	{"127.1", "127.0.0.1"},
	{"127.0.1", "127.0.0.1"},
	{"127.000.000.001", "127.0.0.1"},
	{"127.0.0.1.", "127.0.0.1"},
	{"[::ffff:127.0.0.1]", "127.0.0.1"},
	{"[::ffff:7f00:1]", "127.0.0.1"},
	{"[0:0:0:0:0:ffff:7f00:1]", "127.0.0.1"},
	{"[::1]", "::1"},
	{"[0:0:0:0:0:0:0:1]", "::1"},
	{"[::127.0.0.1]", ""},               // IPv4-compatible
	{"[2002:7f00:1::]", ""},             // 6to4
	{"[64:ff9b::7f00:1]", ""},           // NAT64
	{"[64:ff9b:1::7f00:1]", ""},         // local-use NAT64
	{"[64:ff9b::127.0.0.1]", ""},        // NAT64, dotted
	{"[::ffff:127.0.0.2]", "127.0.0.2"}, // allowed range, but mapped: still the guard's view
}

// metadataSpellings are ways to write the cloud metadata address (and its IPv6 forms).
var metadataSpellings = []struct{ spelling, canonical string }{
	{"169.254.169.254", "169.254.169.254"},
	{"2852039166", "169.254.169.254"},
	{"0xa9fea9fe", "169.254.169.254"},
	{"0251.0376.0251.0376", "169.254.169.254"},
	{"0xa9.0xfe.0xa9.0xfe", "169.254.169.254"},
	{"169.254.43518", "169.254.169.254"},
	{"169.16689662", "169.254.169.254"},
	{"[::ffff:169.254.169.254]", "169.254.169.254"},
	{"[::ffff:a9fe:a9fe]", "169.254.169.254"},
	{"[64:ff9b::a9fe:a9fe]", ""},
	{"[2002:a9fe:a9fe::]", ""},
	{"[fd00:ec2::254]", "fd00:ec2::254"}, // AWS IMDS over IPv6
	{"[fe80::a9fe:a9fe]", "fe80::a9fe:a9fe"},
}

func destinationCases(e *env) []attack {
	var out []attack
	get := func(hostport, path string) func(t *testing.T, e *env) result {
		return func(t *testing.T, e *env) result {
			return e.raw(t, fmt.Sprintf("GET http://%s%s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, path, hostport))
		}
	}
	for _, s := range loopbackSpellings {
		if s.canonical == "127.0.0.2" {
			// The allowed upstream, spelled as an IPv4-mapped address: normalised, allowed.
			out = append(out, attack{
				name:   "IPv4-mapped spelling of the allowed upstream " + s.spelling,
				send:   get(fmt.Sprintf("%s:%d", s.spelling, e.port), "/public/mapped"),
				status: 200, rule: "bypass.read", host: "127.0.0.2", upstream: one("/public/mapped"),
			})
			continue
		}
		out = append(out, attack{
			name:   "loopback spelled " + s.spelling,
			send:   get(fmt.Sprintf("%s:%d", s.spelling, e.port), "/public/x"),
			status: 403, rule: "dial_guard", host: s.canonical,
		})
	}
	for _, s := range metadataSpellings {
		out = append(out, attack{
			name:   "metadata address spelled " + s.spelling,
			send:   get(s.spelling+":80", "/public/latest/meta-data/"),
			status: 403, rule: "bypass.default", host: s.canonical, port: 80,
		})
		out = append(out, attack{
			name:   "metadata address spelled " + s.spelling + " on an allowed port",
			send:   get(fmt.Sprintf("%s:%d", s.spelling, e.port), "/public/latest/meta-data/"),
			status: 403, rule: "dial_guard", host: s.canonical,
		})
	}
	out = append(out,
		attack{
			name: "CONNECT to a decimal loopback, inner request",
			send: func(t *testing.T, e *env) result {
				target := fmt.Sprintf("2130706433:%d", e.port)
				c := dial(t, e.addr)
				fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
				br := newReader(c)
				if r := readResp(br, "CONNECT"); r.status != 200 {
					return r
				}
				fmt.Fprintf(c, "GET /public/x HTTP/1.1\r\nHost: %s\r\n\r\n", target)
				return readResp(br, "GET")
			},
			status: 403, rule: "dial_guard", host: "127.0.0.1",
		},
		attack{
			name:   "trailing dot and mixed case reach the allowed host",
			send:   get(fmt.Sprintf("UpStream.TEST.:%d", e.port), "/public/case"),
			status: 200, rule: "bypass.read", host: "upstream.test", upstream: one("/public/case"),
		},
		attack{
			name:   "trailing dot and mixed case do not dodge a blocked host",
			send:   get(fmt.Sprintf("ForBidden.Test.:%d", e.port), "/public/a"),
			status: 403, rule: "bypass.blocked", host: "forbidden.test",
		},
		attack{
			name: "IDN homograph in the URL: the policy sees punycode",
			send: func(t *testing.T, e *env) result {
				return e.raw(t, fmt.Sprintf("GET http://\u0430pple.test:%d/public/a HTTP/1.1\r\nHost: %s:%d\r\n\r\n", e.port, e.homograph, e.port))
			},
			status: 403, rule: "bypass.blocked", host: e.homograph,
		},
		attack{
			name: "IDN homograph in a CONNECT: the policy sees punycode",
			send: func(t *testing.T, e *env) result {
				return e.raw(t, fmt.Sprintf("CONNECT \u0430pple.test:%d HTTP/1.1\r\n\r\n", e.tlsPort))
			},
			status: 403, rule: "bypass.blocked", host: e.homograph,
		},
		attack{
			name:   "IDN homograph as a raw UTF-8 Host header",
			send:   get(fmt.Sprintf("\u0430pple.test:%d", e.port), "/public/a"),
			status: 400, rule: "protocol",
		},
		attack{
			// The guard resolves once and dials the address it checked: an answer that
			// changes between lookups (rebinding) is refused each time it is loopback.
			name: "DNS rebinding between requests",
			send: func(t *testing.T, e *env) result {
				// Concurrent requests, each held by the upstream for a moment, so that none
				// reuses another's upstream connection: every one is a fresh lookup and dial.
				results := make(chan result, 6)
				for i := 0; i < 6; i++ {
					go func() {
						results <- get(fmt.Sprintf("rebind.test:%d", e.port), fmt.Sprintf("/public/rebind/%d", i))(t, e)
					}()
				}
				var refused result
				ok := 0
				for i := 0; i < 6; i++ {
					switch r := <-results; r.status {
					case 200:
						ok++
					case 403:
						refused = r
					default:
						t.Errorf("rebind request: got %s, want 200 or 403", r)
					}
				}
				if ok == 0 {
					t.Error("no rebind request reached the allowed address")
				}
				return refused
			},
			status: 403, rule: "dial_guard", host: "rebind.test",
			upstream: func(t *testing.T, e *env, got []seen) {
				if len(got) == 0 {
					t.Error("the allowed address was never reached")
				}
			},
		},
		attack{
			name:   "a name resolving to an allowed and a loopback address",
			send:   get(fmt.Sprintf("multi.test:%d", e.port), "/public/a"),
			status: 403, rule: "dial_guard", host: "multi.test",
		},
		attack{
			name:   "non-default port",
			send:   get("upstream.test:8080", "/public/a"),
			status: 403, rule: "bypass.default", host: "upstream.test", port: 8080,
		},
		attack{
			name:   "default port when only another is allowed",
			send:   get("upstream.test", "/public/a"),
			status: 403, rule: "bypass.default", host: "upstream.test", port: 80,
		},
	)
	for _, port := range []int{22, 25} {
		out = append(out, attack{
			name: fmt.Sprintf("CONNECT to port %d", port),
			send: func(t *testing.T, e *env) result {
				_, r := e.tunnel(t, fmt.Sprintf("upstream.test:%d", port), "upstream.test", "")
				return r
			},
			status: 403, rule: "bypass.default", port: port,
		})
	}
	return out
}
