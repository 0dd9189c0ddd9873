package e2etest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/secrets"
)

// ReflectPolicy attaches the credential "canary" to requests for any host below /echo/
// (the destination may reflect it: the default), /quiet/ (declared not to reflect), /ws/
// (may upgrade but not declared not to reflect: a malformed decision, so denied) and
// /wsquiet/ (may upgrade, does not reflect); /open/ carries none. Every CONNECT is allowed.
const ReflectPolicy = `package airlock

default decision := {"action": "deny", "rule": "scrub.deny", "reason": "not allowed"}

decision := {"action": "allow", "rule": "scrub.connect"} if input.phase == "connect"

decision := {"action": "allow", "rule": "scrub.echo", "credentials": ["canary"]} if {
	input.phase == "request"
	startswith(input.request.path, "/echo/")
}

decision := {"action": "allow", "rule": "scrub.quiet", "credentials": ["canary"], "reflects": false} if {
	input.phase == "request"
	startswith(input.request.path, "/quiet/")
}

decision := {"action": "allow", "rule": "scrub.ws", "credentials": ["canary"], "upgrade": true} if { # malformed: may reflect
	input.phase == "request"
	startswith(input.request.path, "/ws/")
}

decision := {"action": "allow", "rule": "scrub.wsquiet", "credentials": ["canary"], "upgrade": true, "reflects": false} if {
	input.phase == "request"
	startswith(input.request.path, "/wsquiet/")
}

decision := {"action": "allow", "rule": "scrub.open"} if {
	input.phase == "request"
	startswith(input.request.path, "/open/")
}
`

// CanaryBroker returns a secrets broker whose one credential, "canary", is a fresh random
// value attached as "Authorization: Bearer VALUE", and that value.
func CanaryBroker(t testing.TB, log *slog.Logger) (*secrets.Broker, string) {
	t.Helper()
	var b [12]byte
	_, _ = rand.Read(b[:])
	canary := "sk-canary-" + hex.EncodeToString(b[:])
	env := "AIRLOCK_TEST_CANARY_" + strings.ToUpper(hex.EncodeToString(b[:4]))
	t.Setenv(env, canary)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	br, err := secrets.New(context.Background(), secrets.Options{Logger: log, Credentials: map[string]secrets.CredentialConfig{
		"canary": {Env: env, Inject: secrets.Inject{Header: "Authorization", Value: "Bearer {{ .value }}"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { br.Close(context.Background()) })
	return br, canary
}

// ScrubCase is one request a real client in a sandbox makes to a Reflector behind airlock
// (with ReflectPolicy), and what its output must show.
type ScrubCase struct {
	Name, Script string
	Want         []string // each in the output
}

// Shell is the case's script as a sandbox runs it: in /tmp, followed by curl's trace of
// every byte received (when the script wrote one).
func (c ScrubCase) Shell() string {
	return "cd /tmp && rm -f trace; " + c.Script + "; echo; cat trace 2>/dev/null"
}

// Check fails t when out holds any form of canary or lacks a wanted string.
func (c ScrubCase) Check(t testing.TB, out, canary string) {
	t.Helper()
	if l := Leak([]byte(out), canary); l != "" {
		t.Fatalf("the sandbox received the credential (%s):\n%s", l, out)
	}
	for _, w := range c.Want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// ScrubCurlCases are curl's requests to a Reflector at https (HTTPS, intercepted) and plain
// (HTTP) base URLs: every way the credential can come back, and what airlock answers. curl
// prints headers, trailers and body (-D -) for the wanted strings and traces every byte it
// receives after TLS (--trace-ascii) for the leak check.
func ScrubCurlCases(https, plain string) []ScrubCase {
	curl := "curl -sS --max-time 20 -D - --trace-ascii /tmp/trace "
	return []ScrubCase{
		{"body", curl + https + "/echo/body", []string{"you sent [airlock:redacted]"}},
		{"json", curl + https + "/echo/json", []string{`"Authorization":"[airlock:redacted]"`}},
		{"headers and cookie", curl + https + "/echo/header", []string{"X-Echo: [airlock:redacted]", "Set-Cookie: t=[airlock:redacted]"}},
		{"declared trailer", curl + https + "/echo/trailer", []string{"X-Echo: [airlock:redacted]"}},
		{"undeclared trailer", curl + https + "/echo/trailer-undeclared", []string{"body first"}}, // dropped inside a tunnel
		{"undeclared trailer, plain HTTP", curl + plain + "/echo/trailer-undeclared", []string{"X-Late: [airlock:redacted]"}},
		{"plain HTTP trailer", curl + plain + "/echo/trailer", []string{"X-Echo: [airlock:redacted]"}},
		{"103 early hints", curl + plain + "/echo/early-hints", []string{"final"}},
		{"upgrade on a rule that may reflect", curl + "-H 'Upgrade: websocket' -H 'Connection: Upgrade' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' -H 'Sec-WebSocket-Version: 13' " +
			plain + "/ws/upgrade-h1", []string{"403", "malformed", `"reflects": false`}},
		{"upgrade the rule does not allow", curl + "-H 'Upgrade: websocket' -H 'Connection: Upgrade' " + plain + "/echo/upgrade-h1",
			[]string{"403", `"upgrade": true`}},
		{"split over flushes", curl + https + "/echo/chunks", []string{"[airlock:redacted]"}},
		{"cut off mid-value: a prefix is not redacted", curl + https + "/echo/prefix-at-end", []string{"ends with sk-canary-"}},
		// A small body is scrubbed whole: a compressed payload in it refuses the response.
		{"gzip inside a multipart part", curl + https + "/echo/multipart-gzip", []string{"502", "compressed payload"}},
		{"gzip after a prefix", curl + https + "/echo/gzip-after-prefix", []string{"502", "compressed payload"}},
		// A long one has begun when the payload comes: it is cut there.
		{"gzip inside a long multipart part", curl + https + "/echo/multipart-gzip-long", []string{"200", "first part"}},
		{"gzip after a long prefix", curl + https + "/echo/gzip-after-long-prefix", []string{"200", "a prefix before the archive"}},
		{"base64 wrapped at 76 columns", curl + https + "/echo/b64-mime", []string{"[airlock:redacted]"}},
		{"HTML references with leading zeros", curl + https + "/echo/html-padded", []string{"<p>[airlock:redacted] </p>"}},
		{"http2 asked for", curl + "--http2 " + https + "/echo/trailer", []string{"X-Echo: [airlock:redacted]"}},
		{"gzip with --compressed", curl + "--compressed " + https + "/echo/gzip", []string{"you sent [airlock:redacted]"}},
		{"base64 at an offset", curl + https + "/echo/b64-offset2", []string{"[airlock:redacted]"}},
		{"hex", curl + https + "/echo/HEX", []string{"[airlock:redacted]"}},
		{"url-encoded", curl + https + "/echo/urlenc", []string{"a=[airlock:redacted]&b=[airlock:redacted]"}},
		{"utf-16", curl + https + "/echo/utf16", []string{"[airlock:redacted]"}},
		{"upper case", curl + https + "/echo/upper", []string{"[airlock:redacted]"}},
		{"range is not passed on", curl + "-r 0-9 " + https + "/echo/range", []string{"200", "you sent [airlock:redacted]"}},
		{"range pieces reassembled", "for i in 0 6 12 18 24 30 36 42; do curl -sS -r $i-$((i+5)) " + https + "/echo/range; done", []string{"[airlock:redacted]"}},
		{"multi-range", curl + "-r 0-9,10-19 " + https + "/echo/multirange", []string{"502", "partial response", `"reflects": false`}},
		{"stacked codings", curl + https + "/echo/gzip-gzip", []string{"502", "stacked content codings"}},
		{"gzip file", "curl -sS -o f.gz -w '%{http_code}' " + https + "/echo/gzip-file; gunzip -c f.gz; cat f.gz", []string{"502", "application/gzip"}},
		{"zip as octet-stream", curl + https + "/echo/zip", []string{"502", "zip data"}},
	}
}
