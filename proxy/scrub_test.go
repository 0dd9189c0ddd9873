package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/secrets"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// reflectEnv is the proxy with the real secrets broker, real OPA, an audit recorder and a
// debug JSON logger, in front of a Reflector served over plain HTTP, HTTPS/1.1 and HTTPS/2.
type reflectEnv struct {
	*env
	canary string
	rf     *e2etest.Reflector
	bases  map[string]string // upstream kind -> base URL
	logs   *bytes.Buffer
	logMu  *sync.Mutex
}

func newReflectEnv(t *testing.T) *reflectEnv {
	t.Helper()
	return newReflectEnvLimits(t, Limits{MaxRedactionsPerCredential: 1 << 30}) // these tests echo on purpose
}

func newReflectEnvLimits(t *testing.T, limits Limits) *reflectEnv {
	t.Helper()
	return newReflectEnvServing(t, limits, nil)
}

// newReflectEnvServing is newReflectEnvLimits in front of h instead of the Reflector.
func newReflectEnvServing(t *testing.T, limits Limits, h http.Handler) *reflectEnv {
	t.Helper()
	re := &reflectEnv{rf: &e2etest.Reflector{}, logs: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	if h == nil {
		h = re.rf
	}
	h1 := httptest.NewUnstartedServer(h)
	h1.StartTLS()
	t.Cleanup(h1.Close)
	h2 := httptest.NewUnstartedServer(h)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	plain := httptest.NewServer(h)
	t.Cleanup(plain.Close)
	re.bases = map[string]string{"http": plain.URL, "https/1.1": h1.URL, "https/2": h2.URL}

	log := slog.New(slog.NewJSONHandler(&lockedWriter{w: re.logs, mu: re.logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	eng := e2etest.EngineWith(t, rego.Options{Logger: log}, e2etest.ReflectPolicy, "")
	broker, canary := e2etest.CanaryBroker(t, log)
	re.canary = canary
	pool := x509.NewCertPool()
	pool.AddCert(h1.Certificate())
	pool.AddCert(h2.Certificate())
	re.env = &env{}
	re.start(t, Options{Decider: eng, Credentials: broker, Logger: log, UpstreamCAs: pool, Limits: limits}, nil)
	return re
}

// exchange sends one request as a sandbox would (absolute form for http, inside an
// intercepted CONNECT for https) and returns every byte it received until the proxy closed
// the connection; with stream set, it then writes stream and reads until idle.
func (re *reflectEnv) exchange(t *testing.T, base, path, headers string, stream string) []byte {
	t.Helper()
	c, err := net.Dial("tcp", re.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	host := strings.TrimPrefix(strings.TrimPrefix(base, "http://"), "https://")
	var conn net.Conn = c
	target := base + path
	if strings.HasPrefix(base, "https://") {
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %v %v", host, resp, err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(re.ca.Certificate())
		tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: strings.Split(host, ":")[0], NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		conn, target = tc, path
	}
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer sandbox-own\r\n%sConnection: close\r\n\r\n", target, host, headers)
	var got bytes.Buffer
	if stream == "" {
		_, _ = io.Copy(&got, conn)
		return got.Bytes()
	}
	buf := make([]byte, 64<<10)
	read := func() {
		for {
			_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			n, err := conn.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}
	read()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(conn, stream)
	read()
	return got.Bytes()
}

// outcome is what a sandbox got for one request.
type outcome struct {
	status  int
	header  http.Header
	trailer http.Header
	body    string
	raw     []byte
}

func parse(raw []byte) outcome {
	resps, bodies := e2etest.ReadResponses(raw, "GET")
	if len(resps) == 0 {
		return outcome{raw: raw}
	}
	last := resps[len(resps)-1]
	return outcome{status: last.StatusCode, header: last.Header, trailer: last.Trailer, body: string(bodies[len(bodies)-1]), raw: raw}
}

// TestReflectedCredentialNeverReachesTheSandbox sends the credential to an upstream that
// echoes it every way a response can (Reflector), over plain HTTP, intercepted HTTPS/1.1
// and HTTPS/2, and checks what the sandbox received byte for byte: the status line, 1xx
// responses, headers, body, trailers and an upgraded stream hold no form of it; what cannot
// be checked is refused with a 502 naming the rule; the audit events and logs hold none.
func TestReflectedCredentialNeverReachesTheSandbox(t *testing.T) {
	re := newReflectEnv(t)
	refused := map[string]string{ // way -> what the refusal names
		"multirange": "partial response", "partial": "partial response",
		"gzip-gzip": "stacked content codings", "gzip-two-headers": "stacked content codings", "br": `content-encoding "br"`,
		"gzip-file": "application/gzip", "gzip-octet": "gzip data", "zip": "zip data",
	}
	for kind, base := range re.bases {
		for _, way := range e2etest.ReflectWays {
			if strings.HasSuffix(way, "-h1") && kind == "https/2" {
				continue // hijacking needs HTTP/1
			}
			if way == "upgrade-h1" {
				continue // TestCredentialedUpgrade
			}
			t.Run(kind+"/"+way, func(t *testing.T) {
				o := parse(re.exchange(t, base, "/echo/"+way, "Range: bytes=0-9\r\nIf-Range: x\r\n", ""))
				if got, ok := re.rf.Last(way); !ok || got.Token != re.canary {
					t.Fatalf("the upstream did not receive the credential (%+v): the test would prove nothing", got)
				}
				if l := e2etest.Leak(o.raw, re.canary); l != "" {
					t.Fatalf("the sandbox received the credential (%s): %q", l, o.raw)
				}
				if got, _ := re.rf.Last(way); got.Range != "" || got.IfRange != "" {
					t.Errorf("the upstream received Range %q If-Range %q on a credentialed request", got.Range, got.IfRange)
				}
				switch {
				case slices.Contains(e2etest.CutWays, way):
					// The payload starts after the response began: the body is cut before it.
					if bytes.Contains(o.raw, []byte{0x1f, 0x8b, 0x08}) || bytes.Contains(o.raw, []byte("H4sI")) {
						t.Errorf("the compressed payload reached the sandbox: %q", o.raw)
					}
				case way == "prefix-at-end":
					// A prefix of the value is not the value: redacting it would confirm guesses.
					if o.status != 200 || !strings.HasPrefix(o.body, "ends with ") || strings.Contains(o.body, secrets.Redaction) {
						t.Errorf("got %d %q, want 200 and the prefix passed unchanged", o.status, o.body)
					}
				case refused[way] != "":
					if o.status != 502 || o.header.Get("X-Airlock-Rule") != "scrub.echo" || !strings.Contains(o.body, refused[way]) ||
						!strings.Contains(o.body, `"reflects": false`) {
						t.Errorf("got %d rule %q %q, want 502 by scrub.echo naming %q and reflects", o.status, o.header.Get("X-Airlock-Rule"), o.body, refused[way])
					}
				case way == "malformed-h1":
					if o.status != 502 || o.header.Get("X-Airlock-Rule") != "upstream" {
						t.Errorf("got %d %q, want 502 from the upstream rule", o.status, o.body)
					}
				case way == "early-hints":
					if o.status != 200 || strings.Contains(string(o.raw), " 103 ") {
						t.Errorf("got %d %q: want 200 and no 103 passed on", o.status, o.raw)
					}
				default:
					if o.status != 200 {
						t.Fatalf("got %d %q, want 200", o.status, o.body)
					}
					// A renamed header, an undeclared trailer and (in plain HTTP) the status text
					// are rewritten or dropped rather than visibly redacted.
					quiet := way == "header-name" || way == "trailer-undeclared" || way == "status-h1" && kind == "http"
					if !quiet && !strings.Contains(string(o.raw), secrets.Redaction) {
						t.Errorf("the echo was not visibly redacted: %q", o.raw)
					}
				}
				if way == "trailer" && o.trailer.Get("X-Echo") != secrets.Redaction {
					t.Errorf("declared trailer: got %q, want the redaction", o.trailer.Get("X-Echo"))
				}
			})
		}
	}
	re.checkRecords(t)
}

// checkRecords: no audit event and no log line holds the canary.
func (re *reflectEnv) checkRecords(t *testing.T) {
	t.Helper()
	evs, _ := json.Marshal(re.audit.Events())
	re.logMu.Lock()
	defer re.logMu.Unlock()
	for name, b := range map[string][]byte{"audit events": evs, "logs": re.logs.Bytes()} {
		if l := e2etest.Leak(b, re.canary); l != "" {
			t.Errorf("the %s hold the credential (%s)", name, l)
		}
	}
	if !bytes.Contains(evs, []byte("scrub.echo")) {
		t.Errorf("the audit events lack the requests: %s", evs)
	}
}

// TestUndeclaredDestinationKeepsRangeAndPayloads: a rule declaring "reflects": false gets
// the response as the upstream sent it (Range honoured, compressed files and stacked
// codings passed, Content-Length kept); headers, status text and trailers are still
// scrubbed.
func TestNonReflectingDestinationPassesBodies(t *testing.T) {
	re := newReflectEnv(t)
	for kind, base := range re.bases {
		t.Run(kind, func(t *testing.T) {
			o := parse(re.exchange(t, base, "/quiet/range", "Range: bytes=0-7\r\n", ""))
			if got, _ := re.rf.Last("range"); o.status != 206 || got.Range != "bytes=0-7" || o.body != "you sent" {
				t.Errorf("range: got %d %q (upstream saw Range %q), want 206 of the first 8 bytes", o.status, o.body, got.Range)
			}
			o = parse(re.exchange(t, base, "/quiet/gzip-file", "", ""))
			if o.status != 200 || o.body != string(e2etest.Gzip([]byte("you sent "+re.canary+" to airlock's upstream\n"))) {
				t.Errorf("gzip file: got %d, want 200 and the file as sent", o.status)
			}
			o = parse(re.exchange(t, base, "/quiet/header", "", ""))
			if o.header.Get("X-Echo") != secrets.Redaction || e2etest.Leak(o.raw, re.canary) != "" {
				t.Errorf("header: got %q, want it scrubbed", o.raw)
			}
			// (An HTTP/2 upstream's trailers reach an HTTP/1.1 client only when the body is
			// chunked, which an unread body of known length is not: then they are dropped.)
			o = parse(re.exchange(t, base, "/quiet/trailer", "", ""))
			if l := e2etest.Leak(o.raw, re.canary); l != "" || kind != "https/2" && o.trailer.Get("X-Echo") != secrets.Redaction {
				t.Errorf("trailer: got %q (leak %q), want it scrubbed", o.raw, l)
			}
		})
	}
}

// TestCredentialedUpgrade: an Upgrade on a credentialed request is refused (403 naming the
// rule) unless the rule says "upgrade": true and "reflects": false (a rule saying only
// "upgrade": true is a malformed decision); then the 101's headers are scrubbed and the
// stream passes as sent. A 101 the request did not ask for is refused.
func TestCredentialedUpgrade(t *testing.T) {
	re := newReflectEnv(t)
	ws := "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate\r\n"
	for _, kind := range []string{"http", "https/1.1"} {
		base := re.bases[kind]
		t.Run(kind+"/not allowed", func(t *testing.T) {
			n := len(re.rf.Seen())
			o := parse(re.exchange(t, base, "/echo/upgrade-h1", ws, ""))
			if o.status != 403 || o.header.Get("X-Airlock-Rule") != "scrub.echo" || !strings.Contains(o.body, `"upgrade": true`) {
				t.Errorf("got %d %q %q, want 403 by scrub.echo saying upgrade: true", o.status, o.header.Get("X-Airlock-Rule"), o.body)
			}
			if len(re.rf.Seen()) != n {
				t.Error("the refused upgrade reached the upstream")
			}
		})
		t.Run(kind+"/allowed but may reflect", func(t *testing.T) {
			n := len(re.rf.Seen())
			o := parse(re.exchange(t, base, "/ws/upgrade-h1", ws, ""))
			if o.status != 403 || o.header.Get("X-Airlock-Rule") != "scrub.ws" || !strings.Contains(o.body, `"reflects": false`) || !strings.Contains(o.body, "malformed") {
				t.Errorf("got %d %q %q, want 403 by scrub.ws: a malformed decision, upgrade needs reflects: false", o.status, o.header.Get("X-Airlock-Rule"), o.body)
			}
			if len(re.rf.Seen()) != n {
				t.Error("the refused upgrade reached the upstream")
			}
		})
		t.Run(kind+"/unsolicited 101", func(t *testing.T) {
			o := parse(re.exchange(t, base, "/wsquiet/upgrade-h1", "", ""))
			if l := e2etest.Leak(o.raw, re.canary); l != "" || o.status != 502 {
				t.Errorf("got %d (leak %q) %q, want 502", o.status, l, o.raw)
			}
		})
		t.Run(kind+"/not reflecting", func(t *testing.T) {
			raw := re.exchange(t, base, "/wsquiet/upgrade-h1", ws, "x\n")
			o := parse(raw)
			if o.status != 101 || o.header.Get("X-Echo") != secrets.Redaction || !strings.Contains(o.body, "stream says "+re.canary) {
				t.Errorf("got %d %v %q: want 101, headers scrubbed, the stream as sent", o.status, o.header, o.body)
			}
		})
	}
	re.checkRecords(t)
}

// TestRepeatedRedactionsWithholdTheCredential: each response records how many times the
// credential was redacted; a prefix of it echoed at the end is not a redaction; once the
// sandbox's responses reached the limit, the credential is withheld from it (403 naming the
// limit, the upstream not reached) with an audit event of its own, while a rule without
// credentials still works. A compressed payload cut mid-body is on the completion record.
func TestRepeatedRedactionsWithholdTheCredential(t *testing.T) {
	re := newReflectEnvLimits(t, Limits{MaxRedactionsPerCredential: 3})
	base := re.bases["http"]
	for range 4 {
		if o := parse(re.exchange(t, base, "/echo/prefix-at-end", "", "")); o.status != 200 {
			t.Fatalf("prefix: got %d %q", o.status, o.body)
		}
	}
	o := parse(re.exchange(t, base, "/echo/gzip-after-prefix", "", ""))
	if bytes.Contains(o.raw, []byte{0x1f, 0x8b, 0x08}) {
		t.Fatalf("the gzip payload reached the sandbox: %q", o.raw)
	}
	for i := range 3 {
		if o := parse(re.exchange(t, base, "/echo/body", "", "")); o.status != 200 || !strings.Contains(o.body, secrets.Redaction) {
			t.Fatalf("echo %d: got %d %q, want 200 and a redaction", i, o.status, o.body)
		}
	}
	n := len(re.rf.Seen())
	o = parse(re.exchange(t, base, "/echo/body", "", ""))
	if o.status != 403 || o.header.Get("X-Airlock-Rule") != "limits.redactions" || !strings.Contains(o.body, "canary") || !strings.Contains(o.body, "3 times") {
		t.Errorf("after the limit: got %d %q %q, want 403 by limits.redactions naming canary", o.status, o.header.Get("X-Airlock-Rule"), o.body)
	}
	if len(re.rf.Seen()) != n {
		t.Error("the withheld credential's request reached the upstream")
	}
	if o := parse(re.exchange(t, base, "/open/body", "", "")); o.status != 200 {
		t.Errorf("a request without credentials: got %d, want 200", o.status)
	}
	var withheld, counted, cut int
	for _, ev := range re.audit.Events() {
		switch {
		case ev.Kind == "credential.withheld":
			withheld++
			if ev.Rule != "limits.redactions" || len(ev.Creds) != 1 || ev.Creds[0] != "canary" {
				t.Errorf("withheld event %+v", ev)
			}
		case ev.Stage == "completion" && strings.HasSuffix(ev.Path, "/body") && ev.Rule == "scrub.echo":
			counted++
			if ev.Redactions != 1 {
				t.Errorf("completion of %s: %d redactions, want 1", ev.Path, ev.Redactions)
			}
		case ev.Stage == "completion" && strings.HasSuffix(ev.Path, "/prefix-at-end") && ev.Redactions != 0:
			t.Errorf("a trailing prefix counted %d redactions", ev.Redactions)
		case ev.Stage == "completion" && strings.HasSuffix(ev.Path, "/gzip-after-prefix"):
			cut++
			if ev.ErrorClass != "uninspectable" || !strings.Contains(ev.Reason, "gzip") {
				t.Errorf("cut response recorded as %q %q, want uninspectable naming gzip", ev.ErrorClass, ev.Reason)
			}
		}
	}
	if withheld != 1 || counted != 3 || cut != 1 {
		t.Errorf("got %d withheld events, %d counted completions, %d cut; want 1, 3, 1", withheld, counted, cut)
	}
	re.checkRecords(t)
}
