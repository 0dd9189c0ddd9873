package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/telemetry"
)

// With no span exporter the request's span records nothing and no child span is started.
// Whatever trace headers a sandbox sends (red team), its traceparent not trusted, the
// upstream gets exactly one traceparent, the request span's (named by the audit record),
// unsampled, and no tracestate: over plain HTTP and inside an intercepted tunnel. The policy
// step's duration metric is still recorded.
func TestSandboxTraceHeadersNeverReachTheUpstream(t *testing.T) {
	const sp = "00-11111111111111111111111111111111-2222222222222222-01"
	cases := []struct{ name, hdr string }{
		{"none", ""},
		{"sampled", "traceparent: " + sp + "\r\n"},
		{"upper case with state", "TRACEPARENT: " + sp + "\r\nTRACESTATE: evil=leak,x=y\r\n"},
		{"two", "traceparent: " + sp + "\r\ntraceparent: 00-33333333333333333333333333333333-4444444444444444-01\r\n"},
		{"invalid", "traceparent: 00-00000000000000000000000000000000-2222222222222222-01\r\ntracestate: a=b\r\n"},
		{"future version", "traceparent: cc-11111111111111111111111111111111-2222222222222222-09-extra\r\n"},
		{"state only", "tracestate: only=state\r\n"},
	}
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	e := newEnv(t, func(o *Options) { o.Telemetry = &OTel{T: tel} })
	for _, intercepted := range []bool{false, true} {
		for _, c := range cases {
			n := e.audit.Len()
			target := e.http.URL
			if intercepted {
				target = e.https.URL
			}
			sendRaw(t, e, intercepted, target, c.hdr)
			var up *http.Request
			select {
			case up = <-e.upstream:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s (intercepted %v): the upstream got nothing", c.name, intercepted)
			}
			e.audit.WaitSince(n, 5*time.Second, func(evs []audit.Event) bool { return len(evs) > 0 })
			want := map[string]bool{}
			for _, ev := range e.audit.Since(n) {
				want["00-"+ev.TraceID+"-"+ev.SpanID+"-00"] = true
			}
			tp := up.Header.Values("Traceparent")
			if len(tp) != 1 || !want[tp[0]] || up.Header.Values("Tracestate") != nil {
				t.Errorf("%s (intercepted %v): upstream traceparent %q tracestate %q, want one of %v and none",
					c.name, intercepted, tp, up.Header.Values("Tracestate"), want)
			}
		}
	}
	metrics := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(metrics, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(metrics.Body.String(), "airlock_policy_eval_duration_seconds_count") {
		t.Error("no policy evaluation duration metric")
	}
}

// sendRaw sends one GET for target/allowed/x through the proxy with extra header lines,
// inside a CONNECT tunnel when intercepted, and reads the answer.
func sendRaw(t *testing.T, e *env, intercepted bool, target, extra string) {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var rw net.Conn = c
	host := strings.TrimPrefix(strings.TrimPrefix(target, "http://"), "https://")
	line := "GET " + target + "/allowed/x HTTP/1.1\r\n"
	if intercepted {
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(e.ca.Certificate())
		rw = tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		line = "GET /allowed/x HTTP/1.1\r\n"
	}
	fmt.Fprintf(rw, "%sHost: %s\r\n%sConnection: close\r\n\r\n", line, host, extra)
	resp, err := http.ReadResponse(bufio.NewReader(rw), nil)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
}
